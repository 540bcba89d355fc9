"""The command lines of the cluster's daemons and how to tell that each one is ready."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from kiln.local.errors import LocalFailure
from kiln.local.layout import ClusterLayout, NodeLayout
from kiln.local.procs import log_tail

MUNGED = "munged"
SLURMCTLD = "slurmctld"
READY_TIMEOUT_S = 15.0
# Runs inside the node's fresh mount and UTS namespaces: the node's own /etc/hosts and host name,
# so jobs resolve node names (the rendezvous host) and gloo finds the node's address from its name.
NODE_SHELL = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'


def slurmd_role(node: NodeLayout) -> str:
    return f"slurmd:{node.name}"


def munged_argv(layout: ClusterLayout) -> list[str]:
    dirs = layout.munge_dirs
    return [
        "munged",
        "--foreground",
        f"--key-file={layout.munge_key}",
        f"--socket={layout.munge_socket}",
        f"--pid-file={dirs['run'] / 'munged.pid'}",
        f"--log-file={dirs['log'] / 'munged.log'}",
        f"--seed-file={dirs['lib'] / 'munged.seed'}",
    ]


def slurmctld_argv(layout: ClusterLayout) -> list[str]:
    return ["slurmctld", "-D", "-f", str(layout.slurm_conf)]


def slurmd_argv(layout: ClusterLayout, node: NodeLayout) -> list[str]:
    return ["slurmd", "-D", "-f", str(layout.slurm_conf), "-N", node.name]


def slurmd_launch(layout: ClusterLayout, node: NodeLayout) -> list[str]:
    """Return how slurmd starts inside NODE's network namespace (node_launch)."""
    return [*node_launch(layout, node), *slurmd_argv(layout, node)]


def node_launch(layout: ClusterLayout, node: NodeLayout) -> list[str]:
    """Return the prefix that runs a command on NODE: in its network namespace, with its /etc/hosts and host name.

    nsenter joins only the network namespace (`ip netns exec` would remount /sys and hide the
    cgroup tree from slurmd); unshare adds private mount and UTS namespaces for /etc/hosts and
    the host name. Each exec replaces the last, so the PID started is the command's PID.
    """
    return [
        "nsenter",
        f"--net={node.netns_path}",
        "unshare",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "sh",
        "-c",
        NODE_SHELL,
        "kiln-node",
        str(layout.hosts_file),
        node.name,
    ]


def log_path(layout: ClusterLayout, role: str) -> Path:
    return layout.log_dir / f"{role.replace(':', '-')}.log"


def wait_until(ready: Callable[[], bool], alive: Callable[[], bool], what: str, log: Path) -> None:
    """Poll READY until it holds; fail at once when ALIVE turns false, or after READY_TIMEOUT_S."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if not alive():
            detail = log_tail(log)
            raise LocalFailure(f"{what} exited" + (f": {detail}" if detail else "") + f" (log: {log})")
        if time.monotonic() > deadline:
            raise LocalFailure(f"{what} not ready after {READY_TIMEOUT_S:.0f}s (log: {log})")
        time.sleep(0.05)


def accepts_connections(address: str, port: int) -> bool:
    """True when something accepts TCP connections at ADDRESS:PORT."""
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False
