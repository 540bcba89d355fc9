"""Run Command's transport: AWS-RunShellScript on an EC2 instance, its output read by polling GetCommandInvocation.

GetCommandInvocation keeps only the first 24,000 characters of output and 8,000 of errors, and may return neither
until the command ends; kiln prints a notice when output was cut.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import (
    CREDENTIAL_ERRORS,
    credentials_wording,
    error_code,
    explain,
    one_line,
    raise_if_no_credentials,
)
from kiln.aws.remote.cluster import RemoteError, Unreachable
from kiln.aws.remote.exit_codes import EXIT_CANCELLED, EXIT_TIMED_OUT
from kiln.aws.remote.nodes import NODE_PREAMBLE, Target
from kiln.contracts.ssm_documents import RUN_SHELL_DOCUMENT

if TYPE_CHECKING:
    from kiln.aws.session import Session, SSMClient

RUN_COMMAND_OUTPUT_LIMIT = 24_000
RUN_COMMAND_ERROR_LIMIT = 8_000
# AWS-RunShellScript's executionTimeout: at most 48 hours. kiln's own timeout fires first; this is the backstop.
MAX_EXECUTION_TIMEOUT_S = 172_800
EXECUTION_TIMEOUT_MARGIN_S = 60
TERMINAL_STATUSES = ("Success", "Failed", "TimedOut", "Cancelled")


def node_script(command: str) -> str:
    """Return the shell line that runs COMMAND on a node: a login bash with kiln's preamble."""
    return f"exec bash -l -c {shlex.quote(NODE_PREAMBLE + command)}"


@dataclass(frozen=True)
class RunCommandTransport:
    """Runs commands on TARGET (an EC2 instance) with Run Command; polls every POLL_S seconds (SLEEP) until done or
    the timeout passes (CLOCK), then cancels the command."""

    session: Session
    target: Target
    _: KW_ONLY
    poll_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def run(self, command: str, *, out: TextIO, err: TextIO, timeout_s: float) -> int:
        """Send COMMAND, write its output and errors as they arrive; return its exit code (124 out of time)."""
        ssm = self.session.client("ssm", region_name=self.target.region)
        started = self.clock()
        command_id = self._send(ssm, command, timeout_s)
        shown = _Shown()
        while True:
            self.sleep(self.poll_s)
            invocation = self._invocation(ssm, command_id)
            if invocation is not None:
                shown.write(invocation, out, err)
                if invocation.get("Status") in TERMINAL_STATUSES:
                    shown.notice_if_cut(err)
                    return self._exit_code(invocation, err)
            if self.clock() - started >= timeout_s:
                self._cancel(ssm, command_id, err)
                err.write(
                    f"kiln: {self.target.label}: the command did not finish within {timeout_s:g} s; cancelled it\n"
                )
                return EXIT_TIMED_OUT

    def _send(self, ssm: SSMClient, command: str, timeout_s: float) -> str:
        """Send COMMAND with ssm:SendCommand, its execution timeout a margin past TIMEOUT_S; return its command id."""
        execution_timeout = min(MAX_EXECUTION_TIMEOUT_S, max(1, math.ceil(timeout_s) + EXECUTION_TIMEOUT_MARGIN_S))
        try:
            sent = ssm.send_command(
                InstanceIds=[self.target.address],
                DocumentName=RUN_SHELL_DOCUMENT,
                Comment="kiln ci run",
                Parameters={"commands": [node_script(command)], "executionTimeout": [str(execution_timeout)]},
            )
        except ClientError as error:
            raise_if_no_credentials(error)
            if error_code(error) == "InvalidInstanceId":
                raise Unreachable(
                    f"{self.target.label} is not reachable through Systems Manager (yet): its SSM agent must be "
                    "online, with an instance role that allows SSM Agent's actions (kiln's node roles hold them)"
                ) from None
            raise RemoteError(explain("ssm:SendCommand", error)) from None
        except BotoCoreError as error:
            raise_if_no_credentials(error)
            raise RemoteError(f"ssm:SendCommand: {one_line(str(error))}") from None
        return sent["Command"]["CommandId"]

    def _invocation(self, ssm: SSMClient, command_id: str) -> Mapping[str, Any] | None:
        """Return the command's invocation on the instance, or None while Run Command has not created it yet."""
        try:
            return ssm.get_command_invocation(CommandId=command_id, InstanceId=self.target.address)
        except ClientError as error:
            raise_if_no_credentials(error)
            if error_code(error) == "InvocationDoesNotExist":
                return None
            raise RemoteError(explain("ssm:GetCommandInvocation", error)) from None
        except BotoCoreError as error:
            raise_if_no_credentials(error)
            raise RemoteError(f"ssm:GetCommandInvocation: {one_line(str(error))}") from None

    def _exit_code(self, invocation: Mapping[str, Any], err: TextIO) -> int:
        """Return the exit code of a finished INVOCATION, saying on ERR why when the command did not end on its own."""
        label = self.target.label
        status, details = invocation["Status"], invocation.get("StatusDetails", "")
        code = int(invocation.get("ResponseCode", -1))
        if status == "Success":
            return max(code, 0)
        if status == "TimedOut":
            err.write(f"kiln: {label}: Run Command ended the command ({details or status})\n")
            return EXIT_TIMED_OUT
        if status == "Cancelled":
            err.write(f"kiln: {label}: the command was cancelled\n")
            return EXIT_CANCELLED
        if code > 0:
            return code
        # Failed without an exit code: the agent could not run it at all.
        err.write(f"kiln: {label}: Run Command could not run the command ({details or status})\n")
        return 1

    def _cancel(self, ssm: SSMClient, command_id: str, err: TextIO) -> None:
        """Cancel the command; a line on ERR, not an error, when AWS refuses."""
        try:
            ssm.cancel_command(CommandId=command_id, InstanceIds=[self.target.address])
        except (ClientError, BotoCoreError) as error:
            if isinstance(error, ClientError):
                reason = explain("ssm:CancelCommand", error)
            else:
                reason = credentials_wording(error) if isinstance(error, CREDENTIAL_ERRORS) else one_line(str(error))
            err.write(f"kiln: {self.target.label}: could not cancel command {command_id}: {reason}\n")


@dataclass
class _Shown:
    """How much of an invocation's output and errors has been written already."""

    output: int = 0
    errors: int = 0
    cut: bool = False

    def write(self, invocation: Mapping[str, Any], out: TextIO, err: TextIO) -> None:
        output = invocation.get("StandardOutputContent") or ""
        errors = invocation.get("StandardErrorContent") or ""
        if len(output) > self.output:
            out.write(output[self.output :])
            out.flush()
            self.output = len(output)
        if len(errors) > self.errors:
            err.write(errors[self.errors :])
            err.flush()
            self.errors = len(errors)
        self.cut = self.output >= RUN_COMMAND_OUTPUT_LIMIT or self.errors >= RUN_COMMAND_ERROR_LIMIT

    def notice_if_cut(self, err: TextIO) -> None:
        if self.cut:
            err.write(
                f"\nkiln: Run Command keeps only the first {RUN_COMMAND_OUTPUT_LIMIT:,} characters of output and "
                f"{RUN_COMMAND_ERROR_LIMIT:,} of errors, so this output was cut; write long output to a file on the "
                "shared file system and print its tail\n"
            )
