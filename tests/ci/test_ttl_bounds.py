"""`kiln ci up --ttl` is held to the bounds of ci.ttl_hours (kiln.catalog.limits), before anything is synthesized."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from kiln.catalog import limits
from kiln.cli.main import main
from tests.support.ci import SPEC


@pytest.fixture
def up_without_a_deploy(moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """`kiln ci up` in a moto account with the CDK CLI's version check stood in and synthesis recorded, not run."""
    synthesized: list[str] = []
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(SPEC)
    monkeypatch.setattr("kiln.ci.deploy.cdk_command", lambda environ, cwd: ["cdk"])
    monkeypatch.setattr("kiln.ci.deploy.check_cdk_version", lambda cdk, environ: None)
    monkeypatch.setattr(
        "kiln.stacks.synth.synthesize", lambda spec, out, ci=None, context=None: synthesized.append(str(ci))
    )
    monkeypatch.setattr("kiln.ci.deploy.deploy_stacks", lambda *args, **kwargs: pytest.fail("deployed"))
    yield synthesized


@pytest.mark.parametrize(("ttl", "words"), [("1m", "at least 0.5 hours"), ("29m", "at least"), ("31d", "at most 720")])
def test_a_ttl_out_of_bounds_is_one_line_before_synthesis(
    up_without_a_deploy: list[str], capsys: pytest.CaptureFixture[str], ttl: str, words: str
) -> None:
    argv = ["ci", "up", "--spec", "cluster.yaml", "--run-id", "7", "--skip-preflight", "--accept-unready"]
    assert main([*argv, "--ttl", ttl]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # One line, before preflight, synthesis or deploy.
    assert err == [err[-1]] and f"--ttl {ttl}: must be {words}" in err[-1], err
    assert "Traceback" not in "\n".join(err)
    assert up_without_a_deploy == []


def test_the_shortest_ttl_synthesizes(up_without_a_deploy: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["ci", "up", "--spec", "cluster.yaml", "--run-id", "7", "--skip-preflight", "--accept-unready"]
    with pytest.raises(pytest.fail.Exception, match="deployed"):
        main([*argv, "--ttl", f"{limits.MIN_TTL_HOURS * 60:g}m"])
    assert len(up_without_a_deploy) == 1 and "ttl_hours=0.5" in up_without_a_deploy[0]


@pytest.mark.parametrize(("ttl", "words"), [("1m", "at least 0.5 hours"), ("31d", "at most 720")])
def test_extend_holds_the_same_bounds_before_touching_the_schedule(
    moto: boto3.Session, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ttl: str, words: str
) -> None:
    monkeypatch.setattr(
        "kiln.ci.reaper_code.kiln_reaper.teardown.reschedule", lambda *args, **kwargs: pytest.fail("rescheduled")
    )
    code = main(["ci", "extend", "--environment", "quickstart-pr7", "--region", "us-east-1", "--ttl", ttl])
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"--ttl {ttl}: must be {words}" in line, line
