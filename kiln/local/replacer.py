"""The local cluster replaces a bad node the way a cloud platform replaces an unhealthy instance.

ParallelCluster, PCS, HyperPod and EKS each put a fresh instance where a drained or failed one was
(docs/resilience.md says how each does it). Locally the `node-replacer` daemon that `kiln local up` starts does the
same: it watches Slurm's node states and replaces a node that is

- drained (DRAIN with no job left on it, sinfo's `drained`) with a reason kiln set (`kiln-...`: the health check,
  the hang watchdog), or
- down because slurmctld lost its slurmd (`Not responding`), or with a reason kiln set.

A node drained or taken down by a person (any other reason) is theirs: it is left alone.

It also stands in for the systemd path unit a cloud node runs (configure_health): whenever the nodes' drain-request
directory holds a request, it runs root's side of the hang watchdog's drain hand-off, the program the bootstrap wrote
(kiln.launcher.drain_request), for every node, as the path unit does for its one. Replacing a node stops
every process in its network namespace, deletes the namespace and its veth, creates them again, starts the node's
daemons in fresh mount and UTS namespaces (so whatever broke inside the node is gone), and returns it to service. The
node is DOWN meanwhile, so Slurm starts no job there (a requeued one would fail to launch on a node whose slurmd is
gone); its new slurmd's registration takes it back (ReturnToService=2), as a platform's new instance joins.
Each replacement is a line in the daemon's log and an event in `<log dir>/node-events.jsonl`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kiln.local import slurm
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout

ROLE = "node-replacer"
KILN_REASON_PREFIX = "kiln-"
# What slurmctld writes when a node's slurmd stops answering (SlurmdTimeout).
LOST_SLURMD_REASON = "Not responding"
POLL_S = 1.0
# After a failed replacement, try the same node again only this much later (its log says why it failed).
RETRY_S = 30.0
EVENTS_FILE = "node-events.jsonl"
# The same bound as the path unit's TimeoutStartSec on a cloud node.
DRAIN_REQUESTS_TIMEOUT_S = 60


@dataclass(frozen=True, kw_only=True)
class Replacement:
    """A node to replace, and why."""

    node: str
    state: str
    reason: str


def replaceable(statuses: Mapping[str, slurm.NodeStatus]) -> list[Replacement]:
    """Return the nodes of STATUSES that a platform would replace now, by name."""
    found = []
    for name in sorted(statuses):
        status = statuses[name]
        state = status.state.rstrip("*~#!%$@^-")
        ours = status.reason.startswith(KILN_REASON_PREFIX)
        lost = state == "down" and status.reason.startswith(LOST_SLURMD_REASON)
        if (state in ("drained", "down") and ours) or lost:
            found.append(Replacement(node=name, state=status.state, reason=status.reason))
    return found


def events_path(layout: ClusterLayout) -> Path:
    """Return the file each replacement is recorded in, one JSON object per line."""
    return layout.log_dir / EVENTS_FILE


def read_events(layout: ClusterLayout) -> list[dict]:
    """Return the recorded replacements, oldest first."""
    path = events_path(layout)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def argv(prefix: str) -> list[str]:
    """Return the daemon's command line: this Python running `kiln local replace --watch`."""
    return [sys.executable, "-m", "kiln.cli", "local", "replace", "--watch", "--prefix", prefix]


def watch(prefix: Path, out: TextIO = sys.stdout, poll_s: float = POLL_S) -> int:
    """Replace nodes as they turn replaceable, until stopped."""
    from kiln.local.cluster import load_cluster, replace_node

    layout = load_cluster(prefix).layout
    print(f"node-replacer: watching {len(layout.nodes)} nodes of {layout.cluster_name}", file=out, flush=True)
    failed_at: dict[str, float] = {}
    while True:
        take_drain_requests(layout, out)
        try:
            statuses = slurm.node_statuses(layout)
        except (LocalError, LocalFailure) as error:
            print(f"node-replacer: sinfo: {error}", file=out, flush=True)
            time.sleep(poll_s)
            continue
        for wanted in replaceable(statuses):
            if time.monotonic() - failed_at.get(wanted.node, -RETRY_S) < RETRY_S:
                continue
            if not _replace(prefix, layout, wanted, out, replace_node):
                failed_at[wanted.node] = time.monotonic()
        time.sleep(poll_s)


def take_drain_requests(layout: ClusterLayout, out: TextIO) -> None:
    """Run root's side of the drain hand-off for every node when a request waits (systemd's DirectoryNotEmpty)."""
    try:
        waiting = any(True for _ in os.scandir(layout.drain_requests))
    except FileNotFoundError:
        return
    if not waiting:
        return
    nodes = [argument for node in layout.nodes for argument in ("--node", node.name)]
    try:
        done = subprocess.run(
            [str(layout.drain_requests_program), *nodes],
            capture_output=True,
            text=True,
            timeout=DRAIN_REQUESTS_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        print(f"node-replacer: drain requests: {error}", file=out, flush=True)
        return
    for line in (done.stdout + done.stderr).splitlines():
        print(f"node-replacer: {line}", file=out, flush=True)


def _replace(prefix: Path, layout: ClusterLayout, wanted: Replacement, out: TextIO, replace_node) -> bool:
    """Replace one node and record the event; return whether it worked."""
    began = time.time()
    print(f"node-replacer: replacing {wanted.node} ({wanted.state}: {wanted.reason})", file=out, flush=True)
    event = {"node": wanted.node, "state": wanted.state, "reason": wanted.reason, "started_at": began}
    try:
        replace_node(prefix, wanted.node, out)
    except (LocalError, LocalFailure) as error:
        event.update(outcome="failed", detail=str(error))
        print(f"node-replacer: {wanted.node} not replaced: {error}", file=out, flush=True)
    else:
        event.update(outcome="replaced")
        print(f"node-replacer: {wanted.node} replaced in {time.time() - began:.1f}s", file=out, flush=True)
    event["finished_at"] = time.time()
    path = events_path(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(event, sort_keys=True) + "\n")
    return event["outcome"] == "replaced"
