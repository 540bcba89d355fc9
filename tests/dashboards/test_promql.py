"""The tests' PromQL tokenizer reads what kiln's dashboards write, and refuses what it cannot read."""

from __future__ import annotations

import pytest

from tests.support.promql import Selector, metric_names, selectors, tokenize


def test_selectors_carry_their_matchers_and_skip_functions_and_label_lists() -> None:
    query = (
        'sum by (instance, device) (rate(kiln_efa_tx_bytes_total{cluster="$cluster", instance=~"$instance"}'
        "[$__rate_interval])) / on (instance) group_left () count(up)"
    )
    assert selectors(query) == [
        Selector("kiln_efa_tx_bytes_total", (("cluster", "=", "$cluster"), ("instance", "=~", "$instance"))),
        Selector("up", ()),
    ]


def test_strings_hide_braces_commas_and_words() -> None:
    query = 'node_filesystem_avail_bytes{mountpoint=~"/|/fsx|{a,b}", fstype!="rate(x)"} > 0'
    (selector,) = selectors(query)
    assert selector.metric == "node_filesystem_avail_bytes"
    assert selector.matcher("mountpoint") == ("=~", "/|/fsx|{a,b}")
    assert selector.matcher("fstype") == ("!=", "rate(x)")
    assert selector.matcher("cluster") is None


def test_numbers_durations_offsets_and_keywords_are_not_metrics() -> None:
    query = "100 * (1 - avg(x offset 5m)) or vector(0) and on () Inf_metric > bool 1e3"
    assert metric_names(query) == {"x", "Inf_metric"}


def test_grafana_variables_are_tokens_of_their_own() -> None:
    kinds = [t.kind for t in tokenize('a{b="$c"}[$__range] offset $d')]
    assert kinds == ["identifier", "operator", "identifier", "operator", "string", "operator", "range",
                     "identifier", "variable"]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("nonsense_fn(up)", "unknown function 'nonsense_fn'"),
        ("sum(up", "unbalanced '\\('"),
        ("up)", "unbalanced '\\)'"),
        ('up{cluster="a"', "unclosed matchers"),
        ("up{cluster=a}", "not a label matcher"),
        ("up # comment", "cannot read"),
        ("sum by (1) (up)", "not a label name"),
    ],
)
def test_what_it_cannot_read_is_an_error(query: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        selectors(query)
