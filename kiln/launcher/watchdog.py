"""The agent side of the hang watchdog: read this node's heartbeats, call a stall a hang, name the culprit, and end
the run so the job can requeue without the bad node.

kiln-launch gives the workers KILN_HEARTBEAT_DIR (kiln.launcher.heartbeat) and runs a Watchdog thread beside
torchrun. Every POLL_S it reads the ranks' files of the newest torchrun attempt:

- Hung: no local rank has finished a step for max(hang_factor x median step time, hang_min_s). Until a rank has two
  steps (no median yet), and after torchrun restarts the workers, the limit is hang_min_s alone.
- Off: no rank writes a heartbeat (the script never calls Heartbeat.from_env()) within max(hang_min_s, FIRST_BEAT_S)
  of the start: one note, and the run record says so. A heartbeat that appears later turns it on.
- The culprits are the local ranks whose process is stopped (/proc/<pid>/stat state T or t) or gone, or whose
  heartbeat thread has been silent for STALE_S; when every rank is alive, the ranks at the lowest step. A node
  whose ranks are all alive and at the same step is waiting for another node: it does not drain itself, it waits
  GRACE_S for the culprit's node to act (its requeue ends this job step too) and then exits the same way.

A failed health check: when the node's scheduled check (kiln-launch health --drain) fails after the launch began, its
verdict (kiln.launcher.health_verdict) ends the run the same way, status "node_unhealthy", EXIT_HUNG: the drain keeps
new jobs off the node, and this requeues the running one without it.

On a hang: ask the live ranks for a flight recorder dump (into <job dir>/flight-recorder/), print one line, drain this
node under Slurm when a culprit is here (kiln.launcher.slurm_node; where the job's user may not, through the node's
root-side hand-off, kiln.launcher.drain_request), requeue the job when auto-resume is on, then stop:
SIGCONT to stopped ranks so they can die, SIGTERM to this agent, which torchrun turns into SignalException, so it
stops the whole worker group and returns instead of restarting the workers in place. The launch then ends "hung"
with EXIT_HUNG. A rank reporting that NCCL chose TCP on an EFA node ends it "tcp_fallback" with EXIT_TCP_FALLBACK.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.launcher import drain_request, slurm_node
from kiln.launcher.errors import UsageError
from kiln.launcher.health_verdict import HealthVerdict, VerdictWatch
from kiln.launcher.heartbeat import DUMP_REQUEST, read_json, write_json

# sysexits.h EX_TEMPFAIL: try again later (the job requeues without the bad node).
EXIT_HUNG = 75
# sysexits.h EX_CONFIG: the image or node cannot run NCCL over EFA; a retry would fall back again.
EXIT_TCP_FALLBACK = 78
DEFAULT_HANG_FACTOR = 10
DEFAULT_HANG_MIN_S = 300
FACTOR_VARIABLE, MIN_VARIABLE = "KILN_HANG_FACTOR", "KILN_HANG_MIN_S"
AUTO_RESUME_VARIABLE = "KILN_AUTO_RESUME"
CANNOT_SAY = "scontrol cannot say whether the job may requeue"
POLL_S = 1.0
# A heartbeat thread rewrites its file every second; five silent seconds is a process that does not run.
STALE_S = 5.0
# How long the live ranks get to write their dumps.
DUMP_WAIT_S = 10.0
# How long a node with no culprit of its own waits for the culprit's node to drain itself and requeue the job.
GRACE_S = 60.0
# The first heartbeat comes after imports, the rendezvous and init_process_group: a script that has written none by
# max(hang_min_s, FIRST_BEAT_S) after the start is taken to call no Heartbeat.
FIRST_BEAT_S = 60.0
STOPPED_STATES = ("T", "t")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """When a stall is a hang."""

    factor: float = DEFAULT_HANG_FACTOR
    min_s: float = DEFAULT_HANG_MIN_S
    source: str = "defaults"

    def limit(self, median_step_s: float | None) -> float:
        """Return the stall that counts as a hang for MEDIAN_STEP_S (None: no median yet)."""
        return self.min_s if median_step_s is None else max(self.factor * median_step_s, self.min_s)


def settings(environ: Mapping[str, str], *, factor: float | None = None, min_s: float | None = None) -> Settings:
    """Return the hang limits: the flags, else KILN_HANG_FACTOR / KILN_HANG_MIN_S, else the defaults."""
    sources = []
    values = {}
    for name, flag, variable, default, low in (
        ("factor", factor, FACTOR_VARIABLE, DEFAULT_HANG_FACTOR, 1.0),
        ("min_s", min_s, MIN_VARIABLE, DEFAULT_HANG_MIN_S, 1.0),
    ):
        if flag is not None:
            values[name] = float(flag)
            sources.append(f"--hang-{name.replace('_', '-')}")
        elif environ.get(variable):
            values[name] = _number(variable, environ[variable], low)
            sources.append(variable)
        else:
            values[name] = float(default)
    return Settings(**values, source=", ".join(sources) or "defaults")


def _number(name: str, text: str, low: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value >= low:
        raise UsageError(f"{name}: expected a number of at least {low:g} (got {text!r})")
    return value


@dataclass(frozen=True, kw_only=True)
class Beat:
    """One rank's heartbeat file."""

    rank: int
    local_rank: int
    host: str
    pid: int
    attempt: int
    step: int | None
    step_at: float | None
    alive_at: float
    median_step_s: float | None
    transport: dict[str, Any] | None = None
    dumps: tuple[dict[str, Any], ...] = ()

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Beat | None:
        """Return the beat in DATA, or None when a field is missing or of the wrong kind."""
        try:
            return cls(
                rank=int(data["rank"]),
                local_rank=int(data["local_rank"]),
                host=str(data["host"]),
                pid=int(data["pid"]),
                attempt=int(data["attempt"]),
                step=None if data.get("step") is None else int(data["step"]),
                step_at=None if data.get("step_at") is None else float(data["step_at"]),
                alive_at=float(data["alive_at"]),
                median_step_s=None if data.get("median_step_s") is None else float(data["median_step_s"]),
                transport=data.get("transport") if isinstance(data.get("transport"), dict) else None,
                dumps=tuple(d for d in data.get("dumps") or () if isinstance(d, dict)),
            )
        except (KeyError, TypeError, ValueError):
            return None


def read_beats(directory: Path) -> list[Beat]:
    """Return every heartbeat in DIRECTORY (all attempts), by attempt and rank."""
    beats = []
    for path in directory.glob("attempt*-rank*.json"):
        data = read_json(path)
        beat = Beat.parse(data) if data is not None else None
        if beat is not None:
            beats.append(beat)
    return sorted(beats, key=lambda b: (b.attempt, b.rank))


def process_state(pid: int, proc: Path = Path("/proc")) -> str | None:
    """Return PID's state letter from /proc (R, S, D, T, t, Z, ...), or None when it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    rest = text.rsplit(")", 1)[-1].split()
    state = rest[0] if rest else None
    return None if state in (None, "Z", "X") else state


@dataclass(frozen=True, kw_only=True)
class Suspect:
    """A local rank the hang is blamed on, and why."""

    beat: Beat
    why: str


@dataclass(frozen=True, kw_only=True)
class Hang:
    """A stall past the limit, with the local culprits (empty: every local rank is alive and waiting)."""

    attempt: int
    stall_s: float
    limit_s: float
    median_step_s: float | None
    culprits: tuple[Suspect, ...]
    beats: tuple[Beat, ...]
    progress_at: float


class Judge:
    """Decide, from one poll's heartbeats, whether this node's ranks are hung (no I/O, no clock of its own)."""

    def __init__(self, limits: Settings, *, started_at: float, stale_s: float = STALE_S) -> None:
        self.limits = limits
        self.stale_s = stale_s
        self.attempt: int | None = None
        self.attempt_seen_at = started_at
        self.started_at = started_at

    def current(self, beats: list[Beat]) -> list[Beat]:
        """Return the beats of the newest attempt."""
        if not beats:
            return []
        newest = max(b.attempt for b in beats)
        return [b for b in beats if b.attempt == newest]

    def observe(self, beats: list[Beat], now: float, state_of: Callable[[int], str | None]) -> Hang | None:
        """Return the hang BEATS show at NOW, or None."""
        current = self.current(beats)
        if not current:
            return None
        attempt = current[0].attempt
        states = {b.rank: state_of(b.pid) for b in current}
        if attempt != self.attempt or all(state is None for state in states.values()):
            # A new attempt, or torchrun between attempts (every worker of the newest is gone): the clock restarts.
            self.attempt, self.attempt_seen_at = attempt, now
            return None
        finished = [b.step_at for b in current if b.step_at is not None]
        progress_at = max([self.attempt_seen_at, *finished])
        medians = [b.median_step_s for b in current if b.median_step_s is not None]
        median = statistics.median(medians) if medians else None
        limit = self.limits.limit(median)
        stall = now - progress_at
        if stall <= limit:
            return None
        return Hang(
            attempt=attempt,
            stall_s=stall,
            limit_s=limit,
            median_step_s=median,
            culprits=tuple(self.culprits(current, now, states)),
            beats=tuple(current),
            progress_at=progress_at,
        )

    def culprits(self, beats: list[Beat], now: float, states: Mapping[int, str | None]) -> list[Suspect]:
        """Return the local ranks to blame: stopped, gone or silent ones, else those behind the others."""
        found = []
        for beat in beats:
            state = states.get(beat.rank)
            if state is None:
                found.append(Suspect(beat=beat, why="process gone"))
            elif state in STOPPED_STATES:
                found.append(Suspect(beat=beat, why="process stopped"))
            elif now - beat.alive_at > self.stale_s:
                found.append(Suspect(beat=beat, why=f"no heartbeat for {now - beat.alive_at:.0f} s"))
        if found:
            return found
        steps = {_step(b) for b in beats}
        if len(steps) < 2:
            return []
        lowest = min(steps)
        return [Suspect(beat=b, why="behind the others") for b in beats if _step(b) == lowest]


def _step(beat: Beat) -> int:
    return 0 if beat.step is None else beat.step


@dataclass(kw_only=True)
class Verdict:
    """How the watchdog ended the run."""

    status: str
    exit_code: int
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Context:
    """Where this node's watchdog acts: its heartbeat and flight-recorder directories, its Slurm job and node."""

    heartbeat_dir: Path
    flight_recorder_dir: Path
    node: str
    slurm_job_id: str | None = None
    # Where this node's scheduled health check leaves its verdict (kiln.launcher.health_verdict); None: not watched.
    health_verdict: Path | None = None
    # The node's root, where its drain hand-off takes requests (kiln.launcher.drain_request); None: no hand-off.
    node_root: Path | None = None


def auto_resume(environ: Mapping[str, str], job_id: str | None) -> tuple[bool, str]:
    """Return whether to requeue after a hang, and why: KILN_AUTO_RESUME when set, else on for a Slurm batch job
    whose Requeue=1 (scontrol show job: BatchFlag, Requeue)."""
    chosen = environ.get(AUTO_RESUME_VARIABLE, "").strip()
    if chosen:
        on = chosen.lower() in ("1", "true", "yes", "on")
        return on, f"{AUTO_RESUME_VARIABLE}={chosen}"
    if not job_id:
        return False, "not a Slurm job"
    allowed = slurm_node.requeue_allowed(job_id, environ)
    if allowed is None:
        return False, CANNOT_SAY
    return allowed, f"job {job_id} is a batch job with Requeue=1" if allowed else f"job {job_id} may not requeue"


class Watchdog:
    """Poll the heartbeats in a thread; on a hang or a TCP fallback, act and stop the run (see the module doc)."""

    def __init__(
        self,
        context: Context,
        limits: Settings,
        *,
        environ: Mapping[str, str] = os.environ,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        state_of: Callable[[int], str | None] = process_state,
        stop_run: Callable[[], None] | None = None,
        on_verdict: Callable[[Verdict], None] | None = None,
        poll_s: float = POLL_S,
        dump_wait_s: float = DUMP_WAIT_S,
        grace_s: float = GRACE_S,
    ) -> None:
        self.context = context
        self.limits = limits
        self.environ = environ
        self.clock = clock
        self._stopping = threading.Event()
        # Held while stopping the run, so that once stop() has returned the watchdog signals nothing more.
        self._ending = threading.Lock()
        self.sleep = sleep or (lambda seconds: self._stopping.wait(seconds))
        self.state_of = state_of
        self.stop_run = stop_run or _signal_agent
        self.on_verdict = on_verdict
        self.poll_s = poll_s
        self.dump_wait_s = dump_wait_s
        self.grace_s = grace_s
        self.started_at = clock()
        self.judge = Judge(limits, started_at=self.started_at)
        self.health = VerdictWatch(context.health_verdict) if context.health_verdict else None
        self.status = "waiting for the first heartbeat"
        self.verdict: Verdict | None = None
        self.beats: list[Beat] = []
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="kiln-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (the run ended) and wait for the thread."""
        with self._ending:
            self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.dump_wait_s + self.grace_s + 30)
        if self.verdict is None:
            self.status = "no hang" if self.judge.attempt is not None else "off: the script wrote no heartbeat"

    def run(self) -> None:
        """Poll until stopped or until a verdict ends the run."""
        while not self._stopping.is_set():
            if self.poll():
                return
            self.sleep(self.poll_s)

    def poll(self) -> bool:
        """Look once; return True when a verdict was reached (and acted on)."""
        now = self.clock()
        if self.health is not None:
            found = self.health.poll()
            # Only a check made after this launch began: an old verdict is the node's past, not this run's.
            if found is not None and not found.healthy and found.checked_at >= self.started_at:
                self._unhealthy(found)
                return True
        self.beats = read_beats(self.context.heartbeat_dir)
        current = self.judge.current(self.beats)
        if not current:
            if self.status.startswith("waiting") and now - self.started_at > max(self.limits.min_s, FIRST_BEAT_S):
                self.status = "off: the script writes no heartbeat"
                print(
                    "kiln-launch: note: no rank reports its steps (kiln.launcher.heartbeat), so the hang watchdog "
                    "is off for this run",
                    file=sys.stderr,
                    flush=True,
                )
            return False
        self.status = "watching"
        if bad := [b for b in current if b.transport and b.transport.get("ok") is False]:
            self._tcp_fallback(bad)
            return True
        hang = self.judge.observe(self.beats, now, self.state_of)
        if hang is None:
            return False
        self._hung(hang, now)
        return True

    def _tcp_fallback(self, bad: list[Beat]) -> None:
        first = bad[0]
        ranks = ", ".join(str(b.rank) for b in bad)
        detail = first.transport.get("detail", "NCCL did not choose EFA") if first.transport else ""
        message = (
            f"rank(s) {ranks} on {self.context.node}: {detail}; fix the image's aws-ofi-nccl/libfabric, or allow TCP "
            f"(--allow-tcp, KILN_ALLOW_TCP=1, the spec's resilience.allow_tcp)"
        )
        evidence = first.transport.get("evidence", []) if first.transport else []
        print(f"kiln-launch: tcp_fallback: {message}", file=sys.stderr, flush=True)
        self._finish(
            Verdict(
                status="tcp_fallback",
                exit_code=EXIT_TCP_FALLBACK,
                message=message,
                details={"ranks": [b.rank for b in bad], "evidence": evidence},
            ),
            stopped=[],
        )

    def _unhealthy(self, found: HealthVerdict) -> None:
        """This node failed its health check while the job ran: end the run so the job requeues without it."""
        self.status = "node_unhealthy"
        first = found.failures[0] if found.failures else "a check failed"
        line = f"{self.context.node} failed its health check ({first}); ending the run so the job requeues without it"
        print(f"kiln-launch: unhealthy: {line}", file=sys.stderr, flush=True)
        details: dict[str, Any] = {
            "failures": list(found.failures),
            "checked_at": found.checked_at,
            "drain": found.drain,
        }
        verdict = Verdict(status="node_unhealthy", exit_code=EXIT_HUNG, message=line, details=details)
        self._requeue_and_finish(verdict, stopped=[])

    def _hung(self, hang: Hang, detected: float) -> None:
        self.status = "hung"
        dumps = self._request_dumps(hang)
        local = bool(hang.culprits)
        line = describe(hang, self.context.node, self.context.flight_recorder_dir if dumps else None)
        if not local:
            line += f"; waiting {self.grace_s:.0f} s for that node to act"
        print(f"kiln-launch: hung: {line}", file=sys.stderr, flush=True)
        details: dict[str, Any] = {
            "attempt": hang.attempt,
            "stall_s": round(hang.stall_s, 3),
            "limit_s": round(hang.limit_s, 3),
            "median_step_s": hang.median_step_s,
            "limits_from": self.limits.source,
            # How long after the stall passed the limit the watchdog saw it (its polling and file latency).
            "detection_delay_s": round(detected - hang.progress_at - hang.limit_s, 3),
            "detected_at": detected,
            "culprits": [
                {"rank": s.beat.rank, "host": s.beat.host, "step": s.beat.step, "why": s.why} for s in hang.culprits
            ],
            "steps": {str(b.rank): b.step for b in hang.beats},
            "flight_recorder": dumps,
        }
        if local and self.context.slurm_job_id:
            details["drain"] = self._drain(self.context.slurm_job_id, line)
        elif local:
            details["drain"] = "not a Slurm job: nothing to drain"
        else:
            details["drain"] = "no culprit on this node: not drained"
            self.sleep(self.grace_s)
            if self._stopping.is_set():
                # The run ended while this node waited: the culprit's node requeued the job, or torchrun gave up.
                details["grace"] = "the run ended while this node waited"
                self.verdict = Verdict(status="hung", exit_code=EXIT_HUNG, message=line, details=details)
                self.status = "hung"
                return
        verdict = Verdict(status="hung", exit_code=EXIT_HUNG, message=line, details=details)
        self._requeue_and_finish(verdict, stopped=[s.beat.pid for s in hang.culprits if s.why == "process stopped"])

    def _drain(self, job_id: str, line: str) -> str:
        """Drain this node for the hang in LINE; return what happened in one line."""
        direct = slurm_node.drain(self.context.node, f"hung: {line}", self.environ)
        return self._directly_or_handed(direct, "drained", drain_request.DRAIN, job_id, line)

    def _requeue(self, job_id: str, line: str) -> str:
        """Requeue JOB_ID as its owner may; return what happened in one line."""
        direct = slurm_node.requeue(job_id, self.environ)
        return self._directly_or_handed(direct, "requeued", drain_request.REQUEUE, job_id, line)

    def _directly_or_handed(self, direct: slurm_node.Outcome, done: str, action: str, job_id: str, line: str) -> str:
        """Return DONE when scontrol did it (DIRECT); else, where Slurm refuses the job's user (a drain) or this
        process has no scontrol (a training container), ask the node's root side to do ACTION."""
        if direct.ok:
            return done
        if self.context.node_root is None:
            return direct.detail
        handed = drain_request.ask(self.context.node_root, self.context.node, job_id, line, action=action)
        return handed.detail if handed.ok else f"{direct.detail}; {handed.detail}"

    def _requeue_and_finish(self, verdict: Verdict, *, stopped: list[int]) -> None:
        """Requeue the job when auto-resume is on, then end the run with VERDICT."""
        resume, why = auto_resume(self.environ, self.context.slurm_job_id)
        if not resume and why == CANNOT_SAY and self.context.node_root is not None:
            # No scontrol here (a training container): the node's root side asks Slurm and requeues only a job that
            # may be requeued.
            resume, why = True, f"{why}; the node's hand-off requeues it only with Requeue=1"
        verdict.details["auto_resume"] = {"on": resume, "why": why}
        if resume and self.context.slurm_job_id:
            # The record says the verdict before the requeue, which ends this job step (and this process) soon.
            if self.on_verdict is not None:
                self.on_verdict(verdict)
            said = self._requeue(self.context.slurm_job_id, verdict.message)
            verdict.details["requeue"] = said
            if said != "requeued":
                print(f"kiln-launch: requeue: {said}", file=sys.stderr, flush=True)
        self._finish(verdict, stopped=stopped)

    def _request_dumps(self, hang: Hang) -> list[dict[str, Any]]:
        """Ask the live ranks for a dump; return what they wrote within dump_wait_s."""
        live = [b for b in hang.beats if self.state_of(b.pid) not in (None, *STOPPED_STATES)]
        if not live:
            return []
        request_id = f"{hang.attempt}-{self.clock():.3f}"
        request = {"id": request_id, "dir": str(self.context.flight_recorder_dir), "reason": "hang"}
        write_json(self.context.heartbeat_dir / DUMP_REQUEST, request)
        deadline = self.clock() + self.dump_wait_s
        written: dict[int, list[dict[str, Any]]] = {}
        while True:
            for beat in self.judge.current(read_beats(self.context.heartbeat_dir)):
                for dump in beat.dumps:
                    if dump.get("request") == request_id:
                        written[beat.rank] = list(dump.get("files") or [])
            if len(written) >= len(live) or self.clock() >= deadline:
                break
            self.sleep(min(0.2, self.poll_s))
        return [{"rank": rank, **entry} for rank, files in sorted(written.items()) for entry in files]

    def _finish(self, verdict: Verdict, *, stopped: list[int]) -> None:
        self.verdict = verdict
        self.status = verdict.status
        if self.on_verdict is not None:
            self.on_verdict(verdict)
        for pid in stopped:
            # A stopped process cannot act on SIGTERM until it runs again.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        with self._ending:
            if not self._stopping.is_set():
                self.stop_run()

    def summary(self) -> dict[str, Any]:
        """Return what the run record keeps about the watchdog."""
        return {
            "status": self.status,
            "hang_factor": self.limits.factor,
            "hang_min_s": self.limits.min_s,
            "limits_from": self.limits.source,
            "heartbeat_dir": str(self.context.heartbeat_dir),
            "verdict": None
            if self.verdict is None
            else {"status": self.verdict.status, "message": self.verdict.message, **self.verdict.details},
        }


def describe(hang: Hang, node: str, flight_recorder: Path | None) -> str:
    """Return the one line naming the culprit(s) (or saying there is none here)."""
    stall = f"{hang.stall_s:.0f} s"
    where = f"; flight recorder in {flight_recorder}" if flight_recorder else ""
    if not hang.culprits:
        step = _step(hang.beats[0]) + 1
        return (
            f"no rank on {node} has finished a step for {stall} (limit {hang.limit_s:.0f} s); all "
            f"{len(hang.beats)} local rank(s) are alive and wait at step {step}: the culprit is on another node{where}"
        )
    blamed = {s.beat.rank for s in hang.culprits}
    first = hang.culprits[0].beat
    ranks = ", ".join(str(s.beat.rank) for s in hang.culprits)
    label = "rank" if len(blamed) == 1 else "ranks"
    others = [b for b in hang.beats if b.rank not in blamed]
    why = ", ".join(sorted({s.why for s in hang.culprits}))
    if not others:
        return f"{label} {ranks} on {first.host} has not reached step {_step(first) + 1} for {stall} ({why}){where}"
    # The others wait in step S's collectives, so the culprit has not reached S (its own file may lag a step behind:
    # a process stopped between a step and its thread's next write never published it).
    waiting = max(_step(b) for b in others) + 1
    return (
        f"{label} {ranks} on {first.host} has not reached step {waiting} for {stall} ({why}; last reported step "
        f"{_step(first)}); others wait at step {waiting}{where}"
    )


def _signal_agent() -> None:
    """End torchrun in this process: its SIGTERM handler raises SignalException in the main thread, and the agent
    stops every worker and returns (it does not restart them)."""
    os.kill(os.getpid(), signal.SIGTERM)
