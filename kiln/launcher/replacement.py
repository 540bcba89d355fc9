"""Hand a node kiln drained to the platform that replaces it, where the platform needs to be told.

ParallelCluster's clustermgtd replaces or terminates a drained node by itself (platforms.json
parallelcluster.resilience). HyperPod's node recovery replaces only what its own agent finds faulty; a node another
program drained is replaced when it is set to FAIL with the reason ``Action:Replace``
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-resiliency-slurm-replace-faulty-instance.html;
platforms.json hyperpod.slurm_node_replacement). So on HyperPod with ``resilience.node_recovery: automatic`` the
bootstrap sets KILN_NODE_REPLACEMENT=hyperpod in the health check's program, and each run of ``kiln-launch health
--drain`` (root, from kiln's timer) calls `hand_over` after it drained or resumed the node:

- only a node drained with a reason kiln set (slurm_node.REASON_PREFIX), never one a person or HyperPod's agent
  drained;
- only once no job is left on it (State IDLE+DRAIN: not ALLOCATED, MIXED or COMPLETING), so a running job is never
  cut short by the replacement;
- kiln's reason is printed first (the journal keeps it), because the FAIL takes the reason field for HyperPod's word.

A replacement replaces the instance's volumes too (the BatchReplaceClusterNodes page's data loss warning): the
checkpoints are on the shared file system, never on the node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kiln.catalog.platforms import service_fact
from kiln.launcher import slurm_node

REPLACEMENT_VARIABLE = "KILN_NODE_REPLACEMENT"
PLATFORMS = ("hyperpod",)
# The reason HyperPod's resiliency pages give for a replacement (platforms.json, with its source).
HYPERPOD_REASON: str = service_fact("hyperpod", "slurm_node_replacement").value["manual_reason"]


def hand_over(node: str, environ: Mapping[str, str] = os.environ) -> dict[str, object] | None:
    """Hand NODE to the platform named by KILN_NODE_REPLACEMENT when kiln drained it and it runs no job; return
    what was done ({action, ok, detail}), or None when nothing applies."""
    platform = environ.get(REPLACEMENT_VARIABLE, "").strip()
    if platform not in PLATFORMS:
        return None
    fields = slurm_node.node_fields(node, environ)
    if fields is None:
        return {"action": "none", "ok": False, "detail": f"scontrol cannot say what state node {node} is in"}
    state, reason = fields.get("State", ""), fields.get("Reason", "")
    flags = state.split("+")
    if "DRAIN" not in flags or not reason.startswith(slurm_node.REASON_PREFIX):
        return None
    if flags[0] != "IDLE" or "COMPLETING" in flags:
        return {"action": "none", "ok": True, "detail": f"node {node} still runs a job ({state}): replaced once idle"}
    done = slurm_node.fail(node, HYPERPOD_REASON, environ)
    detail = (
        f"handed node {node} to HyperPod for replacement (State=FAIL Reason={HYPERPOD_REASON}); kiln had drained it: "
        f"{reason}"
    )
    return {"action": "replace", "ok": done.ok, "detail": detail if done.ok else done.detail}
