"""A small model of IAM's evaluation of one identity-based policy, for the tests: an explicit Deny wins, then an Allow,
else nothing (an implicit deny). Wildcards * and ? in actions and resources, policy variables given as context, and
the condition operators kiln's policies use: StringEquals, StringNotEquals, StringLike, StringNotLike, ArnLike,
ArnEquals and Null, each with IAM's semantics for a missing key (a negated operator matches it; Null tests it), and
their ForAnyValue: form (some value of a multivalued key matches; an absent key matches nothing). NotResource matches
every resource its patterns do not; a variable with a default (${key, 'default'}) takes the default when the key is
not given. https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notresource.html and
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

Context = Mapping[str, str | Sequence[str]]


@cache
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text), re.DOTALL)


def like(pattern: str, value: str) -> bool:
    """Return whether VALUE matches IAM's wildcard PATTERN (* any run, ? one character)."""
    return _pattern(pattern).fullmatch(value) is not None


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


_DEFAULTED = re.compile(r"\$\{([^},]+), '([^']*)'\}")


def _substitute(text: str, variables: Mapping[str, str]) -> str:
    text = _DEFAULTED.sub(lambda m: variables.get(m.group(1), m.group(2)), text)
    for name, value in variables.items():
        text = text.replace("${" + name + "}", value)
    return text


def _condition_holds(
    condition: Mapping[str, Mapping[str, Any]], context: Context, variables: Mapping[str, str]
) -> bool:
    for operator, tests in condition.items():
        for key, wanted in tests.items():
            wanted = [_substitute(str(w), variables) for w in _listed(wanted)]
            present = key in context
            values = [str(v) for v in _listed(context[key])] if present else []
            if operator == "Null":
                # "true": the key is absent; "false": present.
                if (wanted[0] == "true") == present:
                    return False
                continue
            any_value = operator.startswith("ForAnyValue:")
            operator = operator.removeprefix("ForAnyValue:")
            negated = "Not" in operator
            if any_value and negated:
                raise AssertionError(f"operator ForAnyValue:{operator} is not modelled")
            if not present:
                if negated:
                    continue
                return False
            if operator in ("StringEquals", "ArnEquals", "StringNotEquals", "ArnNotEquals"):
                hit = any(v == w for v in values for w in wanted)
            elif operator in ("StringLike", "ArnLike", "StringNotLike", "ArnNotLike"):
                hit = any(like(w, v) for v in values for w in wanted)
            else:
                raise AssertionError(f"operator {operator} is not modelled")
            if hit == negated:
                return False
    return True


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Context, variables) -> bool:
    if not any(like(a, action) for a in _listed(statement.get("Action", []))):
        return False
    if "NotResource" in statement:
        if any(like(_substitute(r, variables), resource) for r in _listed(statement["NotResource"])):
            return False
    elif not any(like(_substitute(r, variables), resource) for r in _listed(statement.get("Resource", []))):
        return False
    return _condition_holds(statement.get("Condition", {}), context, variables)


def decision(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Context = {},  # noqa: B006 - read only
    variables: Mapping[str, str] = {},  # noqa: B006 - read only
) -> str:
    """Return "Deny", "Allow" or "None" (implicitly denied) for ACTION on RESOURCE under STATEMENTS."""
    matched = [s for s in statements if _matches(s, action, resource, context, variables)]
    if any(s["Effect"] == "Deny" for s in matched):
        return "Deny"
    return "Allow" if matched else "None"
