"""The ``kiln-launch`` command: launch a training script, the smoke job, or the readiness check.

    kiln-launch [OPTIONS] SCRIPT [ARGS...]
    kiln-launch [OPTIONS] smoke [--steps N] [...]
    kiln-launch [OPTIONS] check [--json] [...]
    kiln-launch [--checkpoint-dir DIR] health [--json] [--drain] [...]
    kiln-launch drain-requests [--root DIR] [--node NAME]

Exit codes: the workers' exit code (0 when they all succeed), 1 when the
environment cannot be launched, 2 for a bad command line, 75 when the hang
watchdog ended a hung run (status "hung"), 78 when NCCL chose TCP instead of
EFA on an EFA node (status "tcp_fallback"); ``check`` and ``health`` document
their own.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from pathlib import Path

from kiln.launcher import container
from kiln.launcher.errors import LaunchError, UsageError
from kiln.launcher.launch import LaunchOptions, execute, prepare
from kiln.launcher.runner import DEFAULT_MAX_RESTARTS

SUBCOMMANDS = ("smoke", "check", "health", "drain-requests")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(message)


def _positive(text: str) -> int:
    return _bounded(text, 1)


def _non_negative(text: str) -> int:
    return _bounded(text, 0)


def _bounded(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        kind = "a positive" if low == 1 else "a non-negative"
        raise argparse.ArgumentTypeError(f"expected {kind} integer (got {text!r})")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for the launcher's own options."""
    parser = _Parser(
        prog="kiln-launch",
        description="Launch distributed training on Slurm, a Kubernetes PyTorchJob or a plain machine.",
        epilog="Subcommands: smoke (a small GPT training run), check (readiness check), health (node health check "
        "for Slurm's HealthCheckProgram: a line '<ok|FAIL|n/a> <check>: <detail>' per check; exit 0 healthy, 1 "
        "unhealthy, 2 usage; --drain drains the node on a FAIL), drain-requests (root's side of the hang "
        "watchdog's drain hand-off: drain this node for a job of the requesting user that runs on it). "
        "Options after SCRIPT or a subcommand belong to it.",
    )
    parser.add_argument(
        "--nproc-per-node", type=_positive, help="processes per node (default: one per GPU, else 1 on CPU)"
    )
    parser.add_argument(
        "--max-restarts",
        type=_non_negative,
        default=DEFAULT_MAX_RESTARTS,
        help=f"worker group restarts before giving up (default {DEFAULT_MAX_RESTARTS})",
    )
    parser.add_argument(
        "--checkpoint-dir", help="checkpoint root (default: $KILN_CHECKPOINT_DIR, else /fsx/checkpoints)"
    )
    parser.add_argument("--job-id", help="job id for the rendezvous and checkpoints (default: from the scheduler)")
    parser.add_argument("--rdzv-port", type=_positive, help="rendezvous port (default: from the scheduler)")
    parser.add_argument(
        "--nccl-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="NCCL/EFA or Neuron variable over the preset and the node's nccl.env (repeatable; beats "
        "$KILN_NCCL_ENV, never a variable already set)",
    )
    parser.add_argument(
        "--allow-tcp",
        action="store_true",
        help="start on a GPU node with EFA devices even when NCCL would fall back to TCP sockets (no aws-ofi-nccl "
        "plugin or libfabric efa provider here), and let ranks whose NCCL chose TCP train on; default: refuse in one "
        "line ($KILN_ALLOW_TCP=1 does the same)",
    )
    parser.add_argument(
        "--hang-factor",
        type=_positive,
        help="call the run hung when no rank finishes a step for this many median step times (and --hang-min-s); "
        "default: $KILN_HANG_FACTOR, else 10",
    )
    parser.add_argument(
        "--hang-min-s",
        type=_positive,
        help="the shortest stall called a hang, in seconds (also the limit before the first steps); default: "
        "$KILN_HANG_MIN_S, else 300",
    )
    parser.add_argument(
        "--precompile",
        action="store_true",
        help="Neuron nodes: run the workers under neuron_parallel_compile, which extracts the script's graphs and "
        "compiles them into the Neuron compile cache (the job's and node's directory under the node's "
        "KILN_NEURON_CACHE_ROOT, or your NEURON_COMPILE_CACHE_URL); run a few steps",
    )
    parser.add_argument("--run-record", help="where to write the JSON run record (default: <job dir>/runs/)")
    parser.add_argument("--dry-run", action="store_true", help="print the launch plan as JSON and exit")
    parser.add_argument("command", nargs="?", metavar="SCRIPT|smoke|check|health|drain-requests")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run kiln-launch with ARGV; return the exit code."""
    started = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv, started)
    except UsageError as error:
        print(f"kiln-launch: error: {error}", file=sys.stderr)
        return 2
    except LaunchError as error:
        print(f"kiln-launch: error: {error}", file=sys.stderr)
        return 1
    except SystemExit as exit_:
        # argparse's --help exits; the console script wants a return value.
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt:
        return 130


def _run(argv: list[str], started: float) -> int:
    parsed = build_parser().parse_args(argv)
    options = LaunchOptions(
        nproc_per_node=parsed.nproc_per_node,
        max_restarts=parsed.max_restarts,
        checkpoint_dir=parsed.checkpoint_dir,
        job_id=parsed.job_id,
        rdzv_port=parsed.rdzv_port,
        nccl_env=tuple(parsed.nccl_env),
        run_record=parsed.run_record,
        allow_tcp=parsed.allow_tcp,
        precompile=parsed.precompile,
        hang_factor=parsed.hang_factor,
        hang_min_s=parsed.hang_min_s,
    )
    command, rest = parsed.command, list(parsed.args)
    if command is None:
        raise UsageError(f"missing SCRIPT or subcommand ({', '.join(SUBCOMMANDS)}); see kiln-launch --help")
    if command == "health":
        # On the host, never in the training container, and without torch: slurmd runs it every few minutes.
        _only_checkpoint_dir(parsed, command)
        from kiln.launcher import health

        return health.run(rest, started=started, checkpoint_flag=parsed.checkpoint_dir)
    if command == "drain-requests":
        # Root's side of the watchdog's drain hand-off (kiln.launcher.drain_request): on the host, without torch.
        _only_checkpoint_dir(parsed, command)
        from kiln.launcher import drain_request

        return drain_request.run(rest)
    if command == "check" and parsed.precompile:
        raise UsageError("--precompile: runs a training script or smoke under neuron_parallel_compile, not check")
    # Without torch here, on a node whose bootstrap names a training image: the same argv in that container.
    container.run_if_needed(argv, dry_run=parsed.dry_run)
    if command == "check":
        from kiln.launcher import check

        return check.run(options, rest, started=started, launcher_argv=argv, dry_run=parsed.dry_run)
    if command == "smoke":
        from kiln.launcher.smoke_options import parse_args

        parse_args(rest)
        target, module = "kiln.launcher.smoke", True
    else:
        if not Path(command).is_file():
            close = difflib.get_close_matches(command, SUBCOMMANDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"{command!r} is neither a subcommand ({', '.join(SUBCOMMANDS)}) nor a script{hint}")
        target, module = command, False
    plan = prepare(options, target=target, target_args=rest, module=module, started=started, argv=argv)
    if parsed.dry_run:
        print(json.dumps(plan.as_dict(), indent=2, sort_keys=True))
        return 0
    return execute(plan).exit_code


def _only_checkpoint_dir(parsed: argparse.Namespace, command: str) -> None:
    """Refuse launcher options a host-side subcommand has no use for (health's checkpoint root is the one it
    takes)."""
    defaults = build_parser().parse_args([command])
    kept = ("checkpoint_dir",) if command == "health" else ()
    for name, value in vars(parsed).items():
        if name not in ("command", "args", *kept) and value != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            takes = "only --checkpoint-dir" if kept else "no launch option"
            raise UsageError(f"{command}: {flag} is a launch option; {command} takes {takes} before it")
