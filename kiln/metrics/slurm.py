"""The Slurm exporter: sinfo and squeue run at each scrape, their text turned into metric families."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kiln.catalog.names import GPU_GRES, NEURON_GRES

SEPARATOR = "|"
DEFAULT_TIMEOUT_S = 10.0
# The reason comes last: free text (a drain's reason) that may hold the separator.
SINFO_FIELDS = ("NodeList", "PartitionName", "StateLong", "CPUsState", "Gres", "GresUsed", "Reason")


def sinfo_command(fields: Sequence[str]) -> tuple[str, ...]:
    """Return the sinfo command line printing FIELDS with SEPARATOR between them, one line per node and partition."""
    # `Field:|` is width 0 (the whole value, never cut or padded) with "|" as the field's suffix; the last field
    # needs none. One line per node and partition (--Node); hidden partitions too (--all).
    formats = [f"{field}:{SEPARATOR}" for field in fields[:-1]] + [f"{fields[-1]}:"]
    return ("sinfo", "--noheader", "--Node", "--all", "--Format=" + ",".join(formats))


SINFO_COMMAND = sinfo_command(SINFO_FIELDS)
# One line per array task (--array), every user's jobs in every partition (--all), in the states squeue shows by
# default: partition, state, how often the job was requeued (RestartCnt), and its reason last: it may be free text
# (a job's state description).
SQUEUE_FIELDS = ("Partition", "State", "RestartCnt", "Reason")
SQUEUE_COMMAND = (
    "squeue",
    "--noheader",
    "--all",
    "--array",
    "--Format=" + ",".join([f"{field}:{SEPARATOR}" for field in SQUEUE_FIELDS[:-1]] + [f"{SQUEUE_FIELDS[-1]}:"]),
)
# Variables that would change what the commands print (a partition filter, a format, states); SLURM_CONF and the
# rest of the environment pass through, so the commands find their cluster as Slurm's own tools do.
IGNORED_ENV_PREFIXES = ("SINFO_", "SQUEUE_")
# Node state flags sinfo appends to a state: not responding, powered off, powering up, pending power down,
# powering down, maintenance reservation, pending reboot, reboot issued, planned by backfill.
STATE_FLAGS = "*~#!%$@^-"
# Partitions show these job states even when no job is in them, so a dashboard reads 0 rather than no data.
ALWAYS_SHOWN_JOB_STATES = ("pending", "running")
MAX_REASON_CHARS = 120
GRES_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_COUNT = re.compile(r"^(\d+)([KMGTP]?)$", re.IGNORECASE)
T = TypeVar("T")


class CommandError(Exception):
    """A Slurm command that failed, timed out, or printed what kiln cannot read."""


@dataclass(frozen=True)
class NodeRow:
    """One node as one partition sees it (one line of sinfo)."""

    node: str
    partition: str
    state: str
    cpus: int
    cpus_allocated: int
    gpus: int
    gpus_allocated: int
    neuron_devices: int
    neuron_devices_allocated: int
    # Why the node is out of service (a drain's or Slurm's reason), bounded; "" when it has none.
    reason: str = ""


@dataclass(frozen=True)
class JobRow:
    """One job (or array task) in squeue."""

    partition: str
    state: str
    reason: str
    # How often Slurm requeued the job (a node failed, or kiln-launch requeued it after a hang or a failed check).
    restarts: int = 0


def base_state(text: str) -> str:
    """Return a node's base state in lowercase, without sinfo's flag suffixes or `+flags`."""
    return _split_state(text)[0] or "unknown"


def state_flags(text: str) -> str:
    """Return the flag characters sinfo appended to a node's state ("~" powered off, "#" powering up, ...)."""
    return _split_state(text)[1]


def _split_state(text: str) -> tuple[str, str]:
    word = text.strip().lower().split("+", 1)[0]
    state = word.rstrip(STATE_FLAGS)
    return state, word[len(state) :]


def gres_count(text: str, name: str) -> int:
    """Return how many of generic resource NAME a sinfo `Gres`/`GresUsed` value lists (0 when none)."""
    total = 0
    for item in _gres_items(text):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0].strip() != name:
            continue
        # gpu:8, gpu:h100:8, gpu:h100:3(IDX:0-2): the count is last; a bare name or name:type means one.
        last = parts[-1].strip() if len(parts) > 1 else "1"
        match = _COUNT.match(last)
        total += int(match.group(1)) * GRES_UNITS[match.group(2).upper()] if match else 1
    return total


def _gres_items(text: str) -> list[str]:
    # Commas separate resources, but also index lists inside parentheses: gpu:h100:3(IDX:0,2-3).
    items, depth, current = [], 0, []
    for char in text.strip():
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item for item in items if item and item != "(null)"]


def parse_sinfo(text: str) -> list[NodeRow]:
    """Parse the output of SINFO_COMMAND; raise ValueError on a line it cannot read."""
    rows = []
    for number, fields in sinfo_lines(text, len(SINFO_FIELDS), free_text_last=True):
        node, partition, state, cpus_state, gres, gres_used, reason = fields
        allocated, total = _cpus(cpus_state, number)
        rows.append(
            NodeRow(
                node=node,
                partition=partition,
                state=base_state(state),
                cpus=total,
                cpus_allocated=allocated,
                gpus=gres_count(gres, GPU_GRES),
                gpus_allocated=gres_count(gres_used, GPU_GRES),
                neuron_devices=gres_count(gres, NEURON_GRES),
                neuron_devices_allocated=gres_count(gres_used, NEURON_GRES),
                reason=node_reason(reason),
            )
        )
    return rows


def node_reason(text: str) -> str:
    """Return a node's reason as a bounded label ("" for sinfo's "none"): one line of at most MAX_REASON_CHARS."""
    reason = " ".join(text.split())
    return "" if reason.lower() in ("", "none", "(null)") else reason[:MAX_REASON_CHARS].strip()


def sinfo_lines(text: str, count: int, *, free_text_last: bool = False) -> Iterator[tuple[int, list[str]]]:
    """Yield each non-blank line's number and its COUNT fields (with FREE_TEXT_LAST, the last one may hold the
    separator); raise ValueError on a line without them or a node."""
    for number, line in _lines(text):
        fields = [field.strip() for field in line.split(SEPARATOR, count - 1 if free_text_last else -1)]
        if len(fields) != count or not fields[0]:
            raise ValueError(f"sinfo line {number}: expected {count} fields, got {line!r}")
        yield number, fields


def _cpus(text: str, number: int) -> tuple[int, int]:
    # CPUsState is allocated/idle/other/total.
    parts = text.split("/")
    if len(parts) != 4 or not all(part.isdigit() for part in parts):
        raise ValueError(f"sinfo line {number}: CPUsState {text!r} is not A/I/O/T")
    return int(parts[0]), int(parts[3])


def parse_squeue(text: str) -> list[JobRow]:
    """Parse the output of SQUEUE_COMMAND; raise ValueError on a line it cannot read."""
    jobs = []
    for number, line in _lines(text):
        fields = [field.strip() for field in line.split(SEPARATOR, len(SQUEUE_FIELDS) - 1)]
        if len(fields) != len(SQUEUE_FIELDS) or not fields[1] or not fields[2].isdigit():
            raise ValueError(f"squeue line {number}: expected partition|state|restarts|reason, got {line!r}")
        partition, state, restarts, reason = fields
        jobs.append(
            JobRow(partition=partition, state=state.lower(), reason=pending_reason(reason), restarts=int(restarts))
        )
    return jobs


def pending_reason(text: str) -> str:
    """Return a job's reason as a bounded label: its name, without the node lists some reasons carry."""
    reason = text.strip().strip("()")
    # "ReqNodeNotAvail, UnavailableNodes:gpu-[1-4]" would make one label value per set of nodes.
    name = reason.split(",", 1)[0].strip()
    if not name or any(char.isspace() for char in name):
        # A sentence of Slurm's own ("Nodes required for job are DOWN, DRAINED or reserved for ..."): kept
        # whole, up to any colon that would introduce names.
        name = reason.split(":", 1)[0]
    return name[:MAX_REASON_CHARS].strip() or "None"


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def node_families(rows: Sequence[NodeRow]) -> list[Metric]:
    """Return the node families: per partition and state, and per node."""
    nodes: dict[str, NodeRow] = {}
    memberships: dict[tuple[str, str], str] = {}
    for row in rows:
        nodes.setdefault(row.node, row)
        memberships.setdefault((row.node, row.partition), row.state)
    per_partition = Counter((partition, state) for (_, partition), state in memberships.items())
    partitions = GaugeMetricFamily(
        "kiln_slurm_nodes",
        "Nodes per partition and base state (a node in two partitions counts in each).",
        labels=["partition", "state"],
    )
    for (partition, state), count in sorted(per_partition.items()):
        partitions.add_metric([partition, state], count)
    states = GaugeMetricFamily("kiln_slurm_node_state", "1 for each node's base state.", labels=["node", "state"])
    per_node = {
        "kiln_slurm_node_cpus": ("CPUs of the node.", "cpus"),
        "kiln_slurm_node_cpus_allocated": ("CPUs of the node allocated to jobs.", "cpus_allocated"),
        "kiln_slurm_node_gpus": ("GPUs of the node (GRES gpu).", "gpus"),
        "kiln_slurm_node_gpus_allocated": ("GPUs of the node in use (GRES gpu).", "gpus_allocated"),
        "kiln_slurm_node_neuron_devices": ("Neuron devices of the node (GRES neuron).", "neuron_devices"),
        "kiln_slurm_node_neuron_devices_allocated": (
            "Neuron devices of the node in use (GRES neuron).",
            "neuron_devices_allocated",
        ),
    }
    gauges = {name: GaugeMetricFamily(name, doc, labels=["node"]) for name, (doc, _) in per_node.items()}
    reasons = GaugeMetricFamily(
        "kiln_slurm_node_reason",
        "1 for each node with a reason (why it is drained or down: kiln's health check or hang watchdog, Slurm, a "
        "person).",
        labels=["node", "state", "reason"],
    )
    for name, row in sorted(nodes.items()):
        states.add_metric([name, row.state], 1)
        for family, (_, attribute) in per_node.items():
            gauges[family].add_metric([name], getattr(row, attribute))
        if row.reason:
            reasons.add_metric([name, row.state, row.reason], 1)
    return [partitions, states, *gauges.values(), reasons]


def job_families(jobs: Sequence[JobRow], partitions: Sequence[str] = ()) -> list[Metric]:
    """Return the job families; PARTITIONS show pending and running jobs even when there are none."""
    per_state = Counter((job.partition, job.state) for job in jobs)
    for partition in partitions:
        for job_state in ALWAYS_SHOWN_JOB_STATES:
            per_state.setdefault((partition, job_state), 0)
    counts = GaugeMetricFamily(
        "kiln_slurm_jobs",
        "Jobs per partition and state (a job pending in several partitions counts once, under their list).",
        labels=["partition", "state"],
    )
    for (partition, job_state), count in sorted(per_state.items()):
        counts.add_metric([partition, job_state], count)
    reasons = GaugeMetricFamily("kiln_slurm_jobs_pending_reason", "Pending jobs per reason.", labels=["reason"])
    for reason, count in sorted(Counter(job.reason for job in jobs if job.state == "pending").items()):
        reasons.add_metric([reason], count)
    per_partition: Counter[str] = Counter({partition: 0 for partition in partitions})
    for job in jobs:
        per_partition[job.partition] += job.restarts
    restarts = GaugeMetricFamily(
        "kiln_slurm_jobs_restarts",
        "Requeues of the jobs in the queue, summed per partition (a job's RestartCnt).",
        labels=["partition"],
    )
    for partition, count in sorted(per_partition.items()):
        restarts.add_metric([partition], count)
    return [counts, reasons, restarts]


def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """Run one Slurm client and return what it printed; raise CommandError with one line on failure."""
    command = shlex.join(argv)
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=_slurm_env(),
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise CommandError(f"{command} failed: {argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"{command} failed: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise CommandError(f"{command} failed: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise CommandError(f"{command} failed: exit {done.returncode}: {_one_line(done.stderr) or 'no message'}")
    return done.stdout


def _one_line(text: str, limit: int = 400) -> str:
    line = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _slurm_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(IGNORED_ENV_PREFIXES)}


def scrape(timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[NodeRow], list[JobRow]]:
    """Run sinfo and squeue side by side and parse them; raise CommandError naming the first that failed."""
    # Side by side: a controller that does not answer costs each client its connect retries (about 9 s).
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="kiln-slurm") as pool:
        sinfo = pool.submit(run_command, SINFO_COMMAND, timeout_s)
        squeue = pool.submit(run_command, SQUEUE_COMMAND, timeout_s)
        sinfo_text, squeue_text = sinfo.result(), squeue.result()
    return parse_output(SINFO_COMMAND, sinfo_text, parse_sinfo), parse_output(SQUEUE_COMMAND, squeue_text, parse_squeue)


def parse_output(argv: Sequence[str], text: str, parse: Callable[[str], T]) -> T:
    """Return PARSE(TEXT), what ARGV printed; raise CommandError with one line when PARSE cannot read it."""
    try:
        return parse(text)
    except ValueError as exc:
        raise CommandError(f"{shlex.join(argv)} printed what kiln cannot read: {exc}") from None


class SlurmCollector(Collector):
    """Collect the kiln_slurm_* families by running Slurm's clients at each scrape."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def collect(self) -> Iterator[Metric]:
        """Yield kiln_slurm_up, the node and job families when it is 1, and the scrape's duration."""
        started = time.monotonic()
        try:
            nodes, jobs = scrape(self.timeout_s)
        except CommandError as exc:
            print(f"kiln-metrics slurm: {exc}", file=sys.stderr, flush=True)
            up, families = 0, []
        else:
            partitions = sorted({row.partition for row in nodes})
            up, families = 1, [*node_families(nodes), *job_families(jobs, partitions)]
        yield GaugeMetricFamily("kiln_slurm_up", "1 when sinfo and squeue both answered, else 0.", value=up)
        yield from families
        yield GaugeMetricFamily(
            "kiln_slurm_scrape_duration_seconds",
            "Seconds this scrape spent running and reading sinfo and squeue.",
            value=time.monotonic() - started,
        )
