"""Wait until a CI environment's cluster can take work, reporting each change of state on the way.

Slurm (PCS, ParallelCluster, HyperPod): the scheduler answers (``sinfo`` exits 0 on the head node), every
expected partition has its static nodes up, and ``kiln-launch check`` passes on one node of the first partition.
Kubernetes: every EKS node group is ACTIVE without health issues (HyperPod on EKS: every node Running).
"""

from __future__ import annotations

import io
import json
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kiln.aws.errors import aws_call
from kiln.aws.remote.cluster import ClusterHandle, RemoteError, Unreachable
from kiln.aws.remote.nodes import Target, find_head
from kiln.aws.remote.transport import run_command
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.contracts.backends import HYPERPOD_EKS

if TYPE_CHECKING:
    from kiln.aws.session import Session

# install_launcher.sh links the launcher venv's entry point here on every Slurm node.
KILN_LAUNCH = "/usr/local/bin/kiln-launch"
SINFO = "sinfo -h -N -o '%N %P %T'"
# How long one sinfo may take before kiln counts the scheduler as not answering.
SINFO_TIMEOUT_S = 120.0
# Slurm's long state names (sinfo %T) without their flag suffixes.
UP_STATES = {"idle", "allocated", "mixed", "completing", "reserved", "planned"}
DOWN_STATES = {"down", "drained", "draining", "drain", "fail", "failing", "inval", "unknown"}
# Suffixes sinfo appends to a state. `*` not responding; `~` powered off (a cloud node Slurm knows, not up);
# `#` powering up; `%` powering down; `!` power-down pending; the rest are reservations and reboots.
STATE_FLAGS = "*~#%!$@^-+"
NOT_UP_FLAGS = set("*~#%!")


class NotReady(RemoteError):
    """The cluster did not become ready; str() is one line naming what never did."""


@dataclass(frozen=True, kw_only=True)
class ReadyReport:
    """A ready cluster: how long it took, its nodes, and what is wrong but did not stop it."""

    elapsed_s: float
    # Partition (Slurm) or node group (Kubernetes) -> nodes up (Slurm, HyperPod) or desired size (EKS).
    nodes: Mapping[str, int] = field(hash=False)
    warnings: tuple[str, ...] = ()
    check: str | None = None

    def summary(self) -> str:
        """Return one line: ready after how long, the nodes, the check, and any warnings."""
        nodes = ", ".join(f"{name} {count}" for name, count in self.nodes.items()) or "no nodes"
        parts = [f"ready after {self.elapsed_s:.0f} s", f"nodes: {nodes}"]
        if self.check:
            parts.append(self.check)
        parts.extend(f"warning: {w}" for w in self.warnings)
        return "; ".join(parts)


@dataclass(frozen=True)
class SlurmNode:
    """One row of ``sinfo -N``: a node in one partition."""

    name: str
    partition: str
    state: str

    @property
    def health(self) -> str:
        """Return up, down (named in reports) or pending (still starting, or powered off until a job needs it)."""
        base = self.state.rstrip(STATE_FLAGS).lower()
        flags = set(self.state[len(base) :])
        if base in DOWN_STATES or "*" in flags:
            return "down"
        if base in UP_STATES and not flags & NOT_UP_FLAGS:
            return "up"
        return "pending"


def wait_until_ready(
    session: Session,
    cluster: ClusterHandle,
    *,
    expected_nodes: Mapping[str, int],
    timeout_s: float,
    progress: Callable[[str], None],
    poll_s: float = 15.0,
    command_poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReadyReport:
    """Poll CLUSTER until it is ready and return the report; NotReady naming what was not when TIMEOUT_S passes.

    EXPECTED_NODES maps each partition (Kubernetes: node group) to its static node count, the spec group's
    min_count; a group with 0 only has to be known. PROGRESS gets one line per change of state.
    """
    tracker = _Tracker(cluster.environment, timeout_s, progress, clock)
    if cluster.platform is HYPERPOD_EKS:
        return _wait_hyperpod_nodes(session, cluster, expected_nodes, tracker, poll_s, sleep)
    if cluster.uses_kubernetes:
        return _wait_node_groups(session, cluster, expected_nodes, tracker, poll_s, sleep)
    return _wait_slurm(session, cluster, expected_nodes, tracker, poll_s, command_poll_s, clock, sleep)


def parse_sinfo(text: str) -> list[SlurmNode]:
    """Return the nodes in the output of SINFO; the default partition's trailing * is dropped."""
    nodes = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3:
            nodes.append(SlurmNode(words[0], words[1].rstrip("*"), words[2]))
    return nodes


def judge_partitions(
    nodes: Iterable[SlurmNode], expected: Mapping[str, int]
) -> tuple[dict[str, int], list[str], list[str]]:
    """Return nodes up per expected partition, what is still missing, and down nodes that did not stop readiness."""
    nodes = list(nodes)
    counts: dict[str, int] = {}
    missing: list[str] = []
    warnings: list[str] = []
    for partition, want in expected.items():
        rows = [n for n in nodes if n.partition == partition]
        up = sum(1 for n in rows if n.health == "up")
        down = ", ".join(f"{n.name} is {n.state}" for n in rows if n.health == "down")
        counts[partition] = up
        if not rows:
            missing.append(f"partition {partition} is not known to Slurm yet")
        elif up < want:
            missing.append(f"partition {partition} has {up}/{want} nodes up" + (f" ({down})" if down else ""))
        elif down:
            warnings.append(f"partition {partition}: {down}")
    return counts, missing, warnings


def check_verdict(text: str, exit_code: int) -> tuple[bool | None, str]:
    """Return (passed, reason) from the output of ``kiln-launch check --json``; passed is None without a report."""
    report = _json_object(text)
    if report is None:
        return None, f"exited {exit_code} without a report ({_last_line(text)})"
    failed = [c for c in report.get("checks", []) if c.get("status") == "failed"]
    if report.get("ready") is True and exit_code == 0 and not failed:
        return True, "passed"
    reasons = "; ".join(f"{c.get('name', '?')}: {c.get('detail', '')}" for c in failed)
    return False, reasons or f"exited {exit_code}"


class _Tracker:
    """Elapsed time, the deadline, and the last state, reported once per change."""

    def __init__(self, environment: str, timeout_s: float, progress: Callable[[str], None], clock: Callable[[], float]):
        self.environment, self.timeout_s, self.progress, self.clock = environment, timeout_s, progress, clock
        self.started = clock()
        self.state: str | None = None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return max(0.0, self.timeout_s - self.elapsed())

    def note(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.progress(f"{self.elapsed():.0f}s: {state}")

    def wait_or_give_up(self, poll_s: float, sleep: Callable[[float], None]) -> None:
        if self.remaining() <= 0:
            raise self.failed(self.state or "nothing reported")
        sleep(min(poll_s, self.remaining()))

    def failed(self, why: str) -> NotReady:
        return NotReady(f"{self.environment} is not ready after {self.elapsed():.0f} s: {why}")


# Slurm.


@dataclass
class _Head:
    """The head node, found once and forgotten when Systems Manager cannot reach it."""

    target: Target | None = None


def _wait_slurm(
    session: Session,
    cluster: ClusterHandle,
    expected: Mapping[str, int],
    tracker: _Tracker,
    poll_s: float,
    command_poll_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> ReadyReport:
    head = _Head()
    first = next(iter(expected), None)

    def run(command: str, timeout_s: float) -> tuple[int, str, str]:
        """Run COMMAND on the head node; return its exit code, its output and its errors."""
        if head.target is None:
            head.target = find_head(session, cluster)
        out, err = io.StringIO(), io.StringIO()
        try:
            code = run_command(
                session,
                head.target,
                command,
                timeout_s=max(1.0, timeout_s),
                out=out,
                err=err,
                poll_s=command_poll_s,
                clock=clock,
                sleep=sleep,
            )
        except Unreachable:
            head.target = None
            raise
        return code, out.getvalue(), err.getvalue()

    while True:
        try:
            code, output, errors = run(SINFO, min(SINFO_TIMEOUT_S, tracker.remaining()))
        except Unreachable as error:
            state = f"waiting for the head node: {error}"
        else:
            if code != 0:
                state = f"the scheduler is not answering (sinfo exited {code}: {_last_line(errors + output)})"
            else:
                counts, missing, warnings = judge_partitions(parse_sinfo(output), expected)
                state = "; ".join(missing)
                if not missing:
                    nodes = ", ".join(f"{p} {n}/{expected[p]}" for p, n in counts.items())
                    tracker.note(f"scheduler answering, nodes up: {nodes or 'none expected'}")
                    if first is None:
                        return ReadyReport(elapsed_s=tracker.elapsed(), nodes=counts, warnings=tuple(warnings))
                    tracker.note(f"running kiln-launch check on a node of partition {first}")
                    check = f"srun -N1 -p {shlex.quote(first)} --exclusive {KILN_LAUNCH} check --json"
                    try:
                        code, output, errors = run(check, tracker.remaining())
                    except Unreachable as error:
                        passed, reason = None, str(error)
                    else:
                        passed, reason = check_verdict(output + errors, code)
                    if passed:
                        verdict = f"kiln-launch check passed on partition {first}"
                        tracker.note("ready")
                        return ReadyReport(
                            elapsed_s=tracker.elapsed(), nodes=counts, warnings=tuple(warnings), check=verdict
                        )
                    if passed is False:
                        # A verdict on the hardware does not change by waiting for it.
                        raise tracker.failed(f"kiln-launch check failed on partition {first}: {reason}")
                    state = f"kiln-launch check on partition {first} {reason}"
        tracker.note(state)
        tracker.wait_or_give_up(poll_s, sleep)


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no output")


def _json_object(text: str) -> dict[str, Any] | None:
    """Return the first JSON object that starts a line of TEXT, or None."""
    decoder = json.JSONDecoder()
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("{"):
            try:
                found, _ = decoder.raw_decode(text, offset)
            except json.JSONDecodeError:
                found = None
            if isinstance(found, dict):
                return found
        offset += len(line)
    return None


# Kubernetes.


def _wait_node_groups(
    session: Session,
    cluster: ClusterHandle,
    expected: Mapping[str, int],
    tracker: _Tracker,
    poll_s: float,
    sleep: Callable[[float], None],
) -> ReadyReport:
    name = cluster.eks_cluster_name
    eks = session.client("eks", region_name=cluster.region)
    while True:
        with aws_call(f"eks:ListNodegroups {name}", RemoteError):
            pages = eks.get_paginator("list_nodegroups").paginate(clusterName=name)
            group_names = [g for page in pages for g in page["nodegroups"]]
        counts: dict[str, int] = {}
        missing: list[str] = []
        for group_name in group_names:
            with aws_call(f"eks:DescribeNodegroup {group_name}", RemoteError):
                group = eks.describe_nodegroup(clusterName=name, nodegroupName=group_name)["nodegroup"]
            label = (group.get("labels") or {}).get(NODE_GROUP_LABEL) or group_name
            status = group.get("status", "UNKNOWN")
            issues = "; ".join(
                f"{i.get('code', '?')}: {i.get('message', '')}" for i in (group.get("health") or {}).get("issues", [])
            )
            if status == "CREATE_FAILED":
                raise tracker.failed(f"node group {label} failed to create ({issues or 'no reason given'})")
            if status != "ACTIVE" or issues:
                missing.append(f"node group {label} is {status}" + (f" ({issues})" if issues else ""))
            counts[label] = int((group.get("scalingConfig") or {}).get("desiredSize", 0))
        if not group_names:
            missing.append(f"EKS cluster {name} has no node groups yet")
        for group_label, want in expected.items():
            if group_label not in counts:
                missing.append(f"node group {group_label} does not exist yet")
            elif counts[group_label] < want:
                missing.append(f"node group {group_label} wants {counts[group_label]}/{want} nodes")
        if not missing:
            tracker.note("ready")
            return ReadyReport(elapsed_s=tracker.elapsed(), nodes=counts)
        tracker.note("; ".join(missing))
        tracker.wait_or_give_up(poll_s, sleep)


def _wait_hyperpod_nodes(
    session: Session,
    cluster: ClusterHandle,
    expected: Mapping[str, int],
    tracker: _Tracker,
    poll_s: float,
    sleep: Callable[[float], None],
) -> ReadyReport:
    arn = cluster.hyperpod_cluster_arn
    sagemaker = session.client("sagemaker", region_name=cluster.region)
    while True:
        with aws_call("sagemaker:ListClusterNodes", RemoteError):
            pages = sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=arn)
            nodes = [n for page in pages for n in page["ClusterNodeSummaries"]]
        counts: dict[str, int] = {}
        missing: list[str] = []
        for node in nodes:
            group = node.get("InstanceGroupName", "?")
            status = (node.get("InstanceStatus") or {}).get("Status", "Unknown")
            counts[group] = counts.get(group, 0) + (status == "Running")
            if status != "Running":
                missing.append(f"HyperPod node {node.get('InstanceId', '?')} in {group} is {status}")
        for group, want in expected.items():
            if counts.get(group, 0) < want:
                missing.append(f"instance group {group} has {counts.get(group, 0)}/{want} nodes running")
        if not missing:
            tracker.note("ready")
            return ReadyReport(elapsed_s=tracker.elapsed(), nodes=counts)
        tracker.note("; ".join(missing))
        tracker.wait_or_give_up(poll_s, sleep)
