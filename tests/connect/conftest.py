"""Fixtures for the `kiln connect` tests: fake credentials and moto (tests/support/fake_aws.py), a moto account for
tests/support/connect_scenarios.py, and the stand-ins for the AWS CLI and kubectl (tests/support/connect.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from tests.support.connect import Tools, install_tools
from tests.support.fake_aws import aws_env as aws_env
from tests.support.fake_aws import moto as moto


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    """The three stand-ins first on PATH (bash and the rest of the system after them); $FAKE_RECORD set."""
    found = install_tools(tmp_path, ("aws", "session-manager-plugin", "kubectl"))
    monkeypatch.setenv("PATH", f"{found.bin}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_RECORD", str(found.record))
    return found


@pytest.fixture
def account(aws_env: None) -> Iterator[None]:
    """An in-process moto account, for the tests that make their own sessions (tests/support/connect_scenarios.py)."""
    with mock_aws():
        yield
