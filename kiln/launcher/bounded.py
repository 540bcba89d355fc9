"""Run a node tool, or look at a directory, with a deadline that holds even when the kernel does not let go.

A process blocked inside the kernel (a GPU driver that stopped answering, a Lustre mount whose servers are gone: the
process sits in uninterruptible sleep, state D) ignores SIGKILL until the kernel call returns. subprocess.run's timeout
kills the child and then waits for it, so it would wait as long as the child is stuck. Here the child runs in its own
session, the whole session is killed at the deadline, and the caller gives up after a short grace instead of waiting:
a child stuck in the kernel is left to init, which reaps it when the call returns.

A directory is looked at the same way, from a child Python (`probe`): the stat, the directory read and the free space
of a hung mount block that child, never the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# How long a killed child gets to close its pipes before the caller stops waiting for it.
REAP_GRACE_S = 0.5
# Runs in the child: stat PATH (else, when it does not exist, its nearest existing parent), read a few of its entries
# and its file system's free space; print one JSON object. Standard library only, no site packages (-I -S).
PROBE_CODE = """
import json, os, stat, sys
path = sys.argv[1]
seen = {"path": path}
try:
    target = path
    while True:
        try:
            info = os.stat(target)
            break
        except FileNotFoundError:
            parent = os.path.dirname(target)
            if parent == target:
                raise
            seen.setdefault("missing", path)
            target = parent
    seen["answered"] = target
    seen["directory"] = stat.S_ISDIR(info.st_mode)
    if seen["directory"]:
        with os.scandir(target) as entries:
            seen["entries"] = sum(1 for _, _ in zip(range(8), entries))
        space = os.statvfs(target)
        seen["free_bytes"] = space.f_bavail * space.f_frsize
        seen["total_bytes"] = space.f_blocks * space.f_frsize
except OSError as error:
    seen["error"] = error.strerror or str(error)
print(json.dumps(seen))
"""


class Timeout(Exception):
    """The child gave no answer within the deadline."""


@dataclass(frozen=True, kw_only=True)
class Probe:
    """What the child saw of a directory: the path that answered (PATH, else its nearest existing parent)."""

    path: str
    answered: str | None = None
    missing: bool = False  # PATH itself does not exist (answered is a parent)
    directory: bool = False
    entries: int = 0
    free_bytes: int | None = None
    total_bytes: int | None = None
    error: str | None = None


def run(argv: list[str], *, timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ARGV and capture its text output; raise Timeout after TIMEOUT seconds (OSError when it cannot start)."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=max(timeout, 0.001))
    except subprocess.TimeoutExpired:
        _kill_session(process)
        raise Timeout(f"{Path(argv[0]).name} did not answer within {timeout:g} s") from None
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def probe(path: str | Path, *, timeout: float) -> Probe:
    """Look at directory PATH from a child Python; raise Timeout when it does not answer within TIMEOUT seconds."""
    argv = [sys.executable, "-I", "-S", "-c", PROBE_CODE, str(path)]
    try:
        done = run(argv, timeout=timeout, env={"LC_ALL": "C"})
    except Timeout:
        raise Timeout(f"no answer within {timeout:g} s") from None
    try:
        seen = json.loads(done.stdout)
    except json.JSONDecodeError:
        said = " ".join(done.stderr.split())[-200:] or f"exit code {done.returncode}"
        return Probe(path=str(path), error=f"the probe of {path} failed: {said}")
    return Probe(
        path=str(path),
        answered=seen.get("answered"),
        missing="missing" in seen,
        directory=bool(seen.get("directory")),
        entries=int(seen.get("entries", 0)),
        free_bytes=seen.get("free_bytes"),
        total_bytes=seen.get("total_bytes"),
        error=seen.get("error"),
    )


def _kill_session(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=REAP_GRACE_S)
    except subprocess.TimeoutExpired:
        # Stuck in the kernel (or a grandchild holds the pipes): leave it; init reaps it once the call returns.
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
