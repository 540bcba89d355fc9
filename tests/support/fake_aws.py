"""A fake AWS account: fake credentials and a region, no user AWS config, and moto.

aws_env and moto are fixtures: a conftest that wants them re-exports them (`from ... import aws_env as aws_env`).
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

REGION = "us-east-1"


ACCOUNT = "123456789012"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fake credentials, a region and no user AWS config files, so nothing can reach a real account."""
    empty = tmp_path_factory.mktemp("aws-config")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "GITHUB_RUN_ID", "CI_PIPELINE_ID", "BUILDKITE_BUILD_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def moto(aws_env: None) -> Iterator[boto3.Session]:
    """An in-process moto account; yields a session in REGION."""
    with mock_aws():
        yield boto3.Session(region_name=REGION)
