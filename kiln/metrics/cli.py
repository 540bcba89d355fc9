"""The ``kiln-metrics`` command: serve the Slurm or the EFA exporter for Prometheus.

    kiln-metrics slurm --listen ADDRESS:PORT
    kiln-metrics efa --listen ADDRESS:PORT [--sysfs /sys]

Exit codes: 0 after SIGTERM or SIGINT, 1 when it cannot listen, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from prometheus_client.registry import CollectorRegistry

from kiln.metrics.efa import EfaCollector, find_efa_devices, infiniband_dir
from kiln.metrics.serve import Listen, log, parse_listen, serve
from kiln.metrics.slurm import SINFO_COMMAND, SQUEUE_COMMAND, SlurmCollector


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every kiln error: the usage is one --help away.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _listen(text: str) -> Listen:
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for `kiln-metrics`."""
    parser = _Parser(prog="kiln-metrics", description="Serve kiln's Prometheus exporters on a node.")
    kinds = parser.add_subparsers(dest="kind", metavar="{slurm,efa}", required=True)
    listen_help = "IPv4 address and port to serve /metrics on; an empty address is every interface, port 0 any"
    slurm = kinds.add_parser(
        "slurm",
        help="Slurm's nodes and jobs (runs sinfo and squeue at each scrape)",
        description=f"Runs `{' '.join(SINFO_COMMAND)}` and `{' '.join(SQUEUE_COMMAND)}` at each scrape, "
        "found on PATH, with Slurm's own configuration lookup ($SLURM_CONF).",
    )
    slurm.add_argument("--listen", required=True, type=_listen, metavar="ADDRESS:PORT", help=listen_help)
    efa = kinds.add_parser("efa", help="EFA devices' port states and hardware counters (from sysfs)")
    efa.add_argument("--listen", required=True, type=_listen, metavar="ADDRESS:PORT", help=listen_help)
    efa.add_argument("--sysfs", type=_directory, default=Path("/sys"), help="where sysfs is mounted (default /sys)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kiln-metrics` and return its exit code."""
    args = build_parser().parse_args(argv)
    registry = CollectorRegistry(auto_describe=False)
    if args.kind == "slurm":
        registry.register(SlurmCollector())
        return serve(registry, args.listen, "slurm")
    registry.register(EfaCollector(args.sysfs))

    def note_missing_devices() -> None:
        if not find_efa_devices(args.sysfs):
            log("efa", f"no EFA device under {infiniband_dir(args.sysfs)}; serving kiln_efa_devices 0")

    return serve(registry, args.listen, "efa", on_start=note_missing_devices)
