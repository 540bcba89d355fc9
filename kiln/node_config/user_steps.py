"""spec -> bootstrap.steps as a target's nodes run them: each script read from the spec's directory and checked."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from kiln.bootstrap.config import UserStep
from kiln.bootstrap.profiles import NODE_ROLE_NAMES, PROFILES
from kiln.catalog.limits import USER_STEP_MAX_BYTES
from kiln.spec import ClusterSpec, Problem, SpecError
from kiln.spec.problems import shown

# The node role each spec role of a user step names on the local cluster: its login is its controller host, where jobs
# are submitted from (it has no login node of its own).
LOCAL_NODE_ROLES = {**NODE_ROLE_NAMES, "login": "controller"}


def user_steps(spec: ClusterSpec, target: str) -> tuple[UserStep, ...]:
    """Return SPEC's bootstrap.steps as TARGET's nodes run them, each with its script read from the spec's directory
    (the current directory for a spec built in code). A script that cannot be shipped is one problem line each: a
    SpecError naming the spec's file, as `kiln validate` reports the rules' problems."""
    directory = spec._source_dir or Path()
    roles = LOCAL_NODE_ROLES if PROFILES[target].local_cluster else NODE_ROLE_NAMES
    steps, problems = [], []
    for index, step in enumerate(spec.bootstrap.steps):
        script = _user_script(directory, step.path)
        if isinstance(script, str):
            problems.append(Problem(path=("bootstrap", "steps", index, "path"), message=script))
            continue
        steps.append(
            UserStep(
                name=step.name,
                phase=step.phase,
                roles=tuple(dict.fromkeys(roles[role] for role in step.roles)),
                script=script,
                sha256=hashlib.sha256(script).hexdigest(),
            )
        )
    if problems:
        raise SpecError(spec._source_file or "<spec>", problems, spec._source_lines)
    return tuple(steps)


def _user_script(directory: Path, relative: str) -> bytes | str:
    """Return the bytes of the script at RELATIVE below DIRECTORY, or why it cannot be shipped (one line): missing,
    resolving outside DIRECTORY (symlinks followed), no regular file, over USER_STEP_MAX_BYTES, or no '#!' line."""
    got = f"got {shown(relative)}"
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        return f"{got}: must be a path below the spec's directory, without '..'"
    base = directory.resolve()
    try:
        resolved = (directory / relative).resolve(strict=True)
    except FileNotFoundError:
        return f"{got}: no such file in the spec's directory {base}"
    except (OSError, RuntimeError) as error:  # a symlink loop; permissions
        return f"{got}: cannot be resolved ({error.strerror if isinstance(error, OSError) else error})"
    if not resolved.is_relative_to(base):
        return (
            f"{got}: resolves to {resolved}, outside the spec's directory {base} (symlinks are followed); copy the "
            "script into it"
        )
    try:
        # Never blocks on a pipe, and reads what was checked: the open file itself is held to the rules.
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        return f"{got}: cannot be read ({error.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{got}: is not a regular file (a directory, pipe or device); name a script"
        if info.st_size > USER_STEP_MAX_BYTES:
            return f"{got}: is {info.st_size} bytes, allowed: at most {USER_STEP_MAX_BYTES} (256 KiB)"
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(USER_STEP_MAX_BYTES + 1)
    except OSError as error:
        return f"{got}: cannot be read ({error.strerror})"
    finally:
        os.close(fd)
    if len(data) > USER_STEP_MAX_BYTES:
        return f"{got}: is over {USER_STEP_MAX_BYTES} bytes (256 KiB), allowed: at most that"
    if not data.startswith(b"#!"):
        return f"{got}: does not start with '#!' (an interpreter line such as #!/bin/bash): nodes run it as a program"
    return data
