"""Break a node of the local cluster on purpose, to watch the cluster recover (`kiln local fault NODE KIND`).

Each fault is a real one, injected where it would happen on a cloud node, never a flag a check reads:

- ``disk-full``: a 1 MiB file system mounted over the node's container storage (its /scratch), inside the node's own
  mount namespace (the one its slurmd and jobs see): the node's health check finds no room for containers, as on a
  node whose scratch disk filled up; the job running there goes on until kiln-launch sees the failed check.
  Replacing the node (fresh namespaces) clears it.
- ``hang``: SIGSTOP one training rank on the node (a kiln-launch worker): the job stops advancing, as when a rank
  wedges in a driver call; the hang watchdog must name it.
- ``slurmd``: SIGKILL the node's slurmd, as when the instance stops answering: slurmctld marks it down after
  SlurmdTimeout, and its job is requeued.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog.names import SCRATCH_DIR
from kiln.local import daemons, procs
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout, NodeLayout
from kiln.local.state import ClusterState

KINDS = ("disk-full", "hang", "slurmd")
FULL_DISK_SIZE = "1m"


@dataclass(frozen=True, kw_only=True)
class Injected:
    """One fault: what it hit, when, and the line that says so."""

    node: str
    kind: str
    target: str
    at: float


def container_storage(layout: ClusterLayout) -> Path:
    """Return where a local node keeps containers: the scratch its health check measures (kiln.launcher.health),
    not the /tmp its jobs write to."""
    return layout.path(SCRATCH_DIR)


def inject(current: ClusterState, node_name: str, kind: str, now: float) -> Injected:
    """Inject fault KIND into node NODE_NAME of CURRENT's cluster; return what was done."""
    layout = current.layout
    node = layout.node(node_name)
    if kind not in KINDS:
        raise LocalError(f"fault: got {kind!r}, allowed: {', '.join(KINDS)}")
    slurmd = current.process(daemons.slurmd_role(node))
    if slurmd is None or not procs.is_running(slurmd):
        raise LocalError(f"{node.name}'s slurmd is not running: `kiln local up` first")
    if kind == "slurmd":
        os.kill(slurmd.pid, signal.SIGKILL)
        return Injected(node=node.name, kind=kind, target=f"slurmd pid {slurmd.pid}", at=now)
    if kind == "disk-full":
        path = container_storage(layout)
        path.mkdir(parents=True, exist_ok=True)
        mount = ["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK_SIZE}", "kiln-fault", str(path)]
        _in_mount_namespace(slurmd.pid, mount)
        return Injected(node=node.name, kind=kind, target=f"{path} ({FULL_DISK_SIZE} file system)", at=now)
    worker, rank = _a_worker(node)
    os.kill(worker, signal.SIGSTOP)
    return Injected(node=node.name, kind=kind, target=f"rank {rank} (pid {worker})", at=now)


def _a_worker(node: NodeLayout) -> tuple[int, str]:
    """Return the newest training rank process on NODE and its rank: torchrun gives its workers RANK and
    LOCAL_RANK in their environment (the agent, kiln-launch, has neither)."""
    candidates = []
    for pid in procs.pids_in_netns(node.netns_path):
        found = procs.identity(pid)
        environ = _environ(pid)
        if found is not None and found.state not in ("Z", "T") and "RANK" in environ and "LOCAL_RANK" in environ:
            candidates.append((found.start_ticks, pid, environ["RANK"]))
    if not candidates:
        raise LocalError(f"no training rank runs on {node.name}: submit a job first (kiln local smoke)")
    _, pid, rank = max(candidates)
    return pid, rank


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if b"=" in item)
    return {name: value for name, _, value in pairs}


def _in_mount_namespace(pid: int, argv: list[str]) -> None:
    result = subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", *argv], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        said = " ".join(result.stderr.split())
        raise LocalFailure(f"`{' '.join(argv)}` in the node's mount namespace failed: {said}")
