"""kiln's dashboards: they load, every panel queries the data source variable, every query selects only the metrics
kiln's exporters serve and only the chosen cluster's series, and panels sit on Grafana's grid without overlapping."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest

from kiln.dashboards import (
    BUILTIN_VARIABLES,
    DASHBOARDS_DIR,
    all_panels,
    dashboard_files,
    dashboard_names,
    dashboard_queries,
    load_dashboard,
    query_variables,
    substitute_variables,
    variable_query,
)
from tests.support.promql import metric_names, selectors

NAMES = ("cluster", "efa", "gpu", "slurm")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What each exporter serves (node exporter and NVIDIA's DCGM exporter by their standard names; kiln's own EFA and
# Slurm exporters by the names they are written with): each dashboard reads its exporter alone.
ALLOWED = {
    "cluster": {
        "up",
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_filesystem_avail_bytes",
        "node_filesystem_size_bytes",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
    },
    "gpu": {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    },
    "efa": {
        "kiln_efa_devices",
        "kiln_efa_port_active",
        *(
            f"kiln_efa_{counter}_total"
            for counter in (
                "tx_bytes",
                "rx_bytes",
                "rdma_read_bytes",
                "rdma_write_bytes",
                "rx_drops",
                "retrans_pkts",
                "retrans_timeout_events",
                "unresponsive_remote_events",
                "impaired_remote_conn_events",
            )
        ),
    },
    "slurm": {
        "kiln_slurm_up",
        "kiln_slurm_nodes",
        "kiln_slurm_node_state",
        "kiln_slurm_node_cpus",
        "kiln_slurm_node_cpus_allocated",
        "kiln_slurm_node_gpus",
        "kiln_slurm_node_gpus_allocated",
        "kiln_slurm_jobs",
        "kiln_slurm_jobs_pending_reason",
        "kiln_slurm_jobs_restarts",
        "kiln_slurm_node_reason",
        "kiln_slurm_scrape_duration_seconds",
    },
}
# Counters only make sense as rates or increases.
RATE_FUNCTIONS = ("rate(", "irate(", "increase(")


@pytest.fixture(scope="module", params=NAMES)
def named(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, load_dashboard(request.param)


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard["templating"]["list"]}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows are layout)."""
    return [panel for panel in all_panels(dashboard) if panel["type"] != "row"]


# --- the files -----------------------------------------------------------------------------------------------


def test_the_four_dashboards_are_files_of_the_package() -> None:
    assert dashboard_names() == NAMES
    assert dashboard_files() == tuple(DASHBOARDS_DIR / f"{name}.json" for name in NAMES)
    for path in dashboard_files():
        # Written as Grafana exports them: indented JSON ending in a newline, nothing else.
        assert json.loads(path.read_text()) == load_dashboard(path.stem)
        assert path.read_text().endswith("}\n")


def test_an_unknown_dashboard_is_refused_with_the_names_allowed() -> None:
    with pytest.raises(ValueError, match=r"^dashboard: got 'gpus'; allowed: cluster, efa, gpu, slurm$"):
        load_dashboard("gpus")


def test_uids_are_stable_unique_and_fit_grafana() -> None:
    uids = [load_dashboard(name)["uid"] for name in NAMES]
    assert uids == [f"kiln-{name}" for name in NAMES]
    assert all(len(uid) <= 40 for uid in uids)  # Grafana's limit for a uid
    titles = [load_dashboard(name)["title"] for name in NAMES]
    assert len(set(titles)) == len(titles)


def test_each_dashboard_is_a_new_dashboard_of_the_current_schema(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    assert dashboard["id"] is None  # Grafana assigns ids; the uid is what identifies it
    assert dashboard["schemaVersion"] == 39
    assert "kiln" in dashboard["tags"]
    assert dashboard["description"].strip()


# --- data source and variables -------------------------------------------------------------------------------


def test_the_datasource_variable_picks_a_prometheus_data_source(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    variables = _variables(dashboard)
    assert dashboard["templating"]["list"][0]["name"] == "datasource"  # first: the others query through it
    assert {k: variables["datasource"][k] for k in ("type", "query", "multi", "includeAll")} == {
        "type": "datasource",
        "query": "prometheus",
        "multi": False,
        "includeAll": False,
    }


def test_the_cluster_variable_lists_the_clusters_of_the_dashboards_own_exporter(
    named: tuple[str, dict[str, Any]],
) -> None:
    name, dashboard = named
    cluster = _variables(dashboard)["cluster"]
    assert cluster["type"] == "query" and cluster["datasource"] == DATASOURCE
    assert cluster["multi"] is False and cluster["includeAll"] is False
    assert cluster["query"].startswith("label_values(") and cluster["query"].endswith(", cluster)")
    assert metric_names(variable_query(cluster) or "") <= ALLOWED[name]


def test_every_panel_and_target_queries_the_datasource_variable(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    panels = _panels(dashboard)
    assert panels
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_panels_are_the_kinds_kiln_uses_with_titles_descriptions_and_distinct_ref_ids(
    named: tuple[str, dict[str, Any]],
) -> None:
    _, dashboard = named
    for panel in _panels(dashboard):
        assert panel["type"] in ("timeseries", "stat", "table")
        assert panel["title"].strip() and panel["description"].strip()
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        if panel["type"] == "table":
            assert all(t.get("instant") and t.get("format") == "table" for t in panel["targets"]), panel["title"]


def test_every_variable_a_query_uses_is_defined(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    defined = set(_variables(dashboard)) | set(BUILTIN_VARIABLES)
    for query in dashboard_queries(dashboard):
        assert query_variables(query) <= defined, query


# --- the queries ---------------------------------------------------------------------------------------------


def test_dashboard_queries_returns_every_target_and_variable_query(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    targets = [target["expr"] for panel in _panels(dashboard) for target in panel["targets"]]
    variables = [variable_query(v) for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert all(variables)
    assert dashboard_queries(dashboard) == targets + variables


def test_queries_select_only_the_metrics_of_the_dashboards_exporter(named: tuple[str, dict[str, Any]]) -> None:
    name, dashboard = named
    used: set[str] = set()
    for query in dashboard_queries(dashboard):
        names = metric_names(query)
        assert names <= ALLOWED[name], (query, names - ALLOWED[name])
        used |= names
    # And the dashboard shows every metric its exporter serves.
    assert used == ALLOWED[name]


def test_every_selector_filters_on_the_chosen_cluster(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    cluster_variable = variable_query(_variables(dashboard)["cluster"])
    for query in dashboard_queries(dashboard):
        if query == cluster_variable:
            continue  # it lists the clusters to choose from
        found = selectors(query)
        assert found, query
        for selector in found:
            assert selector.metric, query  # every selector names its metric
            assert selector.matcher("cluster") == ("=", "$cluster"), query


def test_multi_value_variables_are_matched_as_regular_expressions(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    multi = {name for name, v in _variables(dashboard).items() if v.get("multi")}
    for name in multi:
        assert _variables(dashboard)[name]["allValue"] == ".*"  # "All" is a regex, not a list of every value
    for query in dashboard_queries(dashboard):
        for selector in selectors(query):
            for label, operator, value in selector.matchers:
                if query_variables(value) & multi:
                    assert operator == "=~", (query, label)


def test_counters_are_read_as_rates(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    for query in dashboard_queries(dashboard):
        for metric in metric_names(query):
            if metric.endswith("_total") and metric != "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
                assert query.startswith("label_values") or any(f in query for f in RATE_FUNCTIONS), query


def test_every_query_is_valid_once_its_variables_are_filled_in(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    values = {"datasource": "kiln-amp", "cluster": "llm", "instance": ".*", "partition": ".*"}
    for query in dashboard_queries(dashboard):
        filled = substitute_variables(query, values)
        assert "$" not in filled and "[[" not in filled
        assert selectors(filled)  # still readable


# --- layout --------------------------------------------------------------------------------------------------


def test_panel_ids_are_unique(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert not [i for i, n in Counter(ids).items() if n > 1]


def test_panels_sit_on_the_grid_without_overlapping(named: tuple[str, dict[str, Any]]) -> None:
    _, dashboard = named
    cells: dict[tuple[int, int], str] = {}
    for panel in all_panels(dashboard):
        grid = panel["gridPos"]
        x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
        assert min(x, y) >= 0 and w >= 1 and x + w <= 24 and 1 <= h <= 30, panel["title"]
        if panel["type"] == "row":
            assert (x, w, h) == (0, 24, 1) and not panel["collapsed"] and not panel["panels"], panel["title"]
        for cell in ((cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)):
            assert cell not in cells, f"{panel['title']} overlaps {cells[cell]}"
            cells[cell] = panel["title"]
    # No gaps between rows: each row starts where the panels above it end.
    bottom = 0
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            assert panel["gridPos"]["y"] == bottom, panel["title"]
        bottom = max(bottom, panel["gridPos"]["y"] + panel["gridPos"]["h"])


# --- dashboard_queries and substitute_variables on other shapes ----------------------------------------------


def test_queries_are_found_in_collapsed_rows_legacy_rows_and_every_variable_form() -> None:
    dashboard = {
        "panels": [
            {"type": "timeseries", "targets": [{"expr": "a"}, {"expr": " "}, {"refId": "B"}]},
            {"type": "row", "collapsed": True, "panels": [{"type": "stat", "targets": [{"expr": "b"}]}]},
        ],
        "rows": [{"panels": [{"type": "graph", "targets": [{"expr": "c"}]}]}],
        "templating": {
            "list": [
                {"type": "datasource", "name": "datasource", "query": "prometheus"},
                {"type": "query", "name": "v1", "query": 'label_values(d{x="1,2", y=~"(a,b)"}, node)'},
                {"type": "query", "name": "v2", "query": {"query": "query_result(max by (e) (f))", "refId": "X"}},
                {"type": "query", "name": "v3", "query": "label_values(node)"},
                {"type": "query", "name": "v4", "query": "label_names()"},
                {"type": "query", "name": "v5", "query": "metrics(kiln_.*)"},
                {"type": "query", "name": "v6", "query": "sum(g)"},
                {"type": "custom", "name": "v7", "query": "a,b"},
            ]
        },
    }
    assert dashboard_queries(dashboard) == ["a", "b", "c", 'd{x="1,2", y=~"(a,b)"}', "max by (e) (f)", "sum(g)"]


def test_substitute_variables_fills_every_spelling_and_names_what_is_missing() -> None:
    query = 'rate(x{a="$a", b=~"${b}", c="${c:regex}", d="[[d]]"}[$__rate_interval])'
    assert (
        substitute_variables(query, {"a": "1", "b": ".*", "c": "3", "d": "4"})
        == 'rate(x{a="1", b=~".*", c="3", d="4"}[5m])'
    )
    assert substitute_variables("increase(y[$__range])", {"__range": "6h"}) == "increase(y[6h])"
    with pytest.raises(ValueError, match=r"^query: no value for \$b, \$c: "):
        substitute_variables('x{a="$a", b="$b", c="$c"}', {"a": "1"})


def test_load_dashboard_returns_a_fresh_copy() -> None:
    first = load_dashboard("gpu")
    pristine = copy.deepcopy(first)
    first["panels"].clear()
    assert load_dashboard("gpu") == pristine
