"""A small PromQL tokenizer for the dashboard tests: which series a query selects, and with which label matchers.

Enough of PromQL for kiln's dashboards (selectors, matchers, functions, aggregations with by/without, binary
operators with on/ignoring/group_*, ranges, offsets, numbers, Grafana's $variables); anything it does not
know is a ValueError, so a query it cannot read fails its test instead of passing unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AGGREGATIONS = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
        "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip
FUNCTIONS = frozenset(
    {
        "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
        "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
        "floor", "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join",
        "label_replace", "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute",
        "month", "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets", "round",
        "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time",
        "time", "timestamp", "vector", "year",
    }
)  # fmt: skip
# Words that introduce a list of label names in parentheses.
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = LABEL_LISTS | {"bool", "and", "or", "unless", "offset", "atan2"}
MATCH_OPERATORS = ("=", "!=", "=~", "!~")

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{\w+(?::[^}]*)?\}|\$\w+|\[\[\w+\]\])
  | (?P<range>\[[^\[\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w:]))
  | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf|NaN)(?![\w:]))
  | (?P<identifier>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<operator>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    at: int


@dataclass(frozen=True)
class Selector:
    """One vector selector: a metric name and its label matchers (label, operator, value without quotes)."""

    metric: str
    matchers: tuple[tuple[str, str, str], ...]

    def matcher(self, label: str) -> tuple[str, str] | None:
        """Return (operator, value) of the matcher on LABEL, or None."""
        found = [(op, value) for name, op, value in self.matchers if name == label]
        return found[0] if found else None


def tokenize(query: str) -> list[Token]:
    """Split QUERY into tokens (whitespace dropped); ValueError at the first character no token starts with."""
    tokens, at = [], 0
    while at < len(query):
        match = _TOKEN.match(query, at)
        if match is None:
            raise ValueError(f"cannot read {query[at : at + 20]!r} at {at} of {query!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(), at))
        at = match.end()
    return tokens


def _unquote(text: str) -> str:
    return text[1:-1]


def selectors(query: str) -> list[Selector]:
    """Return every vector selector of QUERY in order; ValueError for an unknown function or unbalanced brackets."""
    tokens = tokenize(query)
    found: list[Selector] = []
    depth = 0
    index = 0
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.kind == "operator" and token.text == "(":
            depth += 1
        elif token.kind == "operator" and token.text == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' at {token.at} of {query!r}")
        elif token.kind == "operator" and token.text == "{":
            # A selector without a metric name ({job="x"}).
            matchers, index = _matchers(tokens, index, query)
            found.append(Selector("", matchers))
            continue
        elif token.kind == "identifier":
            word = token.text
            if word in LABEL_LISTS and following is not None and following.text == "(":
                index = _skip_label_list(tokens, index + 1, query)
                continue
            if word in KEYWORDS:
                pass
            elif word in AGGREGATIONS and following is not None and following.text in ("by", "without"):
                pass  # sum by (label) (...)
            elif following is not None and following.text == "(":
                if word not in AGGREGATIONS | FUNCTIONS:
                    raise ValueError(f"unknown function {word!r} at {token.at} of {query!r}")
            else:
                matchers: tuple[tuple[str, str, str], ...] = ()
                index += 1
                if following is not None and following.text == "{":
                    matchers, index = _matchers(tokens, index, query)
                found.append(Selector(word, matchers))
                continue
        index += 1
    if depth:
        raise ValueError(f"unbalanced '(' in {query!r}")
    return found


def _skip_label_list(tokens: list[Token], at: int, query: str) -> int:
    """Skip the parenthesized label names starting at AT (an opening parenthesis); return the index after it."""
    index = at + 1
    while index < len(tokens) and tokens[index].text != ")":
        if tokens[index].kind != "identifier" and tokens[index].text != ",":
            raise ValueError(f"not a label name: {tokens[index].text!r} in {query!r}")
        index += 1
    if index == len(tokens):
        raise ValueError(f"unclosed label list in {query!r}")
    return index + 1


def _matchers(tokens: list[Token], at: int, query: str) -> tuple[tuple[tuple[str, str, str], ...], int]:
    """Read the matchers of the braces opening at AT; return them and the index after the closing brace."""
    matchers = []
    index = at + 1
    while index < len(tokens) and tokens[index].text != "}":
        if tokens[index].text == ",":
            index += 1
            continue
        try:
            name, operator, value = tokens[index : index + 3]
        except ValueError:
            raise ValueError(f"unclosed matchers in {query!r}") from None
        if name.kind != "identifier" or operator.text not in MATCH_OPERATORS or value.kind != "string":
            raise ValueError(f"not a label matcher: {name.text}{operator.text}{value.text} in {query!r}")
        matchers.append((name.text, operator.text, _unquote(value.text)))
        index += 3
    if index == len(tokens):
        raise ValueError(f"unclosed matchers in {query!r}")
    return tuple(matchers), index + 1


def metric_names(query: str) -> set[str]:
    """Return the metric names QUERY selects."""
    return {selector.metric for selector in selectors(query)}
