"""Write the JSON run record: the environment the launcher chose, versions, timings and every attempt.

Format 2 (format 1 had none of these): "attempts" lists each torchrun attempt of the launch, {attempt, ended, at,
failures [{rank, local_rank, pid, exitcode, signal}], last_steps {rank: step}} (a restarted run no longer reads as
one clean success); "slurm_restart_count" is Slurm's requeue count (SLURM_RESTART_COUNT, None off Slurm);
"watchdog" is the hang watchdog's status and verdict (kiln.launcher.watchdog); and a default record's file name is
<UTC time>-<node>[-restart<N>]-<pid>.json, <node> being Slurm's node name (SLURMD_NODENAME) where Slurm set it,
else node<rank> (format 1 always used node<rank>).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RECORD_FORMAT = 2
# Slurm's count of this job's restarts and requeues, set in a restarted batch job's environment; SLURMD_NODENAME names
# the node (https://slurm.schedmd.com/sbatch.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES).
RESTART_VARIABLE = "SLURM_RESTART_COUNT"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def node_label(node_rank: int | None, environ: Mapping[str, str] = os.environ) -> str:
    """Return the node part of a record's name: Slurm's node name (SLURMD_NODENAME), else node<rank> (nodex when
    the rank is unknown)."""
    name = environ.get("SLURMD_NODENAME")
    if name:
        return _UNSAFE.sub("_", name)
    return f"node{'x' if node_rank is None else node_rank}"


def default_path(job_dir: Path, node: str, started: float, restart: str | None = None) -> Path:
    """Return where a launch's record goes by default: <job dir>/runs/<UTC time>-<node>[-restart<N>]-<pid>.json."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    requeued = f"-restart{_UNSAFE.sub('_', restart)}" if restart else ""
    return job_dir / "runs" / f"{stamp}-{node}{requeued}-{os.getpid()}.json"


def new_record(started: float, argv: list[str], environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Return the skeleton every record starts from."""
    restart = environ.get(RESTART_VARIABLE)
    return {
        "format": RECORD_FORMAT,
        "status": "starting",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": argv,
        "slurm_restart_count": int(restart) if restart and restart.isdigit() else None,
        "attempts": [],
        "timings": {"started_at": iso_time(started)},
    }


def attempts(failed: Iterable[dict[str, Any]], beats: Iterable[dict[str, Any]], final: str) -> list[dict[str, Any]]:
    """Return every torchrun attempt: the FAILED ones torchrun reported, with each attempt's last steps from the
    ranks' heartbeats (BEATS); the last attempt ended FINAL unless it failed."""
    by_attempt: dict[int, dict[str, Any]] = {}
    for entry in failed:
        by_attempt[int(entry["attempt"])] = {**entry, "last_steps": {}}
    for beat in beats:
        number = int(beat["attempt"])
        entry = by_attempt.setdefault(number, {"attempt": number, "ended": None, "failures": [], "last_steps": {}})
        entry["last_steps"][str(beat["rank"])] = beat.get("step")
    if not by_attempt:
        return []
    last = max(by_attempt)
    for number, entry in by_attempt.items():
        if entry["ended"] is None:
            # Not reported failed: the last attempt ended as the launch did; an earlier one was restarted by torchrun
            # for another reason (a node joining the rendezvous).
            entry["ended"] = final if number == last else "restarted"
    return [by_attempt[number] for number in sorted(by_attempt)]


def write(path: Path, record: dict[str, Any]) -> Path:
    """Write RECORD to PATH atomically; fall back to the temp dir if PATH is not writable."""
    try:
        return _write_atomic(path, record)
    except OSError as error:
        fallback = Path(tempfile.gettempdir()) / "kiln-runs" / path.name
        print(f"kiln-launch: warning: cannot write run record to {path} ({error}); using {fallback}", file=sys.stderr)
        return _write_atomic(fallback, record)


def _write_atomic(path: Path, record: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")
    # Readers (dashboards, the local cluster tests) must never see half a record.
    os.replace(temporary, path)
    return path


def iso_time(timestamp: float) -> str:
    """Return TIMESTAMP as UTC ISO 8601 with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + f".{int(timestamp % 1 * 1000):03d}Z"
