"""Which nodes the local node replacer takes, and what it records (kiln.local.replacer); the end-to-end replacement is
proven on the real cluster in tests/local/test_resilience_e2e.py."""

from __future__ import annotations

import json
import sys

import pytest

from kiln.local import replacer
from kiln.local.layout import plan_layout
from kiln.local.slurm import NodeStatus, parse_sinfo


def _statuses(*rows: str) -> dict[str, NodeStatus]:
    return parse_sinfo("\n".join(rows))


@pytest.mark.parametrize(
    ("row", "taken"),
    [
        ("node2|drained|4|2048|kiln-health: container-space: 0.0 GiB free", True),
        ("node2|down*|4|2048|Not responding", True),
        ("node2|down|4|2048|kiln-hang: rank 3 on node2", True),
        # Still running a job: a drained node is replaced once its jobs are gone, as a platform waits for them.
        ("node2|draining|4|2048|kiln-health: gpus: 7 of 8", False),
        # A person's drain or down is theirs.
        ("node2|drained|4|2048|disk swap by ops", False),
        ("node2|down|4|2048|maintenance", False),
        ("node2|idle|4|2048|none", False),
        ("node2|allocated|4|2048|none", False),
    ],
)
def test_only_nodes_kiln_drained_or_slurm_lost_are_replaced(row, taken):
    found = replacer.replaceable(_statuses("node1|idle|4|2048|none", row))
    assert [r.node for r in found] == (["node2"] if taken else [])


def test_the_reason_and_state_travel_with_the_replacement():
    (found,) = replacer.replaceable(_statuses("node3|drained|4|2048|kiln-health: shared-fs: /x does not answer"))
    assert (found.node, found.state, found.reason) == ("node3", "drained", "kiln-health: shared-fs: /x does not answer")


def test_the_daemon_runs_this_python_on_the_cluster_prefix():
    assert replacer.argv("/p") == [sys.executable, "-m", "kiln.cli", "local", "replace", "--watch", "--prefix", "/p"]


def test_a_replacement_is_recorded_as_one_event_and_a_failure_is_retried_later(tmp_path):
    layout = plan_layout(prefix=str(tmp_path / "p"), nodes=2)
    wanted = replacer.Replacement(node="node2", state="drained", reason="kiln-health: x")
    calls = []

    def works(prefix, name, out):
        calls.append(name)

    def fails(prefix, name, out):
        from kiln.local.errors import LocalFailure

        raise LocalFailure("slurmd did not start")

    with open(tmp_path / "out", "w") as out:
        assert replacer._replace(tmp_path, layout, wanted, out, works) is True
        assert replacer._replace(tmp_path, layout, wanted, out, fails) is False
    events = replacer.read_events(layout)
    assert [e["outcome"] for e in events] == ["replaced", "failed"]
    assert events[1]["detail"] == "slurmd did not start" and calls == ["node2"]
    assert all(e["finished_at"] >= e["started_at"] for e in events)
    assert json.loads(replacer.events_path(layout).read_text().splitlines()[0])["reason"] == "kiln-health: x"
    log = (tmp_path / "out").read_text()
    assert "replacing node2 (drained: kiln-health: x)" in log and "node2 not replaced: slurmd did not start" in log


def test_a_spec_without_node_recovery_has_no_replacer(tmp_path):
    from kiln.local.cluster import _roles

    on = plan_layout(prefix=str(tmp_path / "a"), nodes=2)
    off = plan_layout(prefix=str(tmp_path / "b"), nodes=2, replace_nodes=False)
    assert replacer.ROLE in _roles(on) and replacer.ROLE not in _roles(off)
