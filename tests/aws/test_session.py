"""kiln.aws.session: the one region rule, the one retry configuration and --profile of every command's session."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.config import Config

from kiln.aws.errors import NoCredentials
from kiln.aws.session import CLIENT_CONFIG, MAX_ATTEMPTS, NoRegion, aws_session, chosen_region, no_region

SPEC_REGION = "eu-central-1"


@dataclass(frozen=True)
class Spec:
    region: str | None


@pytest.fixture(autouse=True)
def no_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS setting of this process or this user's config files; return the AWS config file tests may write."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "config"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return config


@pytest.mark.parametrize(
    ("spec", "flag", "expected"),
    [
        (Spec(SPEC_REGION), None, SPEC_REGION),
        (Spec(SPEC_REGION), SPEC_REGION, SPEC_REGION),
        (Spec(None), "ap-south-1", "ap-south-1"),
        (None, "ap-south-1", "ap-south-1"),
    ],
    ids=["the-spec", "the-flag-agrees", "a-spec-without-one", "no-spec"],
)
def test_the_region_is_the_specs_else_the_flags(spec: Spec | None, flag: str | None, expected: str) -> None:
    session = aws_session(region=flag, profile=None, spec=spec)
    assert session.region_name == chosen_region(flag, spec) == expected


def test_a_flag_that_disagrees_with_the_spec_is_refused_in_one_line() -> None:
    with pytest.raises(NoRegion) as refused:
        aws_session(region="ap-south-1", profile=None, spec=Spec(SPEC_REGION))
    assert str(refused.value) == f"--region ap-south-1: the spec deploys to {SPEC_REGION}"


def test_else_the_region_botocore_is_configured_with(monkeypatch: pytest.MonkeyPatch, no_aws_settings: Path) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "sa-east-1")
    assert aws_session(region=None, profile=None, spec=Spec(None)).region_name == "sa-east-1"
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    no_aws_settings.write_text("[profile lab]\nregion = ca-central-1\n")
    assert aws_session(region=None, profile="lab").region_name == "ca-central-1"


def test_no_region_is_one_line_that_names_only_what_botocore_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # AWS_REGION set alone: botocore does not take it as the region, so the line must not tell anyone to set it.
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    with pytest.raises(NoRegion) as with_spec:
        aws_session(region=None, profile=None, spec=Spec(None))
    with pytest.raises(NoRegion) as without:
        aws_session(region=None, profile=None)
    configured = "set AWS_DEFAULT_REGION or `region` in the AWS config profile (botocore does not read AWS_REGION)"
    assert str(with_spec.value) == no_region(spec=True)
    assert no_region(spec=True) == f"no region: set `region` in the spec, pass --region, or {configured}"
    assert str(without.value) == no_region(spec=False) == f"no region: pass --region, or {configured}"


def test_every_client_of_the_session_retries_alike() -> None:
    session = aws_session(region="us-east-1", profile=None)
    for name in ("sts", "cloudformation", "ssm", "ec2"):
        config = session.client(name).meta.config
        assert config.retries == {"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}, name
        assert (config.connect_timeout, config.read_timeout) == (5, 20)
    # A caller's own configuration adds to the session's, never drops its retries.
    merged = session.client("sts", config=Config(read_timeout=60)).meta.config
    assert (merged.retries, merged.read_timeout) == (CLIENT_CONFIG.retries, 60)


def test_the_profile_is_the_sessions_and_a_missing_one_is_no_credentials(no_aws_settings: Path) -> None:
    no_aws_settings.write_text("[profile lab]\nregion = ca-central-1\n")
    session = aws_session(region="us-east-1", profile="lab")
    assert (session.profile_name, session.region_name) == ("lab", "us-east-1")
    with pytest.raises(NoCredentials) as missing:
        aws_session(region="us-east-1", profile="nope")
    assert str(missing.value).startswith("no AWS credentials (profile nope is not in the AWS config)")
