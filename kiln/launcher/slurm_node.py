"""Tell Slurm about this node or job from the node itself: drain a bad node, resume kiln's own drains, requeue a job.

kiln-launch health drains a node whose check fails; the hang watchdog drains the node of the rank that stopped and
requeues the job. Both go through `scontrol` (Slurm's own client, with SLURM_CONF as the caller set it), passing an
argument list, never a shell line. A drain kiln sets has a reason starting with REASON_PREFIX, so kiln resumes only
its own drains and never one a person or another tool set.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

REASON_PREFIX = "kiln-"
# Slurm stores a reason of any length, but sinfo's default width and dashboards show the start: keep it one line.
MAX_REASON_CHARS = 200
TIMEOUT_S = 15
_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What scontrol did: ok, or one line saying why not."""

    ok: bool
    detail: str = ""


def node_name(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """Return this node's Slurm name: EXPLICIT, else $SLURMD_NODENAME (set in jobs and slurmd's programs), else the
    short host name."""
    return explicit or environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def clean_reason(reason: str) -> str:
    """Return REASON as one printable line of at most MAX_REASON_CHARS."""
    line = " ".join(reason.split())
    line = "".join(ch if ch.isprintable() else "?" for ch in line)
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def drain(node: str, reason: str, environ: Mapping[str, str] = os.environ) -> Outcome:
    """Set NODE to DRAIN with REASON (kiln's prefix added when missing): running jobs finish, no new job starts."""
    if not reason.startswith(REASON_PREFIX):
        reason = REASON_PREFIX + reason
    return _scontrol(["update", f"NodeName={node}", "State=DRAIN", f"Reason={clean_reason(reason)}"], environ)


def drained_by_kiln(node: str, environ: Mapping[str, str] = os.environ) -> bool | None:
    """Return whether NODE is drained (or draining) with a reason kiln set; None when scontrol cannot say."""
    result = _run(["show", "node", node, "--oneliner"], environ)
    if result is None or result.returncode != 0:
        return None
    fields = _record_fields(result.stdout)
    state = fields.get("State", "")
    return "DRAIN" in state and fields.get("Reason", "").startswith(REASON_PREFIX)


def drain_reason(node: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """Return the reason NODE is drained (or draining) with, '' when it is not drained; None when scontrol cannot
    say (kiln-launch health resumes only its own drains and never overwrites another's reason)."""
    result = _run(["show", "node", node, "--oneliner"], environ)
    if result is None or result.returncode != 0:
        return None
    fields = _record_fields(result.stdout)
    return fields.get("Reason", "") if "DRAIN" in fields.get("State", "") else ""


def node_fields(node: str, environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """Return NODE's `scontrol show node` fields (State, Reason, ...); None when scontrol cannot say."""
    result = _run(["show", "node", node, "--oneliner"], environ)
    if result is None or result.returncode != 0:
        return None
    return _record_fields(result.stdout)


def fail(node: str, reason: str, environ: Mapping[str, str] = os.environ) -> Outcome:
    """Set NODE to FAIL with REASON exactly as given (a platform's own word, such as HyperPod's Action:Replace)."""
    return _scontrol(["update", f"NodeName={node}", "State=FAIL", f"Reason={reason}"], environ)


def resume(node: str, environ: Mapping[str, str] = os.environ) -> Outcome:
    """Return NODE to service (State=RESUME)."""
    return _scontrol(["update", f"NodeName={node}", "State=RESUME"], environ)


def requeue(job_id: str, environ: Mapping[str, str] = os.environ) -> Outcome:
    """Requeue JOB_ID: Slurm ends its steps and schedules it again (on nodes that take work)."""
    return _scontrol(["requeue", job_id], environ)


def requeue_allowed(job_id: str, environ: Mapping[str, str] = os.environ) -> bool | None:
    """Return whether Slurm may requeue JOB_ID: a batch job (BatchFlag=1; Slurm requeues batch jobs only,
    https://slurm.schedmd.com/scontrol.html#OPT_requeue) with Requeue=1 (sbatch --requeue, or JobRequeue=1 in
    slurm.conf); None when scontrol cannot say."""
    result = _run(["show", "job", job_id, "--oneliner"], environ)
    if result is None or result.returncode != 0:
        return None
    fields = _record_fields(result.stdout)
    if "Requeue" not in fields:
        return None
    return fields["Requeue"] == "1" and fields.get("BatchFlag", "1") == "1"


def job_fields(job_id: str, environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """Return JOB_ID's `scontrol show job` fields (JobState, UserId, NodeList, ...); None when Slurm knows no such
    job or cannot say."""
    result = _run(["show", "job", job_id, "--oneliner"], environ)
    if result is None or result.returncode != 0:
        return None
    fields = _record_fields(result.stdout)
    return fields if fields.get("JobId") == job_id else None


def hostnames(node_list: str, environ: Mapping[str, str] = os.environ) -> list[str]:
    """Return the node names in Slurm's NODE_LIST expression (node[1-3]), expanded by scontrol; [] when empty or
    when scontrol cannot say."""
    if not node_list or node_list == "(null)":
        return []
    result = _run(["show", "hostnames", node_list], environ)
    if result is None or result.returncode != 0:
        return []
    return result.stdout.split()


def _record_fields(text: str) -> dict[str, str]:
    """Parse a `scontrol --oneliner` record into Key=Value pairs; a value (Reason=...) may hold spaces."""
    return dict(_FIELD.findall(text.strip()))


def _scontrol(args: list[str], environ: Mapping[str, str]) -> Outcome:
    result = _run(args, environ)
    if result is None:
        return Outcome(ok=False, detail="scontrol is not on PATH: not a Slurm node")
    if result.returncode != 0:
        said = " ".join((result.stderr or result.stdout).split()) or f"exit code {result.returncode}"
        return Outcome(ok=False, detail=f"scontrol {args[0]} failed: {said}")
    return Outcome(ok=True)


def _run(args: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess[str] | None:
    program = shutil.which("scontrol", path=environ.get("PATH"))
    if program is None:
        return None
    try:
        return subprocess.run(
            [program, *args], capture_output=True, text=True, env=dict(environ), timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 1, "", f"no answer within {TIMEOUT_S}s")
