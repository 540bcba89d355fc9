"""Session Manager's port forwarding: a local port forwarded through a node, to a host the node reaches (the EKS API's
private endpoint) or to a port of the node itself (code-server for `kiln connect`), by ``aws ssm start-session``."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TextIO

from kiln.aws.errors import one_line
from kiln.aws.remote.cluster import RemoteError, Unreachable
from kiln.aws.remote.processes import spawn, stop
from kiln.aws.remote.session import SESSION_BANNER, terminate_session
from kiln.contracts.ssm_documents import LOCAL_PORT_FORWARD_DOCUMENT, PORT_FORWARD_DOCUMENT

if TYPE_CHECKING:
    from kiln.aws.session import Session

# How long the session-manager-plugin may take to listen on the local port.
PORT_FORWARD_READY_S = 60.0
# What the plugin prints once the local port listens (multiplexed forwarding, then the older one-connection kind).
_FORWARD_LISTENING = re.compile(r"Waiting for connections|Port \d+ opened for sessionId")
# The AWS CLI's error when session-manager-plugin is not on PATH.
_PLUGIN_MISSING = "SessionManagerPlugin is not found"


@contextlib.contextmanager
def port_forward(
    session: Session,
    *,
    region: str,
    node: str,
    host: str | None,
    remote_port: int,
    local_port: int | None = None,
    env: Mapping[str, str],
    poll_s: float,
    clock: Callable[[], float],
    via: str,
    purpose: str,
) -> Iterator[Forward]:
    """Forward LOCAL_PORT (default: a free one) to HOST's REMOTE_PORT through NODE (in REGION) with Session Manager, or
    to NODE's own REMOTE_PORT when HOST is None; yield the forward once it listens (its port, process and session id).

    VIA names NODE in messages, PURPOSE what the forward reaches. ENV is the AWS CLI's environment; POLL_S how often
    to look whether it listens, CLOCK the time. Afterwards, also when the block fails, stops the AWS CLI and its
    session-manager-plugin (their process group) and ends the session.
    """
    port = local_port or free_port()
    if host is None:
        document, parameters = LOCAL_PORT_FORWARD_DOCUMENT, {}
    else:
        document, parameters = PORT_FORWARD_DOCUMENT, {"host": [host]}
    parameters |= {"portNumber": [str(remote_port)], "localPortNumber": [str(port)]}
    argv = ["aws", "ssm", "start-session", "--target", node, "--document-name", document]
    argv += ["--parameters", json.dumps(parameters), "--region", region]
    try:
        process = spawn(argv, env)
    except FileNotFoundError:
        raise RemoteError(
            f"the AWS CLI (`aws`) is not on PATH: {purpose} is reached with `aws ssm start-session`; install the AWS "
            "CLI v2 and the session-manager-plugin"
        ) from None
    forward = Forward(process, port)
    try:
        forward.wait_listening(via=via, purpose=purpose, poll_s=poll_s, clock=clock)
        yield forward
    finally:
        stop(process)
        terminate_session(session, region, forward.session_id)


class Forward:
    """A port-forwarding CLI's output, read on threads until it exits: its session id, whether it listens, errors."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        # The local port it forwards.
        self.port = port
        self.session_id: str | None = None
        self.listening = threading.Event()
        self.last: dict[str, str] = {"out": "", "err": ""}
        self._readers = [
            threading.Thread(target=self._read, args=(pipe, kind), daemon=True)
            for pipe, kind in ((process.stdout, "out"), (process.stderr, "err"))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: TextIO, kind: str) -> None:
        for text in pipe:
            line = text.strip()
            banner = SESSION_BANNER.match(line)
            if banner and banner.group(1) == "Starting":
                self.session_id = banner.group(2)
            if _FORWARD_LISTENING.search(line):
                self.listening.set()
            if line:
                self.last[kind] = line

    def wait_listening(self, *, via: str, purpose: str, poll_s: float, clock: Callable[[], float]) -> None:
        """Return once the plugin listens on the local port; a one-line error when it exits first or takes too long.

        VIA names the node it forwards through, PURPOSE what it forwards to.
        """
        started = clock()
        while not self.listening.wait(min(poll_s, 0.5)):
            if self.process.poll() is not None:
                # What it started may still hold the pipes open: stop them all, then read what is left.
                stop(self.process)
                self.finish_reading()
                said = one_line(self.last["err"] or self.last["out"]) or f"exit code {self.process.returncode}"
                if _PLUGIN_MISSING in said:
                    raise RemoteError(
                        f"the session-manager-plugin is not on PATH: the AWS CLI needs it to forward a port to "
                        f"{purpose}; install it beside the AWS CLI v2"
                    )
                failure = f"aws ssm start-session to {via} failed: {said}"
                if "TargetNotConnected" in said:
                    raise Unreachable(failure)
                raise RemoteError(failure)
            if accepts(self.port):
                return
            if clock() - started >= PORT_FORWARD_READY_S:
                said = one_line(self.last["err"] or self.last["out"]) or "nothing"
                raise RemoteError(
                    f"the port forward through {via} did not listen on 127.0.0.1:{self.port} within "
                    f"{PORT_FORWARD_READY_S:g} s (the AWS CLI last said: {said}); stopped it"
                )

    def finish_reading(self, timeout_s: float = 5.0) -> None:
        """Wait (up to TIMEOUT_S each) for the readers to reach the end of the output, once the process is stopped."""
        for reader in self._readers:
            reader.join(timeout=timeout_s)


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 that nothing uses now (the system's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def accepts(port: int) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:PORT."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
