"""Every kiln command that asks AWS says "no AWS credentials" in one wording, in one line, with its documented exit.

Each command runs in process, as `kiln` runs it, without credentials four ways: none anywhere, only part of a key
pair, AWS_PROFILE naming a profile that is not there, and keys AWS rejects (an expired session token). Nothing
leaves this machine: instance metadata is off, the AWS config files do not exist, and the rejecting AWS is a
patched botocore client that answers every call with ExpiredToken before anything is sent.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
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
from tests.support.credentials import MISSING_PROFILE, REMEDY, SITUATIONS
from tests.support.paths import ROOT
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

REGION = "us-east-1"
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
