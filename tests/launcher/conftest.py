"""Fixtures for the launcher tests: an isolated environment with no scheduler and no IMDS."""

from __future__ import annotations

import os
import socket

import pytest

from tests.support.launcher import LEAKY_NAMES, LEAKY_PREFIXES


@pytest.fixture(scope="session")
def refused_endpoint():
    """Return an http URL on loopback where nothing listens: a bound, never-listening socket refuses at once."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{holder.getsockname()[1]}"
    holder.close()


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path, refused_endpoint):
    """Strip scheduler and kiln variables; checkpoints in tmp; IMDS on a refused loopback port."""
    for name in list(os.environ):
        if name.startswith(LEAKY_PREFIXES) or name in LEAKY_NAMES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("KILN_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("KILN_IMDS_ENDPOINT", refused_endpoint)
    return tmp_path
