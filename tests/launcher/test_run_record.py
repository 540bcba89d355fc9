"""The run record's name (Slurm's node name, the requeue count) and its attempts (format 2)."""

from __future__ import annotations

import re
from pathlib import Path

from kiln.launcher import record

STARTED = 1_796_000_000.0


def test_records_are_named_after_slurms_node_and_requeue_count():
    assert record.node_label(1, {"SLURMD_NODENAME": "node2"}) == "node2"
    assert record.node_label(1, {"SLURMD_NODENAME": "ip-10-0-1-5/../x"}) == "ip-10-0-1-5_.._x"
    assert record.node_label(1, {}) == "node1"
    assert record.node_label(None, {}) == "nodex"
    path = record.default_path(Path("/jobs/77"), "node2", STARTED, "3")
    assert re.fullmatch(r"\d{8}T\d{6}Z-node2-restart3-\d+\.json", path.name), path.name
    assert path.parent == Path("/jobs/77/runs")
    assert "-restart" not in record.default_path(Path("/j"), "node0", STARTED, None).name


def test_a_new_record_keeps_the_format_and_slurms_requeue_count():
    fresh = record.new_record(STARTED, ["train.py"], {"SLURM_RESTART_COUNT": "2"})
    assert (fresh["format"], fresh["slurm_restart_count"], fresh["attempts"]) == (2, 2, [])
    assert record.new_record(STARTED, [], {})["slurm_restart_count"] is None


def test_attempts_merge_torchruns_failures_with_the_heartbeats_last_steps():
    failed = [
        {"attempt": 0, "ended": "failed", "at": "t0", "failures": [{"rank": 1, "exitcode": -9, "signal": "SIGKILL"}]}
    ]
    beats = [
        {"attempt": 0, "rank": 0, "step": 18},
        {"attempt": 0, "rank": 1, "step": 18},
        {"attempt": 1, "rank": 0, "step": 50},
        {"attempt": 1, "rank": 1, "step": 50},
    ]
    first, second = record.attempts(failed, beats, "succeeded")
    assert first["ended"] == "failed" and first["failures"][0]["signal"] == "SIGKILL"
    assert first["last_steps"] == {"0": 18, "1": 18}
    assert second == {"attempt": 1, "ended": "succeeded", "failures": [], "last_steps": {"0": 50, "1": 50}}


def test_an_attempt_neither_failed_nor_last_was_restarted_and_no_data_is_no_attempts():
    beats = [{"attempt": 0, "rank": 0, "step": 4}, {"attempt": 1, "rank": 0, "step": 9}]
    assert [a["ended"] for a in record.attempts([], beats, "hung")] == ["restarted", "hung"]
    assert record.attempts([], [], "succeeded") == []
