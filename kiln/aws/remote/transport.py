"""The transport protocol every way of running a command follows, the choice of one for a Target, and run_command."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO, runtime_checkable

from kiln.aws.remote.kubectl import KubectlTransport
from kiln.aws.remote.nodes import Target
from kiln.aws.remote.session import SessionManagerTransport
from kiln.aws.remote.ssm_run_command import RunCommandTransport

if TYPE_CHECKING:
    from kiln.aws.session import Session


@runtime_checkable
class Transport(Protocol):
    """A way of running a command on one Target; the instance holds the session, the target and the timing."""

    def run(self, command: str, *, out: TextIO, err: TextIO, timeout_s: float) -> int:
        """Run COMMAND, streaming its output to OUT and ERR; return its exit code, or one of kiln.aws.remote.exit_codes
        when it did not end on its own. RemoteError (Unreachable when waiting may help) when it cannot run it."""
        ...


def transport_for(
    session: Session,
    target: Target,
    *,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Transport:
    """Return the transport that reaches TARGET: Run Command for an EC2 instance, Session Manager for a HyperPod node,
    kubectl here for Kubernetes. POLL_S is how often it looks for output, CLOCK and SLEEP its time."""
    if target.kind == "ec2":
        return RunCommandTransport(session, target, poll_s=poll_s, clock=clock, sleep=sleep)
    if target.kind == "hyperpod":
        return SessionManagerTransport(session, target, poll_s=poll_s, clock=clock)
    return KubectlTransport(session, target, poll_s=poll_s, clock=clock)


def run_command(
    session: Session,
    target: Target,
    command: str,
    *,
    timeout_s: float,
    out: TextIO | None = None,
    err: TextIO | None = None,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run COMMAND on TARGET, streaming its output to OUT and ERR; return its exit code (see kiln.aws.remote's doc)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    transport = transport_for(session, target, poll_s=poll_s, clock=clock, sleep=sleep)
    return transport.run(command, out=out, err=err, timeout_s=timeout_s)
