"""A recovery drill on the local cluster: run the smoke job, break a node mid-run, and measure the recovery.

    kiln local drill --fault disk-full|hang|slurmd [--node node2] [--checkpoint-every K] [--fault-at-step S] [--json]

The smoke job runs on every node, checkpointing every K steps. Once it has printed step S, the fault
(kiln.local.faults) hits the node. The drill then watches Slurm, the node replacer's events and the job's output
until the job has resumed and printed its first step, cancels it, and reports, from the moment of the fault: when it
was noticed (the node left service, or kiln-launch named it), when the node was drained or marked down, when the job
was requeued, when the node was replaced, and when the first step after the resume ran; and how many steps were lost
(the newest step reached before the fault less the checkpoint the job resumed from: at most K).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from kiln.local import faults, replacer, slurm
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.jobs import OutputTail, parse_step, submit_smoke, usable_nodes
from kiln.local.state import ClusterState

DRILL_STEPS = 1_000_000
DEFAULT_CHECKPOINT_EVERY = 20
DEFAULT_FAULT_AT_STEP = 50
DRILL_TIMEOUT_S = 900.0
# How long the nodes may take to be idle again: before the drill starts, and after it cancels its job.
SETTLE_TIMEOUT_S = 120.0
_POLL_S = 0.1
_RESUMED = re.compile(r"smoke: resumed from step (\d+)")
# What kiln-launch prints when it has caught a fault itself (the hang watchdog, a failed node health check).
_NOTICED = re.compile(r"kiln-launch: (hung|unhealthy)\b")


@dataclass(kw_only=True)
class DrillReport:
    """What one drill measured; times are seconds after the fault, None when it never happened."""

    fault: str
    node: str
    target: str = ""
    job_id: str = ""
    fault_at_step: int = 0
    checkpoint_every: int = 0
    noticed_s: float | None = None
    noticed_by: str = ""
    out_of_service_s: float | None = None
    node_state: str = ""
    node_reason: str = ""
    requeued_s: float | None = None
    replaced_s: float | None = None
    resumed_from: int | None = None
    first_step_after_resume_s: float | None = None
    newest_step_before: int = 0
    steps_lost: int | None = None
    lines: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("lines")
        return data


def summary(report: DrillReport) -> list[str]:
    """Return the drill's findings as lines a person reads."""

    def at(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f} s"

    return [
        f"drill: {report.fault} on {report.node} ({report.target}) at step {report.fault_at_step} of job "
        f"{report.job_id}",
        f"drill: noticed after {at(report.noticed_s)} ({report.noticed_by or 'not noticed'})",
        f"drill: out of service after {at(report.out_of_service_s)}: {report.node_state} ({report.node_reason})",
        f"drill: job requeued after {at(report.requeued_s)}; node replaced after {at(report.replaced_s)}",
        f"drill: resumed from step {report.resumed_from}; first step after the resume "
        f"{at(report.first_step_after_resume_s)}",
        f"drill: steps lost {report.steps_lost} (newest step before the fault {report.newest_step_before}, "
        f"checkpoints every {report.checkpoint_every})",
    ]


class _Drill:
    def __init__(self, current: ClusterState, report: DrillReport, out: TextIO, echo: bool) -> None:
        self.current = current
        self.layout = current.layout
        self.report = report
        self.out = out
        self.echo = echo
        self.injected_at: float | None = None
        self.requeues_before: int | None = None
        self.next_job_check = 0.0

    def since(self) -> float:
        assert self.injected_at is not None
        return round(time.time() - self.injected_at, 2)

    def run(self, nodes: int, timeout_s: float) -> DrillReport:
        report = self.report
        job_id, output, _ = submit_smoke(
            self.layout, nodes, DRILL_STEPS, ("--checkpoint-every", str(report.checkpoint_every))
        )
        report.job_id = job_id
        print(f"drill: job {job_id} on {nodes} nodes; output {output}", file=self.out, flush=True)
        tail = OutputTail(output)
        deadline = time.monotonic() + timeout_s
        try:
            while report.first_step_after_resume_s is None:
                if time.monotonic() > deadline:
                    raise LocalFailure(f"the job did not resume within {timeout_s:.0f}s of its start; see {output}")
                for line in tail.new_lines():
                    self.line(line)
                if self.injected_at is not None:
                    self.watch_cluster()
                self.check_job(output)
                time.sleep(_POLL_S)
        finally:
            slurm.client(self.layout, "scancel", job_id, check=False)
        # The next drill (or job) starts on a cluster whose nodes have let go of this one.
        slurm.wait_ready(self.layout, SETTLE_TIMEOUT_S)
        if report.resumed_from is not None:
            report.steps_lost = report.newest_step_before - report.resumed_from
        return report

    def line(self, line: str) -> None:
        report = self.report
        report.lines.append(line)
        if self.echo:
            print(f"  | {line}", file=self.out, flush=True)
        step = parse_step(line)
        if self.injected_at is None:
            if step is not None:
                report.newest_step_before = max(report.newest_step_before, step.step)
                if step.step >= report.fault_at_step:
                    self.inject()
            return
        if match := _NOTICED.search(line):
            self.noticed(f"kiln-launch: {match.group(1)}")
        if match := _RESUMED.search(line):
            report.resumed_from = int(match.group(1))
        elif step is not None and report.resumed_from is None and report.requeued_s is None:
            # Steps the job still made before it stopped count as reached, and are lost if not checkpointed.
            report.newest_step_before = max(report.newest_step_before, step.step)
        elif step is not None and report.resumed_from is not None and report.first_step_after_resume_s is None:
            report.first_step_after_resume_s = self.since()

    def check_job(self, output) -> None:
        """Stop the drill in one line when the job ended for good before it resumed."""
        now = time.monotonic()
        if now < self.next_job_check:
            return
        self.next_job_check = now + 1.0
        record = slurm.job_record(self.layout, self.report.job_id)
        state = record.get("JobState", "") if record else "gone"
        if state in slurm.TERMINAL_JOB_STATES or state == "gone":
            when = "before the fault" if self.injected_at is None else "after the fault, without resuming"
            others = [line for line in self.report.lines if parse_step(line) is None]
            # What kiln-launch said (hung, drained, requeued) and then the job's last lines.
            said = [line for line in others if "kiln-launch" in line][-4:]
            said += [line for line in others[-6:] if line not in said]
            events = [
                f"{e['node']} {e['outcome']} ({e['reason']})"
                for e in replacer.read_events(self.layout)
                if self.injected_at is not None and e["started_at"] >= self.injected_at
            ]
            replaced = f"; replacements since the fault: {', '.join(events)}" if events else ""
            raise LocalFailure(
                f"job {self.report.job_id} ended {state} {when} (its lines: {' | '.join(said)}){replaced}; see {output}"
            )

    def inject(self) -> None:
        record = slurm.job_record(self.layout, self.report.job_id) or {}
        self.requeues_before = int(record.get("Restarts", "0") or 0)
        injected = faults.inject(self.current, self.report.node, self.report.fault, time.time())
        self.injected_at = injected.at
        self.report.target = injected.target
        print(f"drill: {injected.kind} injected on {injected.node}: {injected.target}", file=self.out, flush=True)

    def noticed(self, by: str) -> None:
        if self.report.noticed_s is None:
            self.report.noticed_s = self.since()
            self.report.noticed_by = by

    def watch_cluster(self) -> None:
        report = self.report
        if report.out_of_service_s is None:
            status = slurm.node_statuses(self.layout).get(report.node)
            if status is not None and not status.ready and status.state not in ("completing",):
                report.out_of_service_s = self.since()
                report.node_state, report.node_reason = status.state, status.reason
                self.noticed(f"Slurm: {status.state}")
        if report.requeued_s is None:
            record = slurm.job_record(self.layout, report.job_id) or {}
            if int(record.get("Restarts", "0") or 0) > (self.requeues_before or 0):
                report.requeued_s = self.since()
        if report.replaced_s is None and self.injected_at is not None:
            for event in replacer.read_events(self.layout):
                after = event["started_at"] >= self.injected_at
                if event["node"] == report.node and after and event["outcome"] == "replaced":
                    report.replaced_s = round(event["finished_at"] - self.injected_at, 2)


def run_drill(
    current: ClusterState,
    *,
    fault: str,
    node: str,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    fault_at_step: int = DEFAULT_FAULT_AT_STEP,
    timeout_s: float = DRILL_TIMEOUT_S,
    out: TextIO = sys.stdout,
    echo: bool = True,
) -> DrillReport:
    """Run the drill on CURRENT's cluster; return what it measured."""
    layout = current.layout
    layout.node(node)
    if fault not in faults.KINDS:
        raise LocalError(f"--fault: got {fault!r}, allowed: {', '.join(faults.KINDS)}")
    if fault_at_step <= checkpoint_every:
        raise LocalError(
            f"--fault-at-step: got {fault_at_step}, allowed: more than --checkpoint-every ({checkpoint_every}), so a "
            "checkpoint exists to resume from"
        )
    report = DrillReport(fault=fault, node=node, fault_at_step=fault_at_step, checkpoint_every=checkpoint_every)
    slurm.wait_ready(layout, SETTLE_TIMEOUT_S)
    nodes = usable_nodes(layout, None)
    return _Drill(current, report, out, echo).run(nodes, timeout_s)
