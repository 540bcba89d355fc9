"""`kiln preflight` through kiln's command line, against moto."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from moto import mock_aws

from kiln.cli.main import main
from kiln.preflight import run
from tests.support.preflight import BASE_SPEC, merged

# What moto answers in full; it has no Service Quotas for EC2 or FSx and no capacity reservations.
MOTO_ANSWERS = ("services", "offerings", "subnet", "image", "bucket")


@pytest.fixture
def spec_file(tmp_path: Path, aws_env: None) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(BASE_SPEC))
    return path


@pytest.fixture
def moto_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    every = run.all_checks()
    monkeypatch.setattr(run, "all_checks", lambda: tuple(c for c in every if c.name in MOTO_ANSWERS))


def test_a_ready_account_prints_a_line_per_finding_and_exits_0(spec_file, moto_answered, capsys) -> None:
    with mock_aws():
        assert main(["preflight", "--spec", str(spec_file)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith(f"kiln preflight: {spec_file} in us-east-1: ready (")
    checks = {line.split()[1].rstrip(":") for line in lines[:-1]}
    assert checks == set(MOTO_ANSWERS)
    assert all(line.startswith("OK ") for line in lines[:-1])


def test_what_aws_will_not_answer_makes_it_not_ready(spec_file, capsys) -> None:
    with mock_aws():
        assert main(["preflight", "--spec", str(spec_file)]) == 1
    out = capsys.readouterr().out
    assert "UNCHECKED quotas: " in out and "NOT ready" in out.strip().splitlines()[-1]
    assert "Traceback" not in out


def test_json_is_the_whole_report(spec_file, moto_answered, capsys) -> None:
    with mock_aws():
        assert main(["preflight", "--spec", str(spec_file), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ready"] is True and document["region"] == "us-east-1"
    assert {f["check"] for f in document["findings"]} == set(MOTO_ANSWERS)
    assert document["seconds"] >= 0


def test_a_failing_finding_exits_1(tmp_path, aws_env, moto_answered, capsys) -> None:
    path = tmp_path / "far.yaml"
    path.write_text(yaml.safe_dump(merged(BASE_SPEC, {"region": "ap-east-1", "availability_zone": "ap-east-1a"})))
    with mock_aws():
        assert main(["preflight", "--spec", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL      services: AWS Parallel Computing Service: not offered in ap-east-1; choose a region" in out


@pytest.mark.parametrize(
    ("arguments", "spec", "message"),
    [
        (["--skip", "nope"], BASE_SPEC, "kiln preflight: --skip nope: no such check; the checks are services"),
        (["--region", "eu-west-1"], BASE_SPEC, "kiln preflight: --region eu-west-1: the spec deploys to us-east-1"),
        ([], merged(BASE_SPEC, {"region": None, "availability_zone": None}), "kiln preflight: no region: "),
        ([], merged(BASE_SPEC, {"compute": {"backend": "slurm"}}), "compute.backend"),
    ],
    ids=["unknown-skip", "other-region", "no-region", "bad-spec"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, aws_env, monkeypatch, capsys, arguments, spec, message) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    with mock_aws():
        assert main(["preflight", "--spec", str(path), *arguments]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert "Traceback" not in captured.err


def test_no_credentials_is_one_line_and_exit_1(spec_file, monkeypatch, capsys) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["preflight", "--spec", str(spec_file)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kiln preflight: no AWS credentials: set or refresh them")
    assert "\n" not in err
