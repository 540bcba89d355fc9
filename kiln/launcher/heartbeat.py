"""The worker side of kiln-launch's hang watchdog: a heartbeat per rank, flight recorder dumps on request, and the
check of NCCL's transport after the first step.

A training script calls it once per finished step::

    from kiln.launcher.heartbeat import Heartbeat

    beat = Heartbeat.from_env()
    for step in range(start, steps + 1):
        ...
        beat.step(step)

Started by kiln-launch (KILN_HEARTBEAT_DIR set), it starts a daemon thread that rewrites this rank's file
``attempt<A>-rank<R>.json`` in that directory about every second: rank, local rank, host, pid, attempt
(TORCHELASTIC_RESTART_COUNT), the last finished step and when, when the process was last alive, and the recent step
times with their median. ``step()`` only updates memory: it never blocks training. A rank waiting in a collective
releases the GIL, so its thread keeps beating; a stopped or wedged process stops beating, which is how the watchdog
tells the culprit from the ranks waiting for it. Without KILN_HEARTBEAT_DIR every call is a no-op.

When the agent writes DUMP_REQUEST in the directory, each live rank's thread dumps once into the directory the request
names: PyTorch's flight recorder where this torch has one with entries (``_dump_nccl_trace`` on NCCL builds,
``_dump_fr_trace`` for the CPU/gloo recorder; both pickles that ``torch.distributed.flight_recorder`` reads), and
always the Python stacks of every thread (faulthandler). The heartbeat file then lists what was written, by kind.

With KILN_NCCL_TRANSPORT=efa (kiln-launch sets it on a GPU node with EFA, unless TCP is allowed) each rank reads its
own NCCL debug file (NCCL_DEBUG_FILE, with %h and %p expanded) after its first steps and reports the transport NCCL
chose in the heartbeat; the watchdog stops the job in one line when it is not EFA.

This module imports no torch: it must cost nothing in a script that does not use it.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import glob
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DIR_VARIABLE = "KILN_HEARTBEAT_DIR"
TRANSPORT_VARIABLE = "KILN_NCCL_TRANSPORT"
DUMP_REQUEST = "dump-request.json"
ALIVE_INTERVAL_S = 1.0
STEP_TIMES_KEPT = 50
# NCCL creates a communicator at the first collective: its transport lines exist once step 1 is done. A script whose
# first steps use no NCCL collective gets a few more chances before the check gives up and says so.
TRANSPORT_CHECK_STEPS = 5
FLIGHT_RECORDER_DUMPS = ("_dump_nccl_trace", "_dump_fr_trace")


def beat_file(directory: Path, attempt: int, rank: int) -> Path:
    """Return where rank RANK of torchrun attempt ATTEMPT keeps its heartbeat."""
    return directory / f"attempt{attempt}-rank{rank}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write DATA to PATH atomically (a temporary file, then os.replace): readers never see half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, sort_keys=True))
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """Return the JSON object in PATH, or None when it is missing or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Heartbeat:
    """This rank's heartbeat; a no-op unless started by kiln-launch."""

    def __init__(self, directory: Path | None, environ: Mapping[str, str] = os.environ) -> None:
        self.directory = directory
        self.rank = int(environ.get("RANK", "0"))
        self.local_rank = int(environ.get("LOCAL_RANK", "0"))
        self.attempt = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self._environ = dict(environ)
        # (step, wall time it finished): one tuple, replaced whole, so the thread never reads half an update.
        self._last: tuple[int | None, float | None] = (None, None)
        self._last_mono: float | None = None
        self._times: deque[float] = deque(maxlen=STEP_TIMES_KEPT)
        self._steps_seen = 0
        self._transport: dict[str, Any] | None = None
        self._dumps: list[dict[str, Any]] = []
        self._handled_request: Any = None
        self._wake = threading.Event()
        self._closed = False
        # The thread and the exit hook share one temporary file name: one writer at a time.
        self._writing = threading.Lock()
        self._thread: threading.Thread | None = None
        if directory is not None:
            self.path = beat_file(directory, self.attempt, self.rank)
            try:
                self._write()
            except OSError as error:
                # Training goes on unwatched rather than not at all.
                print(f"kiln-launch: warning: no heartbeat for rank {self.rank}: {error}", file=sys.stderr, flush=True)
                self.directory = None
                return
            self._thread = threading.Thread(target=self._live, name="kiln-heartbeat", daemon=True)
            self._thread.start()
            # A script that ends (or sys.exit()s) between two of the thread's writes still leaves its last step.
            atexit.register(self._last_write)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Heartbeat:
        """Return the heartbeat kiln-launch asked for (KILN_HEARTBEAT_DIR), or a no-op one."""
        directory = environ.get(DIR_VARIABLE)
        return cls(Path(directory) if directory else None, environ)

    @property
    def enabled(self) -> bool:
        """Return whether this heartbeat writes anything."""
        return self.directory is not None

    def step(self, step: int) -> None:
        """Record that STEP has finished on this rank (memory only; the thread writes it)."""
        if self.directory is None:
            return
        now = time.monotonic()
        if self._last_mono is not None:
            self._times.append(now - self._last_mono)
        self._last_mono = now
        self._last = (int(step), time.time())
        self._steps_seen += 1
        self._wake.set()

    def close(self) -> None:
        """Stop the heartbeat thread (the file stays, with the last step)."""
        if self._thread is not None:
            self._closed = True
            self._wake.set()
            self._thread.join(timeout=5)

    def _last_write(self) -> None:
        if self.directory is not None and self.directory.is_dir():
            with contextlib.suppress(OSError):
                self._write()

    def _live(self) -> None:
        assert self.directory is not None
        while not self._closed:
            self._wake.wait(ALIVE_INTERVAL_S)
            self._wake.clear()
            if not self.directory.is_dir():
                # kiln-launch removed it: the run is over for this launcher.
                return
            try:
                self._check_transport()
                self._serve_dump_request()
                self._write()
            except Exception as error:  # noqa: BLE001 - the heartbeat must never take training down
                print(f"kiln-launch: warning: heartbeat of rank {self.rank}: {error}", file=sys.stderr, flush=True)

    def state(self) -> dict[str, Any]:
        """Return what the heartbeat file holds now."""
        times = list(self._times)
        step, step_at = self._last
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "attempt": self.attempt,
            "step": step,
            "step_at": step_at,
            "alive_at": time.time(),
            "step_times_s": [round(value, 6) for value in times[-10:]],
            "median_step_s": statistics.median(times) if times else None,
            "transport": self._transport,
            "dumps": list(self._dumps),
        }

    def _write(self) -> None:
        assert self.directory is not None
        with self._writing:
            write_json(self.path, self.state())

    def _serve_dump_request(self) -> None:
        assert self.directory is not None
        request = read_json(self.directory / DUMP_REQUEST)
        if request is None or request.get("id") == self._handled_request:
            return
        self._handled_request = request.get("id")
        target = Path(str(request.get("dir") or self.directory))
        written = dump_diagnostics(target, f"{socket.gethostname()}-rank{self.rank}-attempt{self.attempt}")
        self._dumps.append({"request": request.get("id"), "files": written})

    def _check_transport(self) -> None:
        if self._transport is not None or self._steps_seen == 0:
            return
        if self._environ.get(TRANSPORT_VARIABLE) != "efa":
            return
        verdict = transport_verdict(self._environ, os.getpid(), final=self._steps_seen >= TRANSPORT_CHECK_STEPS)
        if verdict is not None:
            self._transport = verdict | {"step": self._last[0]}
            if verdict["ok"] is False:
                print(f"kiln-launch: rank {self.rank}: {verdict['detail']}", file=sys.stderr, flush=True)


def dump_diagnostics(directory: Path, stem: str) -> list[dict[str, str]]:
    """Write this process's flight recorder (where torch has one with entries) and its thread stacks under DIRECTORY;
    return [{kind, path}] for what was written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    torch = sys.modules.get("torch")
    c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
    for name in FLIGHT_RECORDER_DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            payload = dump()
        except Exception as error:  # noqa: BLE001 - a diagnostic; say why it is missing instead
            written.append({"kind": f"{name} failed", "path": "", "error": str(error).splitlines()[0][:200]})
            continue
        if not _has_entries(payload):
            continue
        path = directory / f"{stem}.{name.removeprefix('_dump_')}.pkl"
        path.write_bytes(payload)
        written.append({"kind": f"flight recorder ({name})", "path": str(path)})
    stacks = directory / f"{stem}.stacks.txt"
    with open(stacks, "w") as handle:
        faulthandler.dump_traceback(handle, all_threads=True)
    written.append({"kind": "python thread stacks", "path": str(stacks)})
    return written


def _has_entries(payload: bytes) -> bool:
    """Return whether a flight recorder pickle holds any collective (an empty recorder is no evidence)."""
    import pickle

    try:
        data = pickle.loads(payload)  # noqa: S301 - bytes this process's torch produced a moment ago
    except Exception:  # noqa: BLE001
        return bool(payload)
    return bool(isinstance(data, dict) and data.get("entries"))


def nccl_log_files(environ: Mapping[str, str], pid: int) -> list[str]:
    """Return this process's NCCL debug files: NCCL_DEBUG_FILE with %p as PID and %h as any host name."""
    pattern = environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return []
    return sorted(glob.glob(pattern.replace("%h", "*").replace("%p", str(pid))))


def transport_verdict(environ: Mapping[str, str], pid: int, *, final: bool) -> dict[str, Any] | None:
    """Judge the transport NCCL chose in this process: {ok, detail, ...}; ok None when it cannot be judged. None
    (look again later) while no transport line is there yet, unless FINAL."""
    from kiln.launcher import nccllog

    level = environ.get("NCCL_DEBUG", "").upper()
    if level not in ("INFO", "TRACE"):
        return {"ok": None, "detail": f"not checked: NCCL_DEBUG={level or 'unset'} prints no transport lines"}
    if not environ.get("NCCL_DEBUG_FILE"):
        return {"ok": None, "detail": "not checked: NCCL_DEBUG is set without NCCL_DEBUG_FILE, so NCCL logs to stdout"}
    files = nccl_log_files(environ, pid)
    lines: list[str] = []
    for name in files:
        try:
            lines.extend(Path(name).read_text(errors="replace").splitlines())
        except OSError:
            continue
    transport = nccllog.parse(lines)
    if not transport.found:
        if not final:
            return None
        where = ", ".join(files) or environ.get("NCCL_DEBUG_FILE", "NCCL's stdout")
        return {"ok": None, "detail": f"not checked: no NCCL transport line in {where} after the first steps"}
    facts = {
        "networks": list(transport.networks),
        "providers": list(transport.providers),
        "evidence": list(transport.evidence),
    }
    if transport.uses_efa:
        return {"ok": True, "detail": f"NCCL over libfabric efa ({', '.join(transport.networks)})", **facts}
    chosen = ", ".join(transport.networks) or "?"
    providers = ", ".join(transport.providers) or "none"
    detail = f"NCCL chose {chosen} (provider {providers}), not EFA, on this EFA node"
    return {"ok": False, "detail": detail, **facts}
