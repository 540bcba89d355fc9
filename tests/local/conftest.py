"""Fixtures for the local cluster: the `kiln local` command, and one 2-node cluster per module."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.local import e2e_skip_reason


@pytest.fixture(scope="module")
def e2e_ready() -> None:
    reason = e2e_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def searchable_dir() -> Iterator[Path]:
    """Return a fresh directory every user may search: munged refuses sockets below pytest's 0700 tmp dirs."""
    base = Path(tempfile.mkdtemp(prefix="kiln-local-test-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)
