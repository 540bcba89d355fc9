"""`kiln ci up/run/down/extend/sweep` end to end: boto3 against moto, the CDK CLI replaced by a recording stand-in."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto.server import ThreadedMotoServer

from kiln.cli.main import main
from kiln.contracts.environment import parse_at_expression
from kiln.preflight.run import all_checks as every_check
from tests.support.ci import SPEC, launch, live_stacks, make_environment, make_stack, put_versions, tags
from tests.support.fake_aws import ACCOUNT, REGION

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning"),
]

FAKE_CDK = Path(__file__).with_name("fake_cdk.py")
RUN_ID = "4242"
COMMAND_ID = "11111111-2222-3333-4444-555555555555"
ENV = f"ci-smoke-{RUN_ID}"
PARTS = ("reaper", "network", "storage", "compute")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """A moto server on loopback that the CLI and the CDK stand-in (another process) both talk to."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def pipeline(moto_server: str, aws_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pipeline step's environment: GitHub's run id and output file, the stand-in CDK, a fresh moto account."""
    reset = urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")  # noqa: S310 - loopback
    urllib.request.urlopen(reset).close()  # noqa: S310 - the moto server this module started
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("KILN_CDK", f"{sys.executable} {FAKE_CDK}")
    monkeypatch.setenv("FAKE_CDK_LOG", str(tmp_path / "cdk-calls.jsonl"))
    monkeypatch.setenv("GITHUB_RUN_ID", RUN_ID)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "github-output"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(SPEC)
    return tmp_path


def _cdk_calls(workdir: Path) -> list[list[str]]:
    log = workdir / "cdk-calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _session() -> boto3.Session:
    return boto3.Session(region_name=REGION)


def test_a_pipeline_brings_an_environment_up_extends_it_and_takes_it_down_twice(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    waited: list[dict] = []

    def ready(session: object, cluster: object, **options: object) -> None:
        waited.append({"cluster": cluster, **options})

    monkeypatch.setattr("kiln.ci.ready.wait_until_ready", ready)
    code = main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready", "--skip-preflight", "--outputs", "out.json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # One non-interactive deploy per stack, reaper first, against the synthesized assembly.
    calls = _cdk_calls(pipeline)
    assert [call[1] for call in calls] == [f"{ENV}-{part}" for part in PARTS]
    for call in calls:
        assert call[0] == "deploy" and "--exclusively" in call and "--ci" in call
        assert call[call.index("--require-approval") + 1] == "never"
        assert (Path(call[call.index("--app") + 1]) / "manifest.json").exists()
    assert live_stacks(_session()) == {f"{ENV}-{part}" for part in PARTS}
    # Progress on stderr with each stack's time; the outputs as JSON on stdout, in the file and for GitHub.
    for part in PARTS:
        assert f"{ENV}-{part}: deployed in " in captured.err
    result = json.loads(captured.out)
    assert result == json.loads((pipeline / "out.json").read_text())
    assert result["environment"] == ENV and result["region"] == REGION
    assert result["outputs"][f"{ENV}-compute"]["Backend"] == "pcs"
    github = (pipeline / "github-output").read_text().splitlines()
    assert f"environment={ENV}" in github and "compute-Backend=pcs" in github and f"region={REGION}" in github
    # It waited for the cluster: the static gpu node and the compute stack's outputs.
    assert waited and waited[0]["expected_nodes"] == {"gpu": 1}
    assert waited[0]["cluster"].outputs["ClusterName"] == ENV
    # The reaper's schedule is the TTL from deploy; extend moves it.
    scheduler = _session().client("scheduler")
    planned = parse_at_expression(scheduler.get_schedule(Name=f"{ENV}-reaper")["ScheduleExpression"])
    assert planned is not None and abs(planned - (datetime.now(timezone.utc) + timedelta(hours=2))) < timedelta(
        minutes=5
    )
    # A second up (a re-run of the job) updates the environment and keeps its deadline.
    assert main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready", "--skip-preflight", "--no-wait"]) == 0
    assert f"{ENV} exists since " in capsys.readouterr().err
    again = parse_at_expression(scheduler.get_schedule(Name=f"{ENV}-reaper")["ScheduleExpression"])
    # (its creation time is the reaper stack's, seconds after the first synthesis chose the deadline)
    assert again is not None and abs(again - planned) < timedelta(minutes=1)
    assert main(["ci", "extend", "--spec", "cluster.yaml", "--ttl", "6h"]) == 0
    moved = parse_at_expression(scheduler.get_schedule(Name=f"{ENV}-reaper")["ScheduleExpression"])
    assert moved is not None and moved - planned > timedelta(hours=3, minutes=50)
    # Data written during the run does not stop down; a second down finds nothing and says so.
    put_versions(_session(), f"{ENV}-data-{ACCOUNT}")
    capsys.readouterr()
    assert main(["ci", "down", "--spec", "cluster.yaml"]) == 0
    assert live_stacks(_session()) == set()
    assert f"{ENV}-storage: emptied bucket {ENV}-data-{ACCOUNT} (4 objects)" in capsys.readouterr().err
    assert main(["ci", "down", "--spec", "cluster.yaml"]) == 0
    assert f"{ENV}: nothing to delete in {REGION}" in capsys.readouterr().err


def test_an_up_that_fails_halfway_names_the_stack_and_down_removes_what_it_made(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_CDK_FAIL_STACK", f"{ENV}-storage")
    code = main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready", "--skip-preflight"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"kiln ci up: {ENV}-storage: deploy failed after " in err and "(cdk exit 1)" in err
    assert "Traceback" not in err
    assert [call[1] for call in _cdk_calls(pipeline)] == [f"{ENV}-reaper", f"{ENV}-network", f"{ENV}-storage"]
    # The reaper went first, so even a runner that dies now leaves an environment that deletes itself.
    assert live_stacks(_session()) == {f"{ENV}-reaper", f"{ENV}-network"}
    assert main(["ci", "down", "--spec", "cluster.yaml"]) == 0
    assert live_stacks(_session()) == set()
    assert main(["ci", "down", "--spec", "cluster.yaml"]) == 0


def test_up_refuses_a_cdk_cli_of_another_version_before_deploying(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    other = pipeline / "cdk"
    other.write_text("#!/bin/sh\necho '2.1000.0 (build old)'\n")
    other.chmod(0o755)
    monkeypatch.setenv("KILN_CDK", str(other))
    assert main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready", "--skip-preflight"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"kiln ci up: CDK CLI {other} is 2.1000.0, not the 2.1148.1 kiln is tested with")
    assert live_stacks(_session()) == set()


def test_up_runs_the_cdk_cli_with_the_profile_it_asks_aws_with(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --profile names the credentials of kiln's own calls and of the CDK CLI's deploys alike: AWS_PROFILE, without
    # the environment's keys (which the CDK CLI would prefer to it).
    Path(os.environ["AWS_CONFIG_FILE"]).write_text(
        "[profile lab]\naws_access_key_id = lab\naws_secret_access_key = x\n"
    )
    seen = pipeline / "cdk-env"
    cdk = pipeline / "cdk"
    cdk.write_text(f'#!/bin/sh\necho "$AWS_PROFILE ${{AWS_ACCESS_KEY_ID:-none}} $AWS_REGION" > {seen}\necho 2.0.0\n')
    cdk.chmod(0o755)
    monkeypatch.setenv("KILN_CDK", str(cdk))
    assert main(["ci", "up", "--spec", "cluster.yaml", "--profile", "lab", "--accept-unready", "--skip-preflight"]) == 1
    assert seen.read_text() == f"lab none {REGION}\n"
    assert "CDK CLI" in capsys.readouterr().err


def test_bad_input_is_one_line_and_exit_2(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (pipeline / "bad.yaml").write_text(SPEC.replace("ci: {ttl_hours: 2}", "ci: {ttl_hours: 2}\nstorage2: {}"))
    assert main(["ci", "up", "--spec", "bad.yaml"]) == 2
    assert "storage2" in capsys.readouterr().err
    assert main(["ci", "up", "--spec", "cluster.yaml", "--ttl", "soon"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kiln ci up: duration 'soon': give a positive number and a unit, e.g. 90m, 2h or 1d"
    )
    assert main(["ci", "extend", "--spec", "cluster.yaml", "--ttl", "4h"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kiln ci extend: {ENV}: no reaper schedule in {REGION} (deployed without a TTL?)"
    )
    assert main(["ci", "run", "--spec", "cluster.yaml"]) == 2
    assert "no command: kiln ci run --spec FILE -- CMD" in capsys.readouterr().err


def test_run_streams_the_output_and_returns_the_exit_code_of_a_failing_command(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(SPEC)
    outputs = {"Backend": "pcs", "Orchestrator": "slurm", "ClusterName": ENV, "PcsLoginNodeGroupId": "pcs_login1"}
    make_stack(moto, f"{ENV}-compute", tags(ENV, "compute"), outputs=outputs)
    instance = launch({"aws:pcs:compute-node-group-id": "pcs_login1"})
    ssm = boto3.client("ssm", region_name=REGION)
    stub = Stubber(ssm)
    stub.add_response("send_command", {"Command": {"CommandId": COMMAND_ID}}, {"InstanceIds": [instance], **ANY_SEND})
    invocation = {"CommandId": COMMAND_ID, "InstanceId": instance, "StandardErrorContent": ""}
    stub.add_response(
        "get_command_invocation",
        invocation
        | {"Status": "Failed", "StatusDetails": "Failed", "ResponseCode": 3, "StandardOutputContent": "loss nan\n"},
        {"CommandId": COMMAND_ID, "InstanceId": instance},
    )
    stub.activate()

    class StubbedSsm(boto3.Session):
        def client(self, service: str, *args: object, **kwargs: object) -> object:
            return ssm if service == "ssm" else super().client(service, *args, **kwargs)

    monkeypatch.setattr(boto3, "Session", StubbedSsm)
    code = main(["ci", "run", "--spec", "cluster.yaml", "--run-id", RUN_ID, "--", "sbatch", "--wait", "train.sbatch"])
    out, err = capsys.readouterr()
    assert code == 3
    assert "loss nan" in out
    assert f"running on PCS login node {instance}: sbatch --wait train.sbatch" in err and "exit 3" in err
    stub.assert_no_pending_responses()


ANY_SEND = {"DocumentName": "AWS-RunShellScript", "Comment": ANY, "Parameters": ANY}


def test_sweep_deletes_only_environments_past_their_time(
    moto: boto3.Session, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every stack is created now (moto's clock); the sweep runs three hours later.
    later = datetime.now(timezone.utc) + timedelta(hours=3)
    monkeypatch.setattr("kiln.cli.ci._now", lambda: later)
    make_environment(moto, "ci-a-1", ttl="2")  # TTL passed
    make_environment(moto, "ci-b-2", ttl="5")  # TTL not yet
    make_environment(moto, "ci-c-3", ttl=None)  # no TTL, older than --older-than
    make_environment(moto, "ci-d-4", ttl="2")  # TTL passed, but extended:
    moto.client("scheduler").create_schedule(
        Name="ci-d-4-reaper",
        ScheduleExpression=f"at({(later + timedelta(hours=1)):%Y-%m-%dT%H:%M:%S})",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:f", "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/r"},
    )
    make_stack(moto, "production-network", [{"Key": "kiln:cluster", "Value": "production"}])
    before = live_stacks(moto)
    assert main(["ci", "sweep", "--region", REGION, "--older-than", "2h", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert live_stacks(moto) == before
    assert "ci-a-1: would delete" in err and "TTL 2 h" in err
    assert "ci-c-3: would delete" in err and "no TTL; --older-than" in err
    assert "ci-b-2: kept" in err and "ci-d-4: kept" in err and "its reaper's schedule" in err
    assert "production" not in err
    assert main(["ci", "sweep", "--region", REGION, "--older-than", "2h"]) == 0
    left = live_stacks(moto)
    assert {s.rsplit("-", 1)[0] for s in left} == {"ci-b-2", "ci-d-4", "production"}


def _moto_answered_checks() -> tuple:
    """The preflight checks moto answers in full (it has no EC2 or FSx quotas and no capacity reservations)."""
    answered = ("services", "offerings", "subnet", "image", "bucket")
    return tuple(check for check in every_check() if check.name in answered)


def test_up_runs_preflight_first_and_deploys_when_it_passes(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("kiln.preflight.run.all_checks", _moto_answered_checks)
    assert main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready", "--no-wait"]) == 0
    err = capsys.readouterr().err
    assert f"preflight of {ENV} in {REGION}" in err
    assert f"cluster.yaml in {REGION}: ready (" in err
    # Preflight came before the first deploy.
    assert err.index("ready (") < err.index(f"{ENV}-reaper: deployed in ")
    assert [call[1] for call in _cdk_calls(pipeline)] == [f"{ENV}-{part}" for part in PARTS]


def test_up_stops_before_any_deploy_when_preflight_finds_a_blocker(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("kiln.preflight.run.all_checks", _moto_answered_checks)
    # Someone made the environment's data bucket by hand: CloudFormation could not create it.
    _session().client("s3").create_bucket(Bucket=f"{ENV}-data-{ACCOUNT}")
    assert main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready"]) == 1
    err = capsys.readouterr().err
    assert f"kiln ci up: preflight: FAIL      bucket: storage.bucket.name {ENV}-data-{ACCOUNT}: already exists" in err
    assert err.strip().splitlines()[-1] == (
        "kiln ci up: not deploying: fix the FAIL and UNCHECKED lines above, or pass --skip-preflight"
    )
    assert _cdk_calls(pipeline) == [] and live_stacks(_session()) == set()


def test_a_check_aws_cannot_answer_blocks_up_too(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # moto has no Service Quotas for EC2: the full preflight cannot prove the quota, so nothing deploys.
    assert main(["ci", "up", "--spec", "cluster.yaml", "--accept-unready"]) == 1
    assert "kiln ci up: preflight: UNCHECKED quotas: " in capsys.readouterr().err
    assert _cdk_calls(pipeline) == []
