"""The Prometheus agent's scrape targets: Slurm's nodes from sinfo, written as file_sd files, one per exporter's job.

Prometheus's file-based discovery watches ``DIR/JOB.json``; kiln-metrics rewrites a file (atomically) only when
its nodes changed, and keeps the previous files whenever sinfo fails, so a controller restart loses no target.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog.exporters import EXPORTERS, Exporter
from kiln.catalog.names import GPU_GRES
from kiln.metrics.serve import StopSignals, log
from kiln.metrics.slurm import (
    DEFAULT_TIMEOUT_S,
    CommandError,
    gres_count,
    parse_output,
    run_command,
    sinfo_command,
    sinfo_lines,
    state_flags,
)

TARGETS_FIELDS = ("NodeList", "NodeAddr", "StateLong", "Gres")
TARGETS_COMMAND = sinfo_command(TARGETS_FIELDS)
# A powered-off node (a cloud node not launched, or suspended) and one powering up (launching, not booted yet)
# have no machine to scrape; down, drained and not-responding nodes do, and their failing scrapes are the news.
NO_MACHINE_FLAGS = "~#"
# Which of Slurm's nodes run each per-node exporter. The agent scrapes its own node's exporters that run on
# every node at localhost; kiln runs the EFA exporter on every node (kiln_efa_devices 0 without EFA).
EVERY_NODE_EXPORTERS = ("node", "efa")
GPU_NODE_EXPORTERS = ("dcgm",)
PER_NODE_EXPORTERS = EVERY_NODE_EXPORTERS + GPU_NODE_EXPORTERS
DEFAULT_INTERVAL_S = 30.0
KIND = "targets"


@dataclass(frozen=True)
class Node:
    """A Slurm node with a machine behind it: its name, the address Slurm reaches it at, and whether it has GPUs."""

    name: str
    address: str
    gpus: bool


def parse_exporters(text: str) -> tuple[Exporter, ...]:
    """Parse a comma-separated list of exporter names into kiln's exporters; raise ValueError naming the known ones."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError(f"expected exporter names separated by commas (got {text!r})")
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise ValueError(f"unknown exporter {unknown[0]!r} (known: {', '.join(sorted(EXPORTERS))})")
    return tuple(EXPORTERS[name] for name in dict.fromkeys(names))


def per_node(exporters: Iterable[Exporter]) -> tuple[Exporter, ...]:
    """Return EXPORTERS if each runs on Slurm's nodes; raise ValueError naming one that does not."""
    exporters = tuple(exporters)
    for exporter in exporters:
        if exporter.name not in PER_NODE_EXPORTERS:
            raise ValueError(
                f"{exporter.name!r} is not a per-node exporter: it runs on the agent's own node, which "
                f"scrapes it at localhost (per-node exporters: {', '.join(PER_NODE_EXPORTERS)})"
            )
    return exporters


def parse_nodes(text: str) -> list[Node]:
    """Parse the output of TARGETS_COMMAND into nodes with a machine, each once; raise ValueError on a bad line."""
    nodes: dict[str, Node] = {}
    for _, (name, address, state, gres) in sinfo_lines(text, len(TARGETS_FIELDS)):
        if not address or set(state_flags(state)) & set(NO_MACHINE_FLAGS):
            continue
        # A node in two partitions is one line per partition, the same node.
        nodes.setdefault(name, Node(name=name, address=address, gpus=gres_count(gres, GPU_GRES) > 0))
    return sorted(nodes.values(), key=lambda node: node.name)


def file_sd_groups(nodes: Iterable[Node], exporter: Exporter, self_name: str | None = None) -> list[dict]:
    """Return EXPORTER's file_sd target groups: one per node that runs it, but the agent's own where it scrapes it."""
    groups = []
    for node in sorted(nodes, key=lambda node: node.name):
        if exporter.name in GPU_NODE_EXPORTERS and not node.gpus:
            continue
        if exporter.name in EVERY_NODE_EXPORTERS and self_name in (node.name, node.address):
            continue
        groups.append({"targets": [_host_port(node.address, exporter.port)], "labels": _labels(node.name)})
    return groups


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _labels(node: str) -> dict[str, str]:
    # instance names the node rather than its address, as on every dashboard; node joins the Slurm exporter's.
    return {"instance": node, "node": node}


def targets_file(directory: Path, exporter: Exporter) -> Path:
    """Return the file_sd file of EXPORTER's scrape job in DIRECTORY."""
    return directory / f"{exporter.job}.json"


def write_if_changed(path: Path, text: str) -> bool:
    """Write TEXT to PATH atomically (parents created) unless PATH holds it already; return whether it wrote."""
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # A readers' watch (Prometheus's inotify) sees the whole new file or the old one, never a partial write.
    descriptor, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        # Readable by a Prometheus running as another user (the local cluster's); nothing here is secret.
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return True


def render(value: object) -> str:
    """Return VALUE as the JSON kiln writes for Prometheus: indented, ASCII, one trailing newline."""
    return json.dumps(value, indent=2) + "\n"


def refresh(
    directory: Path, exporters: Sequence[Exporter], self_name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[Path, int]:
    """Run sinfo once and write each exporter's targets file that changed; return those files and their targets.

    Raises CommandError when sinfo fails or prints what kiln cannot read (no file is touched then), OSError when
    a file cannot be written.
    """
    nodes = parse_output(TARGETS_COMMAND, run_command(TARGETS_COMMAND, timeout_s), parse_nodes)
    written = {}
    for exporter in exporters:
        groups = file_sd_groups(nodes, exporter, self_name)
        path = targets_file(directory, exporter)
        if write_if_changed(path, render(groups)):
            written[path] = len(groups)
    return written


def run(
    directory: Path,
    exporters: Sequence[Exporter],
    self_name: str | None = None,
    interval_s: float = DEFAULT_INTERVAL_S,
    once: bool = False,
) -> int:
    """Refresh the targets once (exit code 1 on failure) or every INTERVAL_S until SIGTERM or SIGINT (exit code 0)."""
    if once:
        try:
            _note_written(refresh(directory, exporters, self_name))
        except (CommandError, OSError) as exc:
            log(KIND, f"error: {_failure(exc, directory)}")
            return 1
        return 0
    with StopSignals() as stop:
        files = ", ".join(targets_file(directory, exporter).name for exporter in exporters)
        log(KIND, f"writing {files} in {directory} from sinfo every {interval_s:g} s")
        while True:
            try:
                _note_written(refresh(directory, exporters, self_name))
            except (CommandError, OSError) as exc:
                log(KIND, f"{_failure(exc, directory)}; the previous targets stay")
            signum = stop.wait(interval_s)
            if signum is not None:
                log(KIND, f"stopping on {signal.Signals(signum).name}")
                return 0


def _note_written(written: dict[Path, int]) -> None:
    for path, count in written.items():
        log(KIND, f"wrote {path}: {count} target{'' if count == 1 else 's'}")


def _failure(exc: CommandError | OSError, directory: Path) -> str:
    if isinstance(exc, CommandError):
        return str(exc)
    return f"cannot write the targets in {directory}: {exc.strerror or exc}"
