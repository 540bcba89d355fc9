"""Session Manager's transport: a HyperPod node's command in an ``aws ssm start-session`` subprocess
(AWS-StartNonInteractiveCommand), its exit code read from a marker line kiln's wrapper prints; and ending a session."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import one_line
from kiln.aws.remote.cluster import RemoteError, Unreachable
from kiln.aws.remote.exit_codes import EXIT_NO_STATUS, EXIT_TIMED_OUT
from kiln.aws.remote.nodes import NODE_PREAMBLE, Target
from kiln.aws.remote.processes import cli_environment, stream
from kiln.contracts.ssm_documents import NON_INTERACTIVE_COMMAND_DOCUMENT

if TYPE_CHECKING:
    from kiln.aws.session import Session

# The session-manager-plugin's first and last lines, with the session's id.
SESSION_BANNER = re.compile(r"^\s*(Starting|Exiting) session with [Ss]essionId: (\S+?)\.?\s*$")


def session_command(command: str, marker: str) -> str:
    """Return the session's command: bash running COMMAND in kiln's preamble, then printing MARKER:$?.

    The agent splits the command into words itself (no shell) and merges stdout and stderr; the script travels
    base64-encoded so that no quoting of the user's command can break that split.
    """
    encoded = base64.b64encode((NODE_PREAMBLE + command).encode()).decode()
    inner = f'bash -l -c "$(printf %s {encoded} | base64 -d)"; printf "\\n%s:%d\\n" {marker} "$?"'
    return f"bash -c '{inner}'"


@dataclass(frozen=True)
class SessionManagerTransport:
    """Runs commands on TARGET (a HyperPod node's session target) through the AWS CLI; reads its output every POLL_S
    seconds at most until done or the timeout passes (CLOCK), then ends the session."""

    session: Session
    target: Target
    _: KW_ONLY
    poll_s: float = 2.0
    clock: Callable[[], float] = time.monotonic

    def run(self, command: str, *, out: TextIO, err: TextIO, timeout_s: float) -> int:
        """Run COMMAND in a session, its merged output on OUT; return its exit code (124 out of time, 255 unknown)."""
        target = self.target
        marker = f"KILN-EXIT-{secrets.token_hex(8)}"
        filtered = _SessionOutput(marker, out)
        problems: list[str] = []
        try:
            code = stream(
                self._argv(command, marker),
                env=cli_environment(self.session),
                on_out=filtered.line,
                on_err=problems.append,
                timeout_s=timeout_s,
                poll_s=self.poll_s,
                clock=self.clock,
            )
        except FileNotFoundError:
            raise RemoteError(
                "the AWS CLI (`aws`) is not on PATH: HyperPod nodes are reached with `aws ssm start-session`; "
                "install the AWS CLI v2 and the session-manager-plugin"
            ) from None
        filtered.finish()
        if code is None:
            terminate_session(self.session, target.region, filtered.session_id)
            err.write(f"kiln: {target.label}: the command did not finish within {timeout_s:g} s; ended the session\n")
            return EXIT_TIMED_OUT
        if filtered.exit_code is not None:
            return filtered.exit_code
        said = next((one_line(p) for p in reversed(problems) if p.strip()), one_line(filtered.last_line))
        said = said or f"exit code {code}"
        if code != 0:
            failure = f"aws ssm start-session to {target.label} failed: {said}"
            if "TargetNotConnected" in said:
                raise Unreachable(failure)
            raise RemoteError(failure)
        err.write(f"kiln: {target.label}: the session ended without reporting the command's exit code ({said})\n")
        return EXIT_NO_STATUS

    def _argv(self, command: str, marker: str) -> list[str]:
        """Return the AWS CLI's arguments that run COMMAND, wrapped to print MARKER, in a session to the target."""
        parameters = json.dumps({"command": [session_command(command, marker)]})
        return [
            "aws",
            "ssm",
            "start-session",
            "--target",
            self.target.address,
            "--document-name",
            NON_INTERACTIVE_COMMAND_DOCUMENT,
            "--parameters",
            parameters,
            "--region",
            self.target.region,
        ]


class _SessionOutput:
    """Session output, line by line: drops the plugin's banners and kiln's marker line, keeps the exit code."""

    def __init__(self, marker: str, out: TextIO) -> None:
        self._marker = re.compile(rf"^{re.escape(marker)}:(-?\d+)$")
        self._out = out
        # The wrapper prints a newline before the marker; a blank line just before it is held back and dropped.
        self._held: str | None = None
        self._started = False
        self.exit_code: int | None = None
        self.session_id: str | None = None
        self.last_line = ""

    def line(self, text: str) -> None:
        text = text.replace("\r\n", "\n").replace("\r", "")
        banner = SESSION_BANNER.match(text)
        if banner:
            if banner.group(1) == "Starting":
                self.session_id = banner.group(2)
            return
        if self.exit_code is not None:
            return
        found = self._marker.match(text.rstrip("\n"))
        if found:
            self.exit_code = int(found.group(1))
            self._held = None
            return
        if not self._started and not text.strip():
            return
        self._started = True
        self.last_line = text.strip() or self.last_line
        if self._held is not None:
            self._out.write(self._held)
            self._held = None
        if text == "\n":
            self._held = text
            return
        self._out.write(text)
        self._out.flush()

    def finish(self) -> None:
        if self._held is not None:
            self._out.write(self._held)
            self._held = None
        self._out.flush()


def terminate_session(session: Session, region: str, session_id: str | None) -> None:
    """End Session Manager session SESSION_ID in REGION (nothing when None), ignoring AWS's refusal.

    Killing the CLI closes the session's stream; TerminateSession makes the agent stop the command too.
    """
    if session_id is None:
        return
    with contextlib.suppress(ClientError, BotoCoreError):
        session.client("ssm", region_name=region).terminate_session(SessionId=session_id)
