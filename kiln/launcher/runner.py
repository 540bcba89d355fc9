"""Run torch.distributed.run in this process: c10d rendezvous, bounded restarts, every failed attempt recorded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kiln.launcher.environment import LaunchEnvironment

DEFAULT_MAX_RESTARTS = 3


@dataclass(frozen=True, kw_only=True)
class LaunchResult:
    """How the worker group ended."""

    exit_code: int
    status: str
    message: str | None = None
    failures: list[dict[str, object]] = field(default_factory=list)


def torchrun_args(
    environment: LaunchEnvironment,
    *,
    target: str,
    target_args: list[str],
    module: bool,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
) -> list[str]:
    """Return the torch.distributed.run argument list for ENVIRONMENT."""
    args = [
        f"--nnodes={environment.nnodes}",
        f"--nproc-per-node={environment.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={environment.rdzv_endpoint}",
        f"--rdzv-id={environment.job_id}",
        f"--max-restarts={max_restarts}",
    ]
    if environment.rdzv_is_host is not None:
        # Say which node hosts the store instead of letting torch match hostnames,
        # which fails when the node list and `hostname` disagree (short vs FQDN).
        args.append(f"--rdzv-conf=is_host={int(environment.rdzv_is_host)}")
    if module:
        args.append("--module")
    return [*args, target, *target_args]


def launch(args: list[str], *, on_failed_attempt: Callable[[dict[str, object]], None] | None = None) -> LaunchResult:
    """Run torch.distributed.run with ARGS in-process and return how it ended; ON_FAILED_ATTEMPT gets each attempt
    whose workers failed (the ones torchrun restarts too, which its ChildFailedError never reports)."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    try:
        with _failed_attempts(on_failed_attempt):
            torchrun.main(args)
    except ChildFailedError as error:
        rank, first = error.get_first_failure()
        failures = [
            {"rank": r, "local_rank": f.local_rank, "exitcode": f.exitcode, "message": f.message}
            for r, f in sorted(error.failures.items())
        ]
        # A negative exit code is a signal; report it the way a shell would.
        code = first.exitcode if first.exitcode > 0 else 128 - first.exitcode
        return LaunchResult(
            exit_code=code,
            status="failed",
            message=f"rank {rank} failed with exit code {first.exitcode} after the allowed restarts",
            failures=failures,
        )
    except SignalException as error:
        return LaunchResult(exit_code=128 + int(error.sigval), status="interrupted", message=str(error))
    except RendezvousError as error:
        return LaunchResult(exit_code=1, status="rendezvous_failed", message=f"{type(error).__name__}: {error}")
    except (RuntimeError, OSError) as error:
        # A store that cannot be reached or bound (DistNetworkError and kin): an
        # environment problem, reported in one line like the others.
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return LaunchResult(exit_code=1, status="launch_failed", message=f"{type(error).__name__}: {first_line}")
    return LaunchResult(exit_code=0, status="succeeded")


@contextmanager
def _failed_attempts(callback: Callable[[dict[str, object]], None] | None) -> Iterator[None]:
    """Report every failed worker group to CALLBACK while torchrun runs in this process.

    torchrun's agent checks its workers with LocalElasticAgent._monitor_workers and restarts a failed group without
    saying more than a log line; its ChildFailedError carries the last attempt only. Wrapping that method (torch's
    own, called once per monitor interval) is the one place that sees each failed attempt's exit codes.
    """
    if callback is None:
        yield
        return
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    original = LocalElasticAgent._monitor_workers
    attempt = {"number": 0}

    def monitored(self, worker_group):
        result = original(self, worker_group)
        if result.is_failed():
            callback(
                {
                    "attempt": attempt["number"],
                    "ended": "failed",
                    "at": time.time(),
                    "failures": [
                        {
                            "rank": rank,
                            "local_rank": failure.local_rank,
                            "pid": failure.pid,
                            "exitcode": failure.exitcode,
                            "signal": failure.signal_name() if failure.exitcode < 0 else None,
                        }
                        for rank, failure in sorted(result.failures.items())
                    ],
                }
            )
            attempt["number"] += 1
        return result

    LocalElasticAgent._monitor_workers = monitored
    try:
        yield
    finally:
        LocalElasticAgent._monitor_workers = original
