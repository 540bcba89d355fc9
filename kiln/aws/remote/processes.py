"""The processes kiln runs here (the AWS CLI, the session-manager-plugin it starts, a command run with a kubeconfig):
started in a process group of their own, their output streamed by lines, stopped with what they started."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from kiln.aws.session import Session

# The environment's static credentials, which the AWS CLI prefers to AWS_PROFILE.
STATIC_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def cli_environment(session: Session) -> dict[str, str]:
    """Return the environment for the AWS CLI: this one, with the boto3 session's profile when it names one.

    A session made with an explicit profile (boto3.Session(profile_name=...)) ignores credentials in the environment
    (botocore's resolver drops its environment provider then), so the CLI gets that profile without them too.
    """
    env = dict(os.environ)
    profile = getattr(session, "profile_name", None)
    core = getattr(session, "_session", None)
    explicit = core.instance_variables().get("profile") if core is not None else None
    if explicit:
        env["AWS_PROFILE"] = explicit
        for name in STATIC_CREDENTIALS:
            env.pop(name, None)
    elif profile and profile != "default" and "AWS_ACCESS_KEY_ID" not in env:
        env["AWS_PROFILE"] = profile
    return env


def stream(
    argv: list[str],
    *,
    env: Mapping[str, str],
    on_out: Callable[[str], Any],
    on_err: Callable[[str], Any],
    timeout_s: float,
    poll_s: float,
    clock: Callable[[], float],
) -> int | None:
    """Run ARGV, handing each line it prints to ON_OUT or ON_ERR; return its exit code, None when it ran out of time."""
    process = spawn(argv, env)
    lines: queue.Queue[tuple[Callable[[str], Any], str | None]] = queue.Queue()

    def pump(pipe: TextIO, sink: Callable[[str], Any]) -> None:
        for text in pipe:
            lines.put((sink, text))
        lines.put((sink, None))

    for pipe, sink in ((process.stdout, on_out), (process.stderr, on_err)):
        threading.Thread(target=pump, args=(pipe, sink), daemon=True).start()
    started, open_streams = clock(), 2
    try:
        while open_streams:
            if clock() - started >= timeout_s:
                stop(process)
                return None
            try:
                sink, text = lines.get(timeout=poll_s)
            except queue.Empty:
                continue
            if text is None:
                open_streams -= 1
            else:
                sink(text)
        return process.wait()
    except BaseException:
        stop(process)
        raise


def spawn(argv: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Start ARGV in a process group of its own (so stop ends what it starts), its output read as text by lines."""
    return subprocess.Popen(
        argv,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )


def stop(process: subprocess.Popen[str]) -> None:
    """End PROCESS and everything it started (the AWS CLI starts session-manager-plugin)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
