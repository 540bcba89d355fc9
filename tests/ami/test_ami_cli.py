"""`kiln ami build/list` through kiln.cli.main: CloudFormation, EC2 and SSM in moto, Image Builder stubbed."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY

from kiln.aws.session import no_region
from kiln.cli.main import main
from tests.support.ami import (
    BUILD_ARN,
    CLUSTER,
    PIPELINE_ARN,
    RECIPE,
    baked_tags,
    deploy_image_stack,
    expect_states,
    image_state,
    register_ami,
    stubbed,
    use_clients,
    write_spec,
)
from tests.support.ci import Clock
from tests.support.fake_aws import REGION

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning"),
]

AMI = "ami-0fedcba9876543210"
# Where else boto3 looks for credentials: none of them may answer in the test without credentials.
OTHER_CREDENTIAL_SOURCES = (
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)
STARTED = {"requestId": "r-1", "clientToken": "token", "imageBuildVersionArn": BUILD_ARN}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The CLI's clock and sleep, moved only by sleeping, so waits take no time."""
    fake = Clock()
    monkeypatch.setattr("kiln.cli.ami._clock", fake)
    monkeypatch.setattr("kiln.cli.ami._sleep", fake.sleep)
    return fake


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_spec(tmp_path)


def build(*extra: str) -> int:
    return main(["ami", "build", "--spec", "cluster.yaml", *extra])


def stub_imagebuilder(monkeypatch: pytest.MonkeyPatch, *states: dict) -> object:
    """Stub Image Builder for the CLI: one start of PIPELINE_ARN with a client token, then STATES."""
    client, stub = stubbed("imagebuilder")
    stub.add_response("start_image_pipeline_execution", STARTED, {"imagePipelineArn": PIPELINE_ARN, "clientToken": ANY})
    expect_states(stub, *states)
    stub.activate()
    use_clients(monkeypatch, imagebuilder=client)
    return stub


def test_build_runs_the_pipeline_and_prints_the_ami(
    aws: boto3.Session, spec: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    states = [image_state(s) for s in ("PENDING", "BUILDING", "BUILDING", "TESTING", "DISTRIBUTING")]
    stub = stub_imagebuilder(monkeypatch, *states, image_state("AVAILABLE", amis=(AMI,)))
    code = build("--poll-seconds", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == f"{AMI}\n"
    assert err.splitlines() == [
        f"kiln ami build: started {BUILD_ARN}",
        "kiln ami build: 0 s: PENDING",
        "kiln ami build: 60 s: BUILDING",
        "kiln ami build: 180 s: TESTING",
        "kiln ami build: 240 s: DISTRIBUTING",
        "kiln ami build: 300 s: AVAILABLE",
        f"kiln ami build: AVAILABLE after 300 s: {AMI} in {REGION}",
        f"kiln ami build: /kiln/{CLUSTER}/image-id names the newest AMI; deploy {CLUSTER}-compute for its nodes "
        "to boot it",
    ]
    stub.assert_no_pending_responses()


def test_build_json_gives_the_amis(
    aws: boto3.Session, spec: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    stub_imagebuilder(monkeypatch, image_state("AVAILABLE", amis=(AMI,)))
    assert build("--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["succeeded"] is True and result["status"] == "AVAILABLE"
    assert result["image_build_version_arn"] == BUILD_ARN
    assert result["amis"] == [{"region": REGION, "image_id": AMI, "name": f"{RECIPE} 3", "account_id": "123456789012"}]


def test_a_failed_build_exits_1_with_the_reason_and_the_logs(
    aws: boto3.Session, spec: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    failed = image_state("FAILED", reason="Step install_nvidia failed", s3_logs=("t-logs", "builds"))
    stub_imagebuilder(monkeypatch, image_state("BUILDING"), failed)
    code = build()
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == (
        f"kiln ami build: {BUILD_ARN} ended FAILED after 30 s: Step install_nvidia failed; "
        f"logs: CloudWatch Logs group /aws/imagebuilder/{RECIPE}, s3://t-logs/builds/"
    )
    assert "Traceback" not in err


def test_a_cancelled_build_exits_1_and_json_says_why(
    aws: boto3.Session, spec: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    stub_imagebuilder(monkeypatch, image_state("CANCELLED", reason="Cancelled by admin"))
    assert build("--json") == 1
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "CANCELLED" and result["reason"] == "Cancelled by admin" and result["amis"] == []
    assert result["logs"] == [f"CloudWatch Logs group /aws/imagebuilder/{RECIPE}"]


def test_a_build_that_outlasts_the_timeout_exits_1_and_goes_on(
    aws: boto3.Session, spec: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    stub = stub_imagebuilder(monkeypatch, *(image_state("BUILDING") for _ in range(3)))
    assert build("--timeout", "1", "--poll-seconds", "30") == 1
    err = capsys.readouterr().err
    assert clock.now == 60
    assert err.splitlines()[-1] == (
        f"kiln ami build: {BUILD_ARN} is still BUILDING after 1 min; the build goes on in AWS: "
        f"`aws imagebuilder get-image --image-build-version-arn {BUILD_ARN}` follows it"
    )
    stub.assert_no_pending_responses()


def test_no_wait_prints_the_build_version_and_returns(
    aws: boto3.Session, spec: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy_image_stack(aws)
    stub = stub_imagebuilder(monkeypatch)
    assert build("--no-wait") == 0
    assert capsys.readouterr().out == f"{BUILD_ARN}\n"
    stub = stub_imagebuilder(monkeypatch)
    assert build("--no-wait", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"image_build_version_arn": BUILD_ARN}
    stub.assert_no_pending_responses()


def test_build_without_the_image_stack_says_how_to_deploy_it(
    aws: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, region="eu-west-1")
    assert build() == 1
    assert capsys.readouterr().err == (
        f"kiln ami build: the image stack {CLUSTER}-image is not deployed in eu-west-1: "
        f"run `npx cdk deploy {CLUSTER}-image -c spec=cluster.yaml` first\n"
    )


@pytest.mark.parametrize(
    ("spec_region", "flag", "expected"),
    [
        (None, [], REGION),
        ("eu-central-1", [], "eu-central-1"),
        ("eu-central-1", ["--region", "eu-central-1"], "eu-central-1"),
        (None, ["--region", "ap-south-1"], "ap-south-1"),
    ],
)
def test_the_region_is_the_specs_else_the_flags_else_the_aws_default(
    aws: boto3.Session,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spec_region: str | None,
    flag: list[str],
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, region=spec_region)
    assert build(*flag) == 1
    assert f"is not deployed in {expected}:" in capsys.readouterr().err


def test_build_refuses_a_spec_that_does_not_bake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, bake=False)
    assert build() == 2
    assert capsys.readouterr().err == (
        f"kiln ami build: cluster.yaml: compute.image.bake is not true, so {CLUSTER} has no image pipeline to run: "
        "set it (and deploy the image stack) to bake an AMI\n"
    )


def test_build_reports_a_bad_spec_one_line_per_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text("name: t\ncompute:\n  backend: slurm\n  groups: []\n  imag: {}\n")
    assert build() == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) >= 2 and all(line.startswith("cluster.yaml:") for line in lines)
    assert "compute.backend" in err and "imag" in err and "Traceback" not in err


def test_build_needs_a_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    write_spec(tmp_path, region=None)
    assert build() == 2
    assert capsys.readouterr().err == f"kiln ami build: {no_region(spec=True)}\n"


@pytest.mark.parametrize("action", ["build", "list"])
def test_a_region_other_than_the_specs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    # Before, --region won silently: `kiln ami build` ran the pipeline of another region than the spec's.
    monkeypatch.chdir(tmp_path)
    write_spec(tmp_path, region="eu-central-1")
    assert main(["ami", action, "--spec", "cluster.yaml", "--region", "ap-south-1"]) == 2
    assert capsys.readouterr().err == f"kiln ami {action}: --region ap-south-1: the spec deploys to eu-central-1\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ThrottlingException", "was throttled by AWS (ThrottlingException) even after retries: wait a minute"),
        ("AccessDeniedException", "was denied (AccessDeniedException): allow it for the AWS identity running kiln"),
    ],
)
def test_a_refused_start_is_one_line_naming_the_call(
    aws: boto3.Session,
    spec: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: str,
    expected: str,
) -> None:
    deploy_image_stack(aws)
    client, stub = stubbed("imagebuilder")
    stub.add_client_error("start_image_pipeline_execution", code, "refused", 400)
    stub.activate()
    use_clients(monkeypatch, imagebuilder=client)
    assert build() == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kiln ami build: imagebuilder:StartImagePipelineExecution {PIPELINE_ARN} {expected}")
    assert len(err.splitlines()) == 1


def test_no_credentials_is_the_one_line_every_command_prints(
    spec: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    # No instance metadata or container credentials either: nothing may leave this machine.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in OTHER_CREDENTIAL_SOURCES:
        monkeypatch.delenv(name, raising=False)
    assert build() == 1
    assert capsys.readouterr().err == (
        "kiln ami build: no AWS credentials: set or refresh them (environment, profile, SSO or instance role) for "
        "the account to use\n"
    )


def test_timeout_and_poll_seconds_must_be_positive(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build("--timeout", "0")
    assert exited.value.code == 2
    assert "--timeout: must be greater than 0, got 0" in capsys.readouterr().err


# kiln ami list


def test_list_shows_the_clusters_images_newest_first_with_the_one_in_use(
    aws: boto3.Session, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import datetime, timezone

    old = register_ami(aws, baked_tags(), created=datetime(2025, 5, 1, tzinfo=timezone.utc))
    new = register_ami(aws, baked_tags(), created=datetime(2025, 6, 1, tzinfo=timezone.utc))
    register_ami(aws, baked_tags("other"), created=datetime(2025, 7, 1, tzinfo=timezone.utc))
    aws.client("ssm").put_parameter(Name=f"/kiln/{CLUSTER}/image-id", Value=old, Type="String")
    assert main(["ami", "list", "--spec", "cluster.yaml"]) == 0
    out, err = capsys.readouterr()
    header, first, second = out.splitlines()
    assert header.startswith("AMI") and first.startswith(new) and second.startswith(old)
    assert "in use" in second and "in use" not in first and err == ""
    assert main(["ami", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["cluster"] for entry in listed] == ["other", CLUSTER, CLUSTER]
    assert [entry["in_use"] for entry in listed] == [False, False, True]
    assert listed[2]["tags"]["kiln:pin:nvidia_driver_version"] == "570.172.08"


def test_list_of_a_cluster_without_images_says_so(aws: boto3.Session, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ami", "list", "--cluster", "nobody"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == f"kiln ami list: no AMIs kiln baked for nobody in {REGION}\n"
    assert main(["ami", "list", "--cluster", "nobody", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_list_notes_a_parameter_it_may_not_read(
    aws: boto3.Session, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register_ami(aws, baked_tags())
    ssm, stub = stubbed("ssm")
    stub.add_client_error("get_parameter", "AccessDeniedException", "no", 400)
    stub.activate()
    use_clients(monkeypatch, ssm=ssm)
    assert main(["ami", "list", "--cluster", CLUSTER]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "in use" not in out
    assert err.startswith(f"kiln ami list: note: ssm:GetParameter /kiln/{CLUSTER}/image-id was denied")
    assert err.endswith(f"the AMI {CLUSTER} uses is not marked\n")


def test_list_needs_a_region(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert main(["ami", "list"]) == 2
    assert capsys.readouterr().err == f"kiln ami list: {no_region(spec=False)}\n"


def test_list_with_describe_images_denied_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ec2, stub = stubbed("ec2")
    stub.add_client_error("describe_images", "UnauthorizedOperation", "You are not authorized", 403)
    stub.activate()
    use_clients(monkeypatch, ec2=ec2)
    assert main(["ami", "list", "--region", REGION]) == 1
    assert capsys.readouterr().err == (
        "kiln ami list: ec2:DescribeImages was denied (UnauthorizedOperation): allow it for the AWS identity "
        "running kiln; AWS said: You are not authorized\n"
    )
