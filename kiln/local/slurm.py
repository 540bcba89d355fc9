"""Talk to the local cluster's Slurm: client environment, node states, job records."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass

from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout

CLIENT_TIMEOUT_S = 15
# States in which a node takes work; sinfo appends flags (not responding '*', ...) that disqualify.
READY_STATES = frozenset({"idle", "allocated", "mixed"})
TERMINAL_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


@dataclass(frozen=True, kw_only=True)
class NodeStatus:
    """One node as sinfo reports it."""

    name: str
    state: str
    cpus: str
    memory_mib: str
    reason: str

    @property
    def ready(self) -> bool:
        return is_ready(self.state)


def is_ready(state: str) -> bool:
    """True for a node state that takes work: idle, allocated or mixed, without any flag."""
    return state in READY_STATES


def client_env(layout: ClusterLayout, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Return ENVIRON for Slurm's clients: this cluster's slurm.conf, no variables of an enclosing job."""
    env = {name: value for name, value in environ.items() if not name.startswith("SLURM_")}
    env["SLURM_CONF"] = str(layout.slurm_conf)
    return env


def client(layout: ClusterLayout, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a Slurm client command against this cluster and capture its output."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, env=client_env(layout), timeout=CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LocalFailure(f"`{' '.join(argv)}` did not answer within {CLIENT_TIMEOUT_S}s") from None
    except FileNotFoundError:
        raise LocalError(f"{argv[0]} is not installed: run `kiln local up`, which installs Slurm") from None
    if check and result.returncode != 0:
        detail = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
        raise LocalFailure(f"`{' '.join(argv)}` failed: {detail}")
    return result


SINFO_FORMAT = "%N|%T|%c|%m|%E"


def parse_sinfo(text: str) -> dict[str, NodeStatus]:
    """Parse `sinfo -h -N -o '%N|%T|%c|%m|%E'` output into node statuses by name."""
    nodes = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, state, cpus, memory, reason = (line.split("|", 4) + ["", "", "", ""])[:5]
        nodes[name] = NodeStatus(
            name=name, state=state, cpus=cpus, memory_mib=memory, reason="" if reason == "none" else reason
        )
    return nodes


def node_statuses(layout: ClusterLayout) -> dict[str, NodeStatus]:
    """Return every node's status from slurmctld."""
    return parse_sinfo(client(layout, "sinfo", "-h", "-N", "-o", SINFO_FORMAT).stdout)


def wait_ready(layout: ClusterLayout, timeout_s: float, alive=lambda: None) -> dict[str, NodeStatus]:
    """Wait until every node is ready; ALIVE raises when a daemon died meanwhile."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, NodeStatus] = {}
    while True:
        alive()
        result = client(layout, "sinfo", "-h", "-N", "-o", SINFO_FORMAT, check=False)
        if result.returncode == 0:
            statuses = parse_sinfo(result.stdout)
            names = [node.name for node in layout.nodes]
            if all(name in statuses and statuses[name].ready for name in names):
                return statuses
        if time.monotonic() > deadline:
            waiting = ", ".join(f"{s.name} {s.state}" for s in statuses.values() if not s.ready) or "slurmctld"
            raise LocalFailure(
                f"nodes not ready after {timeout_s:.0f}s ({waiting}); see the logs in {layout.slurm_paths()['log_dir']}"
            )
        time.sleep(0.1)


def wait_registered(layout: ClusterLayout, name: str, timeout_s: float, alive=lambda: None) -> None:
    """Wait until node NAME is no longer DOWN: its slurmd registered (ReturnToService=2 takes a node back then, for
    whatever reason it was down); ALIVE raises when a daemon died meanwhile."""
    deadline = time.monotonic() + timeout_s
    state = "unknown"
    while True:
        alive()
        result = client(layout, "sinfo", "-h", "-N", "-n", name, "-o", SINFO_FORMAT, check=False)
        found = parse_sinfo(result.stdout).get(name) if result.returncode == 0 else None
        if found is not None:
            state = found.state
            if not state.startswith("down"):
                return
        if time.monotonic() > deadline:
            raise LocalFailure(
                f"{name}'s new slurmd did not register within {timeout_s:.0f}s (still {state}); see the logs in "
                f"{layout.slurm_paths()['log_dir']}"
            )
        time.sleep(0.1)


def parse_record(text: str) -> dict[str, str]:
    """Parse one `scontrol -o show ...` record (Key=Value pairs; values may hold spaces) into a dict."""
    return {key: value for key, value in _FIELD.findall(text.strip())}


def job_record(layout: ClusterLayout, job_id: str) -> dict[str, str] | None:
    """Return the job's record, or None once slurmctld has forgotten it."""
    result = client(layout, "scontrol", "-o", "show", "job", job_id, check=False)
    if result.returncode != 0:
        return None
    return parse_record(result.stdout)


def exit_code(record: Mapping[str, str]) -> int:
    """Return a shell-style exit code from a job record's ExitCode=CODE:SIGNAL."""
    code, _, signal = record.get("ExitCode", "0:0").partition(":")
    if signal and signal != "0":
        return 128 + int(signal)
    return int(code or 0)


def slurmd_timeout_s(layout: ClusterLayout) -> int | None:
    """Return SlurmdTimeout from the running slurmctld, in seconds."""
    result = client(layout, "scontrol", "show", "config", check=False)
    match = re.search(r"^SlurmdTimeout\s*=\s*(\d+)", result.stdout, re.MULTILINE)
    return int(match.group(1)) if match else None
