"""The node's last health verdict, where the launcher of a running job can see it.

`kiln-launch health --drain` (the node's scheduled check: Slurm's HealthCheckProgram or kiln's timer, as root) writes
``<root>/run/kiln/health/<node>.json`` after every run: healthy or not, the FAIL lines, when. A drain only stops new
jobs from starting on the node; the kiln-launch of a job already running there reads this file each time its
watchdog polls (a stat, and a read when it changed: nothing goes to slurmctld), and on a failed check made after the
launch began it ends the run so the job requeues without the node (kiln.launcher.watchdog).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERDICT_DIR = "run/kiln/health"


@dataclass(frozen=True, kw_only=True)
class HealthVerdict:
    """One run of the node's check."""

    node: str
    healthy: bool
    failures: tuple[str, ...]
    checked_at: float
    drain: str


def verdict_path(root: Path | str, node: str) -> Path:
    """Return where NODE's verdict lives under the node's ROOT (a local cluster's nodes share one root)."""
    return Path(root) / VERDICT_DIR / f"{node}.json"


def write(root: Path | str, verdict: HealthVerdict) -> Path:
    """Write VERDICT atomically, readable by every user (the jobs' launchers)."""
    path = verdict_path(root, verdict.node)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data: dict[str, Any] = {
        "node": verdict.node,
        "healthy": verdict.healthy,
        "failures": list(verdict.failures),
        "checked_at": verdict.checked_at,
        "drain": verdict.drain,
    }
    temporary.write_text(json.dumps(data, sort_keys=True) + "\n")
    temporary.chmod(0o644)
    os.replace(temporary, path)
    return path


def read(path: Path) -> HealthVerdict | None:
    """Return the verdict at PATH, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads(path.read_text())
        return HealthVerdict(
            node=str(data["node"]),
            healthy=bool(data["healthy"]),
            failures=tuple(str(line) for line in data.get("failures") or ()),
            checked_at=float(data["checked_at"]),
            drain=str(data.get("drain", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class VerdictWatch:
    """Read one node's verdict file only when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self.last: HealthVerdict | None = None

    def poll(self) -> HealthVerdict | None:
        """Return the verdict when the file changed since the last poll, else None."""
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        stamp = (status.st_mtime_ns, status.st_ino)
        if stamp == self._seen:
            return None
        self._seen = stamp
        self.last = read(self.path)
        return self.last
