"""`kiln local ...`: a real multi-node Slurm cluster on this machine, built by the `local` bootstrap."""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

from kiln.cli.errors import Handler, one_line_failures
from kiln.contracts.errors import EXIT_FAILURE
from kiln.local.layout import DEFAULT_SUBNET, DEFAULT_TAG, PREFIX_ENV, default_prefix


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1024..65535 (got {text!r})")
    return value


def _reported(command: str, handler: Handler) -> Handler:
    """Wrap HANDLER so every expected failure is one line on stderr with its exit code, never a traceback.

    The lines read `kiln local COMMAND: error: ...`; a file or process this machine refused (OSError) is a failure.
    """
    run = one_line_failures(f"kiln local {command}", handler, error_word=True, os_error_exit=EXIT_FAILURE)
    return functools.wraps(handler)(run)


def _up(args: argparse.Namespace) -> int:
    from kiln.local.cluster import UpOptions, up

    options = UpOptions(
        prefix=args.prefix,
        nodes=args.nodes,
        spec=args.spec,
        tag=args.tag,
        subnet=args.subnet,
        slurmctld_port=args.slurmctld_port,
        slurmd_port=args.slurmd_port,
        timeout_s=args.timeout,
    )
    return up(options)


def _status(args: argparse.Namespace) -> int:
    from kiln.local.cluster import status

    return status(args.prefix)


def _layout(prefix: str):
    from kiln.local.cluster import load_cluster
    from kiln.local.preflight import check_platform

    check_platform()
    return load_cluster(Path(os.path.abspath(prefix))).layout


def _run(args: argparse.Namespace) -> int:
    from kiln.local.jobs import run_command

    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    return run_command(_layout(args.prefix), args.nodes, command)


def _smoke(args: argparse.Namespace) -> int:
    from kiln.local.jobs import run_smoke

    return run_smoke(_layout(args.prefix), args.nodes, args.steps, timeout_s=args.timeout)


def _down(args: argparse.Namespace) -> int:
    from kiln.local.cluster import down

    return down(args.prefix)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `local` command group to SUBPARSERS."""
    from kiln.local.cluster import DEFAULT_NODES, DEFAULT_SLURMCTLD_PORT, DEFAULT_SLURMD_PORT, READY_TIMEOUT_S
    from kiln.local.jobs import DEFAULT_SMOKE_STEPS, SMOKE_TIMEOUT_S

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--prefix",
        default=default_prefix(),
        help=f"where the cluster's state lives (default: ${PREFIX_ENV}, else %(default)s)",
    )
    local = subparsers.add_parser(
        "local",
        help="a real Slurm cluster on this machine (nodes are network namespaces)",
        description=__doc__,
    )
    commands = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")

    up = commands.add_parser(
        "up",
        parents=[common],
        help="bring the cluster up (or heal it): bootstrap, network, munged, slurmctld, one slurmd per node",
    )
    up.add_argument("--nodes", type=_positive, help=f"node count (default: {DEFAULT_NODES})")
    up.add_argument("--spec", help="cluster spec whose name and NCCL settings the bootstrap uses")
    up.add_argument("--tag", help=f"prefix of the bridge, namespace and veth names (default: {DEFAULT_TAG})")
    up.add_argument("--subnet", help=f"private IPv4 subnet of the nodes (default: {DEFAULT_SUBNET})")
    up.add_argument("--slurmctld-port", type=_port, help=f"(default: {DEFAULT_SLURMCTLD_PORT})")
    up.add_argument("--slurmd-port", type=_port, help=f"(default: {DEFAULT_SLURMD_PORT})")
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for idle nodes (default: %(default)s)"
    )
    up.set_defaults(func=_reported("up", _up))

    status = commands.add_parser("status", parents=[common], help="daemons, nodes and jobs; exit 1 when unhealthy")
    status.set_defaults(func=_reported("status", _status))

    run = commands.add_parser(
        "run", parents=[common], help="run a command once on each of N nodes through Slurm: run [--nodes N] -- CMD..."
    )
    run.add_argument("--nodes", type=_positive, help="node count (default: all)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="the command, after --")
    run.set_defaults(func=_reported("run", _run))

    smoke = commands.add_parser(
        "smoke", parents=[common], help="the launcher's smoke job across the nodes (sbatch, srun, kiln-launch, gloo)"
    )
    smoke.add_argument("--nodes", type=_positive, help="node count (default: all)")
    smoke.add_argument(
        "--steps", type=_positive, default=DEFAULT_SMOKE_STEPS, help="training steps (default: %(default)s)"
    )
    smoke.add_argument(
        "--timeout", type=float, default=SMOKE_TIMEOUT_S, help="seconds before cancelling it (default: %(default)s)"
    )
    smoke.set_defaults(func=_reported("smoke", _smoke))

    down = commands.add_parser(
        "down", parents=[common], help="stop what up started, remove the namespaces, bridge and state"
    )
    down.set_defaults(func=_reported("down", _down))
