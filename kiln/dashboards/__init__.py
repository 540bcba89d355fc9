"""kiln's Grafana dashboards: JSON files in Grafana's dashboard model, and the PromQL they hold. Standard library only.

Every dashboard has a stable uid (kiln-<name>), a data source variable `datasource` (Prometheus) that every panel
queries, and a `cluster` variable; every query selects `cluster="$cluster"`, the label the scraper adds to every
series. kiln.constructs.grafana uploads them to Amazon Managed Grafana.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parent
# Grafana's own variables, and the values substitute_variables gives them unless told otherwise.
BUILTIN_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")
_VARIABLE_FUNCTION = re.compile(r"^\s*(label_values|query_result|label_names|metrics)\s*\((.*)\)\s*$", re.DOTALL)


def dashboard_files() -> tuple[Path, ...]:
    """Return the dashboard files, sorted by name."""
    return tuple(sorted(DASHBOARDS_DIR.glob("*.json")))


def dashboard_names() -> tuple[str, ...]:
    """Return the names of the dashboards (their file names without .json), sorted."""
    return tuple(path.stem for path in dashboard_files())


def load_dashboard(name: str) -> dict[str, Any]:
    """Return the dashboard NAME (e.g. "gpu") as Grafana's dashboard model; ValueError for an unknown name."""
    names = dashboard_names()
    if name not in names:
        raise ValueError(f"dashboard: got {name!r}; allowed: {', '.join(names)}")
    return json.loads((DASHBOARDS_DIR / f"{name}.json").read_text())


def all_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield every panel of DASHBOARD: top-level ones, those inside rows (collapsed or legacy) and nested ones."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels") or [])

    yield from walk(list(dashboard.get("panels") or []))
    for row in dashboard.get("rows") or []:
        yield from walk(list(row.get("panels") or []))


def variable_query(variable: Mapping[str, Any]) -> str | None:
    """Return the PromQL a query variable asks Prometheus, or None when it asks none.

    Grafana's variable functions are not PromQL: label_values(SELECTOR, LABEL) asks for SELECTOR's series (their
    LABEL values), query_result(QUERY) evaluates QUERY; label_values(LABEL), label_names() and metrics() select no
    series. Any other query is PromQL itself.
    """
    if variable.get("type") != "query":
        return None
    query = variable.get("query")
    if isinstance(query, Mapping):
        query = query.get("query")
    if not isinstance(query, str) or not query.strip():
        return None
    called = _VARIABLE_FUNCTION.match(query)
    if called is None:
        return query.strip()
    function, arguments = called.groups()
    if function == "query_result":
        return arguments.strip()
    if function == "label_values":
        selector, _, _label = _split_last_argument(arguments)
        return selector.strip() or None
    return None


def _split_last_argument(arguments: str) -> tuple[str, str, str]:
    """Split ARGUMENTS at its last top-level comma (outside strings, braces, brackets and parentheses)."""
    depth, quote, cut = 0, "", -1
    escaped = False
    for index, char in enumerate(arguments):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'`":
            quote = char
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif char == "," and depth == 0:
            cut = index
    if cut < 0:
        return "", "", arguments
    return arguments[:cut], ",", arguments[cut + 1 :]


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[str]:
    """Return every PromQL query of DASHBOARD: each panel target's expr (nested panels and rows included), then
    what each template variable asks Prometheus (see variable_query). Queries keep Grafana's variables
    ($cluster, $__rate_interval); substitute_variables fills them in."""
    queries = [
        target["expr"]
        for panel in all_panels(dashboard)
        for target in panel.get("targets") or []
        if isinstance(target.get("expr"), str) and target["expr"].strip()
    ]
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable_query(variable)
        if query is not None:
            queries.append(query)
    return queries


def substitute_variables(query: str, values: Mapping[str, str]) -> str:
    """Return QUERY with Grafana's variables ($name, ${name}, ${name:format}, [[name]]) replaced by VALUES.

    Grafana's built-ins ($__rate_interval, $__interval, $__range) default to BUILTIN_VARIABLES. A variable without
    a value is a ValueError naming it. A multi-value variable selected with =~ takes a regular expression (".*").
    """
    known = {**BUILTIN_VARIABLES, **values}
    missing = sorted({name for name in _variable_names(query) if name not in known})
    if missing:
        raise ValueError(f"query: no value for {', '.join('$' + name for name in missing)}: {query}")
    return _VARIABLE.sub(lambda m: known[next(group for group in m.groups() if group)], query)


def _variable_names(query: str) -> list[str]:
    return [next(group for group in match.groups() if group) for match in _VARIABLE.finditer(query)]


def query_variables(query: str) -> set[str]:
    """Return the names of the Grafana variables QUERY uses."""
    return set(_variable_names(query))
