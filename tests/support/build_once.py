"""A directory built once per test run and shared by every xdist worker."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """Return the directory NAME that BUILD filled, built by the first xdist worker to ask and shared by the rest.

    The workers of one run share the parent of their base temp directories; a lock there makes the others
    wait for the first build instead of repeating it. (pytest 9 ignores xdist_group: the tests of one group
    may run on every worker.) A build that raised is tried again by the next worker that asks.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            directory.mkdir(exist_ok=True)
            build(directory)
            done.touch()
    return directory
