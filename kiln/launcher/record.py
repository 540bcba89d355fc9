"""Write the JSON run record: the environment the launcher chose, versions and timings."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RECORD_FORMAT = 1


def default_path(job_dir: Path, node_rank: int | None, started: float) -> Path:
    """Return where a launch's record goes by default: <job dir>/runs/<UTC time>-node<rank>-<pid>.json."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    rank = "x" if node_rank is None else node_rank
    return job_dir / "runs" / f"{stamp}-node{rank}-{os.getpid()}.json"


def new_record(started: float, argv: list[str]) -> dict[str, Any]:
    """Return the skeleton every record starts from."""
    return {
        "format": RECORD_FORMAT,
        "status": "starting",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": argv,
        "timings": {"started_at": iso_time(started)},
    }


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
