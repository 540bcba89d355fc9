"""Run work on the local cluster: a command once per node (`run`) and the launcher's smoke job (`smoke`)."""

from __future__ import annotations

import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kiln.local import slurm
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout

DEFAULT_SMOKE_STEPS = 30
SMOKE_TIMEOUT_S = 600.0
_STEP = re.compile(r"^step\s+(\d+)/(\d+)\s+loss\s+([0-9.]+)\s+step_time\s+([0-9.]+) s\s+tokens/s\s+([0-9,]+)\s*$")
_POLL_S = 0.1
_STATE_POLL_S = 0.25
# The end of a `run` task: the user's command, or one line per node when the job's PATH has no such program.
_EXEC_COMMAND = """command -v "$1" >/dev/null || {
  printf 'kiln local run: %s: command not found on %s\\n' "$1" "${SLURMD_NODENAME:-the node}" >&2
  exit 127
}
exec "$@"
"""


def usable_nodes(layout: ClusterLayout, wanted: int | None) -> int:
    """Return how many nodes to use (all by default); refuse more than exist or than take work."""
    count = len(layout.nodes)
    wanted = count if wanted is None else wanted
    if not 1 <= wanted <= count:
        raise LocalError(f"--nodes: got {wanted}, allowed: 1..{count} (the cluster has {count} nodes)")
    statuses = slurm.node_statuses(layout)
    not_ready = [f"{s.name} {s.state}" for s in statuses.values() if not s.ready]
    if count - len(not_ready) < wanted:
        raise LocalError(
            f"only {count - len(not_ready)} of {count} nodes take work ({', '.join(not_ready)}): "
            "`kiln local up` heals them"
        )
    return wanted


def job_preamble(layout: ClusterLayout) -> str:
    """Return the shell lines every local job runs first, so it sees what a job on a cloud node sees.

    The launcher's settings from the bootstrap (launcher.env: checkpoints under the prefix), the node's
    /usr/local/bin (kiln-launch) first on PATH, and the node's /tmp under the prefix: `down` removes all of it.
    """
    bin_dir = shlex.quote(str(layout.path("/usr/local/bin")))
    tmp_dir = shlex.quote(str(layout.tmp_dir))
    return f"""set -euo pipefail
# The launcher venv must use its own kiln wheel, not whatever the submitting shell had.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
set -a
# shellcheck source=/dev/null
source {shlex.quote(str(layout.launcher_env))}
set +a
# The bootstrap's name for a local node: no IMDS to ask, and no NCCL preset applies.
export KILN_INSTANCE_TYPE=local
# task/none binds nothing: keep torch's threads to the CPUs Slurm gave the node, or ranks fight over cores.
export OMP_NUM_THREADS="${{SLURM_CPUS_ON_NODE:-1}}"
# The node's /usr/local/bin, where the bootstrap put kiln-launch, comes first as on a cloud node.
export PATH={bin_dir}:"$PATH"
# The node's /tmp is under the prefix too (torchrun leaves its log directories there).
mkdir -m 1777 {tmp_dir} 2>/dev/null || [[ -d {tmp_dir} ]]
export TMPDIR={tmp_dir}
"""


def run_command(layout: ClusterLayout, nodes: int | None, command: list[str]) -> int:
    """Run COMMAND once on each of NODES nodes through srun, after the job preamble; return the job's exit code."""
    if not command:
        raise LocalError("give the command after --, e.g. `kiln local run --nodes 2 -- hostname`")
    count = usable_nodes(layout, nodes)
    argv = ["srun", f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1", "--job-name=kiln-run", "--"]
    # bash runs the preamble, then execs the command (found on the job's PATH) with its arguments untouched.
    wrapper = ["bash", "-c", job_preamble(layout) + _EXEC_COMMAND, "kiln local run"]
    try:
        return subprocess.run([*argv, *wrapper, *command], env=slurm.client_env(layout)).returncode
    except FileNotFoundError:
        raise LocalError("srun is not installed: run `kiln local up`, which installs Slurm") from None


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step line the smoke job's rank 0 printed."""

    step: int
    total: int
    loss: float
    step_time_s: float
    tokens_per_s: float


def parse_step(line: str) -> Step | None:
    """Parse a smoke step line (`step 3/30  loss 5.1  step_time 0.02 s  tokens/s 51,200`), else None."""
    match = _STEP.match(line.strip())
    if not match:
        return None
    step, total, loss, step_time, tokens = match.groups()
    return Step(
        step=int(step),
        total=int(total),
        loss=float(loss),
        step_time_s=float(step_time),
        tokens_per_s=float(tokens.replace(",", "")),
    )


@dataclass(frozen=True, kw_only=True)
class SmokeResult:
    """How a smoke job went: its record, the steps it printed and where its checkpoints are."""

    job_id: str
    state: str
    exit_code: int
    node_list: str
    steps: tuple[Step, ...]
    first_step_after_s: float | None
    checkpoint_dir: Path
    output: Path

    @property
    def median_tokens_per_s(self) -> float | None:
        # Step 1 pays for warm-up (allocator, first gloo all-reduce): leave it out when there are more.
        timed = self.steps[1:] or self.steps
        return statistics.median(step.tokens_per_s for step in timed) if timed else None

    @property
    def median_step_time_s(self) -> float | None:
        timed = self.steps[1:] or self.steps
        return statistics.median(step.step_time_s for step in timed) if timed else None


def smoke_script(layout: ClusterLayout, steps: int, extra: tuple[str, ...] = ()) -> str:
    """Return the batch script: the job preamble, then one kiln-launch per node (it starts the workers); EXTRA are
    more smoke options (--checkpoint-every K)."""
    options = " ".join(shlex.quote(arg) for arg in ("--steps", str(steps), *extra))
    return f"""#!/bin/bash
# kiln local smoke: the launcher's smoke job, one kiln-launch per node (it starts the workers).
{job_preamble(layout)}exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 kiln-launch smoke {options}
"""


class OutputTail:
    """The lines a job has written to its output file since the last read (the file may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.position = 0
        self.partial = ""

    def new_lines(self) -> list[str]:
        """Return the complete lines written since the last call."""
        if not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.position)
            chunk = handle.read()
        self.position += len(chunk)
        self.partial += chunk.decode(errors="replace")
        *lines, self.partial = self.partial.split("\n")
        return lines

    def rest(self) -> str:
        """Return what is left after the last newline, and forget it."""
        left, self.partial = self.partial, ""
        return left


def _has_torch(layout: ClusterLayout) -> bool:
    linked = layout.path("/opt/kiln/torch/torch")
    return linked.exists() or any(layout.venv.glob("lib/python*/site-packages/torch"))


def submit_smoke(layout: ClusterLayout, nodes: int, steps: int, extra: tuple[str, ...] = ()) -> tuple[str, Path, float]:
    """Submit the smoke job; return its id, its output file and when it was submitted (epoch seconds)."""
    layout.jobs_dir.mkdir(parents=True, exist_ok=True)
    script = layout.jobs_dir / "smoke.sh"
    script.write_text(smoke_script(layout, steps, extra))
    submitted = time.time()
    result = slurm.client(
        layout,
        "sbatch",
        "--parsable",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--job-name=kiln-smoke",
        # Requeued after a node fails or the job hangs (resilience.auto_resume), resuming from its checkpoint; the
        # output of every attempt stays in one file.
        "--requeue" if layout.auto_resume else "--no-requeue",
        "--open-mode=append",
        f"--chdir={layout.jobs_dir}",
        f"--output={layout.jobs_dir}/smoke-%j.out",
        str(script),
    )
    job_id = result.stdout.strip().split(";")[0]
    return job_id, layout.jobs_dir / f"smoke-{job_id}.out", submitted


def follow(
    layout: ClusterLayout, job_id: str, output: Path, submitted: float, out: TextIO, timeout_s: float
) -> SmokeResult:
    """Stream the job's output until it ends; return what it did."""
    tail = OutputTail(output)
    steps: list[Step] = []
    first_step_at: float | None = None
    record: dict[str, str] = {}
    next_check = 0.0
    deadline = time.monotonic() + timeout_s
    finished = False
    while True:
        for line in tail.new_lines():
            print(f"  | {line}", file=out, flush=True)
            step = parse_step(line)
            if step is not None:
                if first_step_at is None:
                    first_step_at = time.time()
                steps.append(step)
        if finished:
            break
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + _STATE_POLL_S
            found = slurm.job_record(layout, job_id)
            if found is None or found.get("JobState") in slurm.TERMINAL_JOB_STATES:
                record = found or record
                # One more pass drains what the job wrote last.
                finished = True
                continue
            record = found
        if time.monotonic() > deadline:
            slurm.client(layout, "scancel", job_id, check=False)
            raise LocalFailure(f"smoke job {job_id} did not finish within {timeout_s:.0f}s; cancelled it")
        time.sleep(_POLL_S)
    if rest := tail.rest():
        print(f"  | {rest}", file=out)
    return SmokeResult(
        job_id=job_id,
        state=record.get("JobState", "UNKNOWN"),
        exit_code=slurm.exit_code(record) if record else 1,
        node_list=record.get("NodeList", "?"),
        steps=tuple(steps),
        first_step_after_s=None if first_step_at is None else first_step_at - submitted,
        checkpoint_dir=layout.checkpoint_dir / job_id,
        output=output,
    )


def report_lines(result: SmokeResult) -> list[str]:
    """Return the smoke summary: loss, throughput, time to the first step and the checkpoint location."""
    lines = [f"smoke: job {result.job_id} {result.state} (exit {result.exit_code}) on {result.node_list}"]
    if result.steps:
        first, last = result.steps[0], result.steps[-1]
        trend = "falls" if last.loss < first.loss else "does not fall"
        lines.append(f"smoke: {len(result.steps)} steps, loss {first.loss:.4f} -> {last.loss:.4f} ({trend})")
        lines.append(
            f"smoke: throughput {result.median_tokens_per_s:,.0f} tokens/s "
            f"(median step time {result.median_step_time_s:.4f} s)"
        )
        lines.append(f"smoke: first step {result.first_step_after_s:.1f} s after submission")
    else:
        lines.append(f"smoke: no step lines in {result.output}")
    checkpoints = sorted(p.name for p in result.checkpoint_dir.glob("step-*")) if result.checkpoint_dir.is_dir() else []
    where = f"{result.checkpoint_dir} ({', '.join(checkpoints)})" if checkpoints else f"none in {result.checkpoint_dir}"
    lines.append(f"smoke: checkpoints: {where}")
    lines.append(f"smoke: job output: {result.output}")
    return lines


def run_smoke(
    layout: ClusterLayout, nodes: int | None, steps: int, out: TextIO = sys.stdout, timeout_s: float = SMOKE_TIMEOUT_S
) -> int:
    """Run the smoke job across NODES nodes, stream it, print the summary; return the job's exit code."""
    if steps < 1:
        raise LocalError(f"--steps: got {steps}, allowed: an integer >= 1")
    if not _has_torch(layout):
        raise LocalError(
            "the launcher venv has no torch: install kiln with its launcher extra "
            "(pip install -e '.[launcher]'), then `kiln local down` and `kiln local up`"
        )
    count = usable_nodes(layout, nodes)
    job_id, output, submitted = submit_smoke(layout, count, steps)
    print(f"smoke: job {job_id} submitted: {count} nodes, {steps} steps, gloo; output {output}", file=out, flush=True)
    try:
        result = follow(layout, job_id, output, submitted, out, timeout_s)
    except KeyboardInterrupt:
        slurm.client(layout, "scancel", job_id, check=False)
        raise
    for line in report_lines(result):
        print(line, file=out)
    return result.exit_code
