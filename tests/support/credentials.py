"""The situations without credentials that every command is tested in; no_credentials_env (a fixture) sets one up."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

MISSING_PROFILE = "kiln-test-no-such-profile"


REMEDY = "set or refresh them (environment, profile, SSO or instance role) for the account to use"


# Situation -> the reason in parentheses, as a regular expression ("" when none were found at all).
SITUATIONS = {
    "none": "",
    "partial": re.escape(" (the environment has only some of them: AWS_SECRET_ACCESS_KEY is missing)"),
    "missing-profile": re.escape(f" (profile {MISSING_PROFILE} is not in the AWS config)"),
    # The same profile named by --profile, which every command that asks AWS takes (kiln.cli.options.aws_options).
    "profile-flag": re.escape(f" (profile {MISSING_PROFILE} is not in the AWS config)"),
    "rejected": r" \(AWS rejected those found: ExpiredToken on [A-Za-z]+\)",
}


def _rejecting_call(self: BaseClient, operation_name: str, api_params: dict) -> dict:
    """AWS as it answers a request signed with an expired session token, without sending anything."""
    raise ClientError(
        {"Error": {"Code": "ExpiredToken", "Message": "The security token included in the request is expired"}},
        operation_name,
    )


@pytest.fixture
def no_credentials_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], None]:
    """Remove every AWS setting of this process; return a function that sets up one situation of SITUATIONS."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "missing-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "missing-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # boto3's default session keeps the credentials it found first: a fresh one for this test.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for name in ("GITHUB_RUN_ID", "CI_PIPELINE_ID", "BUILDKITE_BUILD_ID"):
        monkeypatch.delenv(name, raising=False)

    def situation(name: str) -> None:
        if name == "partial":
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEONLYHALF")
        elif name == "missing-profile":
            monkeypatch.setenv("AWS_PROFILE", MISSING_PROFILE)
        elif name == "rejected":
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXPIRED")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "expired")
            monkeypatch.setenv("AWS_SESSION_TOKEN", "expired")
            monkeypatch.setattr(BaseClient, "_make_api_call", _rejecting_call)

    return situation
