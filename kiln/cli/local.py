"""`kiln local ...`: a real multi-node Slurm cluster on this machine, built by the `local` bootstrap."""

from __future__ import annotations

import argparse
import functools
import os
import sys
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


def _replace(args: argparse.Namespace) -> int:
    from kiln.local.cluster import replace_node
    from kiln.local.errors import LocalError
    from kiln.local.replacer import watch

    current = _current(args.prefix)
    prefix = Path(current.layout.prefix)
    if args.watch:
        if args.node:
            raise LocalError("give a node or --watch, not both")
        return watch(prefix)
    if not args.node:
        raise LocalError("name the node to replace (e.g. node2), or --watch to replace nodes as they turn bad")
    current.layout.node(args.node)
    replace_node(prefix, args.node, sys.stdout)
    print(f"kiln local replace: {args.node} replaced; it takes work again")
    return 0


def _current(prefix: str):
    from kiln.local.cluster import load_cluster
    from kiln.local.preflight import check_platform, check_root

    check_platform()
    check_root()
    return load_cluster(Path(os.path.abspath(prefix)))


def _fault(args: argparse.Namespace) -> int:
    import time

    from kiln.local.faults import inject

    injected = inject(_current(args.prefix), args.node, args.kind, time.time())
    print(f"kiln local fault: {injected.kind} on {injected.node}: {injected.target}")
    return 0


def _drill(args: argparse.Namespace) -> int:
    import json

    from kiln.local.drill import run_drill, summary

    report = run_drill(
        _current(args.prefix),
        fault=args.fault,
        node=args.node,
        checkpoint_every=args.checkpoint_every,
        fault_at_step=args.fault_at_step,
        timeout_s=args.timeout,
        out=sys.stderr if args.json else sys.stdout,
        echo=not args.json,
    )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(summary(report)))
    return 0 if report.first_step_after_resume_s is not None else 1


def _down(args: argparse.Namespace) -> int:
    from kiln.local.cluster import down

    return down(args.prefix)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `local` command group to SUBPARSERS."""
    from kiln.local.cluster import DEFAULT_NODES, DEFAULT_SLURMCTLD_PORT, DEFAULT_SLURMD_PORT, READY_TIMEOUT_S
    from kiln.local.drill import DEFAULT_CHECKPOINT_EVERY, DEFAULT_FAULT_AT_STEP, DRILL_TIMEOUT_S
    from kiln.local.faults import KINDS
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

    replace = commands.add_parser(
        "replace",
        parents=[common],
        help="replace a node as a platform replaces an unhealthy instance: fresh namespace and daemons, back to "
        "service (--watch: what the node replacer `up` starts runs, replacing nodes kiln drained or Slurm lost)",
    )
    replace.add_argument("node", nargs="?", help="the node to replace (e.g. node2)")
    replace.add_argument("--watch", action="store_true", help="replace nodes as they turn bad, until stopped")
    replace.set_defaults(func=_reported("replace", _replace))

    fault = commands.add_parser(
        "fault",
        parents=[common],
        help="break a node on purpose: disk-full (its container storage), hang (SIGSTOP a training rank), slurmd "
        "(SIGKILL it)",
    )
    fault.add_argument("node", help="the node to break (e.g. node2)")
    fault.add_argument("kind", choices=KINDS, help="the fault")
    fault.set_defaults(func=_reported("fault", _fault))

    drill = commands.add_parser(
        "drill",
        parents=[common],
        help="run the smoke job, break a node mid-run, and measure detection, drain, requeue, replacement, the "
        "first step after the resume and the steps lost",
    )
    drill.add_argument("--fault", choices=KINDS, required=True, help="the fault to inject")
    drill.add_argument("--node", default="node2", help="the node to break (default: %(default)s)")
    drill.add_argument(
        "--checkpoint-every", type=_positive, default=DEFAULT_CHECKPOINT_EVERY, help="(default: %(default)s)"
    )
    drill.add_argument("--fault-at-step", type=_positive, default=DEFAULT_FAULT_AT_STEP, help="(default: %(default)s)")
    drill.add_argument(
        "--timeout", type=float, default=DRILL_TIMEOUT_S, help="seconds before giving up (default: %(default)s)"
    )
    drill.add_argument("--json", action="store_true", help="print the figures as JSON (progress goes to stderr)")
    drill.set_defaults(func=_reported("drill", _drill))

    down = commands.add_parser(
        "down", parents=[common], help="stop what up started, remove the namespaces, bridge and state"
    )
    down.set_defaults(func=_reported("down", _down))
