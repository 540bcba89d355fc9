"""Fixtures for the `kiln ami` tests: fake AWS settings and a moto account without AWS's public AMIs (baked AMIs and a
stubbed Image Builder: tests/support/ami.py).

moto does not implement EC2 Image Builder, so its client is a botocore Stubber; everything else is moto.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from tests.support.fake_aws import REGION
from tests.support.fake_aws import aws_env as aws_env  # autouse: fake credentials, no user AWS config, a region


@pytest.fixture(autouse=True)
def no_default_amis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start moto's EC2 without AWS's public AMI catalog: loading it takes seconds (a test may turn it back on)."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def aws(aws_env: None) -> Iterator[boto3.Session]:
    """An in-process moto account; yields a session in REGION."""
    with mock_aws():
        yield boto3.Session(region_name=REGION)
