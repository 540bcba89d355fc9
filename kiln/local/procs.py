"""Start the cluster's daemons and stop them again, only ever by PIDs whose identity still matches."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kiln.local.errors import LocalFailure
from kiln.local.state import ProcessRecord

PROC = Path("/proc")
# How long a daemon may take to exec its final command (nsenter -> unshare -> sh -> slurmd).
EXEC_TIMEOUT_S = 5.0
STOP_GRACE_S = 10.0
_POLL_S = 0.02


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What /proc says about a PID: its command line, start time and run state."""

    argv: tuple[str, ...]
    start_ticks: int
    state: str


def parse_stat(text: str) -> tuple[str, int]:
    """Return the run state and start time (clock ticks after boot) from a /proc/PID/stat line."""
    # The command name sits in parentheses and may itself hold spaces or parentheses.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def identity(pid: int, proc: Path = PROC) -> Identity | None:
    """Return PID's identity, or None when no such process exists."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
        state, ticks = parse_stat((proc / str(pid) / "stat").read_text())
    except (FileNotFoundError, ProcessLookupError):
        return None
    argv = tuple(part.decode(errors="replace") for part in raw.split(b"\0")[:-1]) if raw else ()
    return Identity(argv=argv, start_ticks=ticks, state=state)


def is_running(record: ProcessRecord, proc: Path = PROC) -> bool:
    """True while RECORD's process runs the recorded command: a reused PID or a zombie does not count."""
    found = identity(record.pid, proc)
    return (
        found is not None
        and found.state not in ("Z", "X")
        and found.argv == record.argv
        and found.start_ticks == record.start_ticks
    )


def log_tail(path: str | Path, lines: int = 5) -> str:
    """Return the last LINES non-empty lines of PATH joined with ' | ', or '' when unreadable."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def start(
    role: str, launch: list[str], final_argv: list[str], log: Path, env: Mapping[str, str]
) -> tuple[ProcessRecord, subprocess.Popen]:
    """Start LAUNCH in its own session, wait until it has exec'd FINAL_ARGV, and return its record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as output:
        process = subprocess.Popen(
            launch,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + EXEC_TIMEOUT_S
    while True:
        if process.poll() is not None:
            detail = log_tail(log)
            raise LocalFailure(
                f"{role} exited at once with code {process.returncode}"
                + (f": {detail}" if detail else "")
                + f" (log: {log})"
            )
        found = identity(process.pid)
        if found is not None and found.argv == tuple(final_argv):
            record = ProcessRecord(
                role=role, pid=process.pid, argv=found.argv, start_ticks=found.start_ticks, log=str(log)
            )
            return record, process
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise LocalFailure(f"{role} did not start {final_argv[0]} within {EXEC_TIMEOUT_S:.0f}s (log: {log})")
        time.sleep(_POLL_S)


def _alive(pid: int) -> bool:
    found = identity(pid)
    return found is not None and found.state not in ("Z", "X")


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def stop_records(records: Iterable[ProcessRecord], grace_s: float = STOP_GRACE_S) -> list[ProcessRecord]:
    """Stop every record whose process is still the recorded one; return those that were running."""
    running = [record for record in records if is_running(record)]
    stop_pids([record.pid for record in running], grace_s)
    return running


def stop_pids(pids: Iterable[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM PIDS, SIGKILL those still alive after GRACE_S, and wait until all are gone."""
    pids = [pid for pid in pids if _alive(pid)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while (left := [pid for pid in left if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    if left:
        raise LocalFailure(f"processes {', '.join(map(str, left))} survived SIGKILL for {grace_s:.0f}s")


def pids_in_netns(netns_path: Path, proc: Path = PROC) -> list[int]:
    """Return every PID whose network namespace is the one bound at NETNS_PATH."""
    try:
        target = os.stat(netns_path)
    except FileNotFoundError:
        return []
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            here = os.stat(entry / "ns" / "net")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if (here.st_dev, here.st_ino) == (target.st_dev, target.st_ino):
            found.append(int(entry.name))
    return found
