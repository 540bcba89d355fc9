"""Every kiln command that asks AWS says "no AWS credentials" in one wording, in one line, with its documented exit.

Each command runs in process, as `kiln` runs it, without credentials four ways: none anywhere, only part of a key
pair, AWS_PROFILE naming a profile that is not there, and keys AWS rejects (an expired session token). Nothing
leaves this machine: instance metadata is off, the AWS config files do not exist, and the rejecting AWS is a
patched botocore client that answers every call with ExpiredToken before anything is sent.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.client import BaseClient
from botocore.exceptions import ClientError, NoCredentialsError

from kiln.aws.errors import (
    NoCredentials,
    credentials_wording,
    explain,
    is_credentials_error,
    no_credentials,
    raise_if_no_credentials,
)
from kiln.cli.main import main
from tests.conftest import MINIMAL_SPEC, ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

REGION = "us-east-1"
MISSING_PROFILE = "kiln-test-no-such-profile"
REMEDY = "set or refresh them (environment, profile, SSO or instance role) for the account to use"
BOTOCORE_WORDS = "Unable to locate credentials"
PROGRESS = re.compile(r"kiln ci [a-z]+: \[ *\d+ s\] ")

# Command line (SPEC, BAKING and HYPERPOD stand for spec files, OUT for an output file), exit code as documented in
# each command's --help, and what it offers instead of AWS, if anything.
COMMANDS: dict[str, tuple[list[str], int, str]] = {
    "kiln preflight": (["preflight", "--spec", "SPEC"], 1, ""),
    "kiln leftovers": (["leftovers", "--spec", "SPEC"], 1, ""),
    "kiln diff": (
        ["diff", "--spec", "SPEC"],
        2,
        ", or compare offline with --before OLD.yaml or --stack-templates DIR",
    ),
    "kiln ci up": (["ci", "up", "--spec", "SPEC", "--run-id", "7"], 1, ""),
    "kiln ci run": (["ci", "run", "--environment", "t-7", "--region", REGION, "--", "true"], 1, ""),
    "kiln ci down": (["ci", "down", "--environment", "t-7", "--region", REGION], 1, ""),
    "kiln ci sweep": (["ci", "sweep", "--region", REGION], 1, ""),
    "kiln ci extend": (["ci", "extend", "--environment", "t-7", "--region", REGION, "--ttl", "2h"], 1, ""),
    "kiln ami build": (["ami", "build", "--spec", "BAKING"], 1, ""),
    "kiln ami list": (["ami", "list", "--region", REGION], 1, ""),
    "kiln hyperpod update-software": (["hyperpod", "update-software", "--spec", "HYPERPOD"], 1, ""),
    "kiln catalog refresh": (
        ["catalog", "refresh", "--region", REGION, "--out", "OUT"],
        1,
        ", or use --source moto, offline",
    ),
}

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


def _spec_files(directory: Path) -> dict[str, str]:
    """Write the specs the commands read; return each placeholder's path."""
    baking = copy.deepcopy(MINIMAL_SPEC)
    baking["compute"]["image"] = {"ami_id": "ami-0123456789abcdef0", "bake": True}
    files = {"SPEC": MINIMAL_SPEC, "BAKING": baking}
    paths = {}
    for name, data in files.items():
        path = directory / f"{name.lower()}.yaml"
        path.write_text(yaml.safe_dump(data))
        paths[name] = str(path)
    hyperpod = directory / "hyperpod.yaml"
    hyperpod.write_text((ROOT / "examples" / "p5-hyperpod-slurm.yaml").read_text())
    paths["HYPERPOD"] = str(hyperpod)
    paths["OUT"] = str(directory / "instance-types.json")
    return paths


@pytest.mark.parametrize("situation", sorted(SITUATIONS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_says_no_credentials_in_one_wording(
    command: str,
    situation: str,
    no_credentials_env: Callable[[str], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, exit_code, otherwise = COMMANDS[command]
    paths = _spec_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    no_credentials_env(situation)
    if situation == "profile-flag":
        words = len(command.split()) - 1  # `kiln ci up`: the flag goes after `ci up`
        argv = [*argv[:words], "--profile", MISSING_PROFILE, *argv[words:]]
    code = main([paths.get(word, word) for word in argv])
    out, err = capsys.readouterr()
    line = rf"{re.escape(command)}: no AWS credentials{SITUATIONS[situation]}: {re.escape(REMEDY + otherwise)}"
    # `kiln ci` prints its progress as it goes ("kiln ci up: [     3 s] preflight of ..."): the failure is one line.
    said = [said for said in err.splitlines() if not PROGRESS.match(said)]
    assert len(said) == 1 and re.fullmatch(line, said[0]), err
    assert (code, out) == (exit_code, "")
    assert BOTOCORE_WORDS not in err and "Traceback" not in err
    assert not Path(paths["OUT"]).exists()


def test_the_wording_is_one_function_of_the_reason() -> None:
    missing = NoCredentialsError()
    assert no_credentials("kiln x", missing) == f"kiln x: no AWS credentials: {REMEDY}"
    assert no_credentials("kiln x") == no_credentials("kiln x", missing) == f"kiln x: {credentials_wording(missing)}"
    assert str(NoCredentials(missing)) == credentials_wording(missing)
    assert no_credentials("kiln x", NoCredentials(missing), otherwise="stay offline").endswith(", or stay offline")


@pytest.mark.parametrize(
    "code", ["ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException"]
)
def test_rejected_credentials_read_the_same_after_a_call_name(code: str) -> None:
    error = ClientError({"Error": {"Code": code, "Message": "nope"}}, "GetCallerIdentity")
    assert is_credentials_error(error)
    assert explain("sts:GetCallerIdentity", error) == (
        f"no AWS credentials (AWS rejected those found: {code} on GetCallerIdentity): {REMEDY}"
    )
    with pytest.raises(NoCredentials) as raised:
        raise_if_no_credentials(error)
    assert raised.value.error is error


def test_other_refusals_are_not_credentials() -> None:
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DescribeStacks")
    skewed = ClientError({"Error": {"Code": "RequestExpired", "Message": "late"}}, "DescribeStacks")
    assert not is_credentials_error(denied) and not is_credentials_error(skewed)
    raise_if_no_credentials(denied)
    assert "clock" in explain("cloudformation:DescribeStacks", skewed)
