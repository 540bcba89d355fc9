"""The ``kiln-metrics`` command: serve the Slurm or the EFA exporter, or feed the Prometheus agent beside them.

    kiln-metrics slurm --listen ADDRESS:PORT
    kiln-metrics efa --listen ADDRESS:PORT [--sysfs /sys]
    kiln-metrics targets --dir DIR --exporters node,dcgm,efa [--self NAME] [--interval SECONDS] [--once]
    kiln-metrics agent-config --cluster NAME --targets-dir DIR --exporters node,slurm,dcgm,efa --self NAME
        --out FILE [--remote-write-url URL] [--region REGION]

Exit codes: 0 after SIGTERM or SIGINT (targets --once and agent-config: 0 once written), 1 when it cannot listen,
run sinfo or write a file, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from prometheus_client.registry import CollectorRegistry

from kiln.catalog.exporters import Exporter
from kiln.metrics.agent import (
    agent_config,
    check_label_value,
    check_region,
    check_remote_write_url,
    write_agent_config,
)
from kiln.metrics.efa import EfaCollector, find_efa_devices, infiniband_dir
from kiln.metrics.serve import log, parse_listen, serve
from kiln.metrics.slurm import SINFO_COMMAND, SQUEUE_COMMAND, SlurmCollector
from kiln.metrics.targets import DEFAULT_INTERVAL_S, TARGETS_COMMAND, parse_exporters, per_node, run

T = TypeVar("T")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every kiln error: the usage is one --help away.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _argument(check: Callable[[str], T]) -> Callable[[str], T]:
    # A ValueError's message as argparse's one-line error for the argument.
    def parse(text: str) -> T:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path


def _per_node_exporters(text: str) -> tuple[Exporter, ...]:
    return per_node(parse_exporters(text))


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds (got {text!r})")
    return seconds


def _optional(check: Callable[[str], str]) -> Callable[[str], str | None]:
    # The bootstrap passes its variables set or not: an empty value is no value.
    return lambda text: check(text) if text else None


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for `kiln-metrics`."""
    parser = _Parser(
        prog="kiln-metrics",
        description="Serve kiln's Prometheus exporters on a node, and configure the Prometheus agent beside them.",
    )
    kinds = parser.add_subparsers(dest="kind", metavar="{slurm,efa,targets,agent-config}", required=True)
    listen_help = "IPv4 address and port to serve /metrics on; an empty address is every interface, port 0 any"
    slurm = kinds.add_parser(
        "slurm",
        help="Slurm's nodes and jobs (runs sinfo and squeue at each scrape)",
        description=f"Runs `{' '.join(SINFO_COMMAND)}` and `{' '.join(SQUEUE_COMMAND)}` at each scrape, "
        "found on PATH, with Slurm's own configuration lookup ($SLURM_CONF).",
    )
    slurm.add_argument(
        "--listen", required=True, type=_argument(parse_listen), metavar="ADDRESS:PORT", help=listen_help
    )
    efa = kinds.add_parser("efa", help="EFA devices' port states and hardware counters (from sysfs)")
    efa.add_argument("--listen", required=True, type=_argument(parse_listen), metavar="ADDRESS:PORT", help=listen_help)
    efa.add_argument("--sysfs", type=_directory, default=Path("/sys"), help="where sysfs is mounted (default /sys)")
    node_name = _argument(lambda text: check_label_value("node name", text))
    targets = kinds.add_parser(
        "targets",
        help="the Prometheus agent's scrape targets: Slurm's nodes as file_sd files (runs sinfo)",
        description=f"Runs `{' '.join(TARGETS_COMMAND)}` and writes DIR/JOB.json for each exporter's scrape job "
        "when its nodes changed. Powered-off and powering-up nodes are left out; down and drained nodes stay.",
    )
    targets.add_argument("--dir", required=True, type=Path, help="where to write the file_sd files (created)")
    targets.add_argument(
        "--exporters",
        required=True,
        type=_argument(_per_node_exporters),
        metavar="NAME,...",
        help="per-node exporters: node and efa on every node, dcgm on GPU nodes",
    )
    targets.add_argument(
        "--self",
        dest="self_name",
        type=node_name,
        metavar="NAME",
        help="the agent's own node (name or address), which it scrapes at localhost: left out of node and efa",
    )
    targets.add_argument(
        "--interval",
        type=_seconds,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"how often to run sinfo (default {DEFAULT_INTERVAL_S:g})",
    )
    targets.add_argument("--once", action="store_true", help="write once and exit (1 when sinfo fails)")
    agent = kinds.add_parser(
        "agent-config",
        help="the Prometheus agent's configuration (JSON, which Prometheus reads as YAML)",
        description="Writes FILE when its content changed and then prints `wrote FILE`.",
    )
    agent.add_argument(
        "--cluster",
        required=True,
        type=_argument(lambda text: check_label_value("cluster name", text)),
        metavar="NAME",
        help="the cluster label every sample carries",
    )
    agent.add_argument("--targets-dir", required=True, type=Path, metavar="DIR", help="kiln-metrics targets --dir")
    agent.add_argument(
        "--exporters",
        required=True,
        type=_argument(parse_exporters),
        metavar="NAME,...",
        help="the exporters to scrape: slurm, and node, dcgm and efa from the targets files",
    )
    agent.add_argument("--self", dest="self_name", required=True, type=node_name, metavar="NAME", help="this node")
    agent.add_argument(
        "--self-address",
        default="localhost",
        type=_argument(lambda text: check_label_value("address", text)),
        metavar="ADDRESS",
        help="where this node's own exporters listen (default localhost)",
    )
    agent.add_argument(
        "--self-exporters",
        type=_argument(lambda text: tuple(exporter.name for exporter in parse_exporters(text)) if text else ()),
        metavar="NAME,...",
        help="the exporters this node runs itself (default: slurm and the every-node ones asked; empty for none)",
    )
    agent.add_argument("--out", required=True, type=Path, metavar="FILE", help="the configuration file to write")
    agent.add_argument(
        "--remote-write-url",
        type=_argument(_optional(check_remote_write_url)),
        metavar="URL",
        help="where to remote-write (https://; empty for none)",
    )
    agent.add_argument(
        "--region",
        type=_argument(_optional(check_region)),
        help="sign the remote writes with sigv4 in this region (Amazon Managed Prometheus; empty for none)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kiln-metrics` and return its exit code."""
    args = build_parser().parse_args(argv)
    if args.kind == "targets":
        return run(args.dir, args.exporters, args.self_name, args.interval, args.once)
    if args.kind == "agent-config":
        return _write_agent_config(args)
    registry = CollectorRegistry(auto_describe=False)
    if args.kind == "slurm":
        registry.register(SlurmCollector())
        return serve(registry, args.listen, "slurm")
    registry.register(EfaCollector(args.sysfs))

    def note_missing_devices() -> None:
        if not find_efa_devices(args.sysfs):
            log("efa", f"no EFA device under {infiniband_dir(args.sysfs)}; serving kiln_efa_devices 0")

    return serve(registry, args.listen, "efa", on_start=note_missing_devices)


def _write_agent_config(args: argparse.Namespace) -> int:
    config = agent_config(
        cluster=args.cluster,
        targets_dir=args.targets_dir,
        exporters=args.exporters,
        self_name=args.self_name,
        remote_write_url=args.remote_write_url,
        region=args.region,
        self_address=args.self_address,
        self_exporters=args.self_exporters,
    )
    try:
        written = write_agent_config(args.out, config)
    except OSError as exc:
        log("agent-config", f"error: cannot write {args.out}: {exc.strerror or exc}")
        return 1
    if written:
        print(f"wrote {args.out}")
    return 0
