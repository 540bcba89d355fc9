"""Handing a node kiln drained to HyperPod's replacement: only kiln's drains, only once no job is left on the node,
only where the bootstrap said the platform must be told."""

from __future__ import annotations

import pytest

from kiln.catalog.platforms import service_fact
from kiln.launcher.replacement import HYPERPOD_REASON, REPLACEMENT_VARIABLE, hand_over
from tests.support.fake_slurm_state import fake_slurm

KILNS = "kiln-health: container-space: 0.0 GiB free"


def test_hyperpods_word_is_the_one_its_resiliency_page_gives():
    fact = service_fact("hyperpod", "slurm_node_replacement")
    assert HYPERPOD_REASON == "Action:Replace" == fact.value["manual_reason"]
    assert "sagemaker-hyperpod-resiliency-slurm-replace-faulty-instance.html" in fact.note


def test_an_idle_node_kiln_drained_is_set_fail_with_hyperpods_word(tmp_path):
    slurm = fake_slurm(tmp_path, nodes={"node2": {"state": "IDLE+DRAIN", "reason": KILNS}})
    done = hand_over("node2", {**slurm.environ, REPLACEMENT_VARIABLE: "hyperpod"})
    assert done is not None and done["action"] == "replace" and done["ok"]
    # kiln's reason is in the line the journal keeps: the FAIL takes the reason field.
    assert done["detail"].endswith(f"kiln had drained it: {KILNS}")
    assert slurm.node("node2") == {"state": "FAIL", "reason": HYPERPOD_REASON}
    assert slurm.calls()[-1] == ["update", "NodeName=node2", "State=FAIL", f"Reason={HYPERPOD_REASON}"]


@pytest.mark.parametrize(
    ("node", "platform", "expected"),
    [
        ({"state": "MIXED+DRAIN", "reason": KILNS}, "hyperpod", "replaced once idle"),
        ({"state": "IDLE+DRAIN+COMPLETING", "reason": KILNS}, "hyperpod", "replaced once idle"),
        ({"state": "IDLE+DRAIN", "reason": "RMA ticket 7"}, "hyperpod", None),
        ({"state": "IDLE", "reason": ""}, "hyperpod", None),
        ({"state": "IDLE+DRAIN", "reason": KILNS}, "", None),
    ],
    ids=["job-running", "completing", "a-persons-drain", "in-service", "not-hyperpod"],
)
def test_anything_else_is_left_as_it_is(tmp_path, node, platform, expected):
    slurm = fake_slurm(tmp_path, nodes={"node2": node})
    done = hand_over("node2", {**slurm.environ, REPLACEMENT_VARIABLE: platform})
    if expected is None:
        assert done is None
    else:
        assert done is not None and done["action"] == "none" and done["detail"].endswith(expected)
    assert slurm.node("node2") == node
    assert not any(call[0] == "update" for call in slurm.calls())
