"""`kiln ci` asks AWS in the region of kiln.aws.session's one rule: a --region other than the spec's is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from moto import mock_aws

from kiln.aws.session import no_region
from kiln.cli.main import main
from tests.support.fake_aws import REGION

SPEC = f"""\
name: ci-smoke
region: {REGION}
availability_zone: {REGION}a
compute:
  backend: pcs
  login_nodes: {{instance_type: m5.xlarge, count: 1}}
  groups:
    - {{name: gpu, instance_type: g5.12xlarge, min_count: 1, max_count: 2}}
"""


@pytest.fixture
def spec(aws_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(SPEC)
    return "cluster.yaml"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--run-id", "7", "--", "true"],
        ["down", "--run-id", "7"],
        ["extend", "--run-id", "7", "--ttl", "2h"],
    ],
    ids=["run", "down", "extend"],
)
def test_a_region_other_than_the_specs_is_refused(spec: str, capsys: pytest.CaptureFixture[str], argv: list) -> None:
    # Before, --region won silently: `kiln ci down` looked for the environment's stacks in another region.
    action, *rest = argv
    with mock_aws():
        code = main(["ci", action, "--spec", spec, "--region", "eu-west-1", *rest])
    refused = f"kiln ci {action}: --region eu-west-1: the spec deploys to {REGION}\n"
    assert (code, capsys.readouterr().err) == (2, refused)


def test_the_same_region_again_is_taken(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        assert main(["ci", "down", "--spec", spec, "--run-id", "7", "--region", REGION]) == 0
    assert f"ci-smoke-7: nothing to delete in {REGION}" in capsys.readouterr().err


def test_sweep_without_a_region_says_what_botocore_reads(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # AWS_REGION alone is no region to botocore: the line names AWS_DEFAULT_REGION and the profile's region instead.
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert main(["ci", "sweep"]) == 2
    assert capsys.readouterr().err == f"kiln ci sweep: {no_region(spec=False)}\n"
