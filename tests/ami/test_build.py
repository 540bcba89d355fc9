"""kiln.ami.build: the image stack's pipeline from CloudFormation (moto), the build followed through Stubber."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from kiln.ami.build import (
    BuildOutcome,
    ImageStackUnusable,
    find_pipeline_arn,
    log_locations,
    start_build,
    wait_for_image,
)
from kiln.aws.errors import AwsCallFailed
from tests.support.ami import (
    BUILD_ARN,
    CLUSTER,
    PIPELINE_ARN,
    RECIPE,
    deploy_image_stack,
    expect_states,
    image_state,
    stubbed,
)
from tests.support.ci import Clock
from tests.support.fake_aws import REGION

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning")

AMI = "ami-0fedcba9876543210"
IDEMPOTENCY_KEY = "3d0c54f1-kiln-ami-build"


def follow(client: Any, *, timeout_s: float = 3600, poll_s: float = 30) -> tuple[BuildOutcome, list[str], Clock]:
    """Follow BUILD_ARN on a clock that moves only when the wait sleeps; return the outcome, progress and clock."""
    lines: list[str] = []
    clock = Clock()
    outcome = wait_for_image(
        client, BUILD_ARN, timeout_s=timeout_s, poll_s=poll_s, progress=lines.append, clock=clock, sleep=clock.sleep
    )
    return outcome, lines, clock


def test_a_build_is_followed_to_its_ami_with_one_line_per_change_of_state() -> None:
    client, stub = stubbed("imagebuilder")
    states = ["PENDING", "PENDING", "CREATING", "BUILDING", "BUILDING", "TESTING", "DISTRIBUTING", "INTEGRATING"]
    expect_states(stub, *(image_state(status) for status in states), image_state("AVAILABLE", amis=(AMI,)))
    with stub:
        outcome, lines, clock = follow(client)
    assert outcome.succeeded and [ami.image_id for ami in outcome.amis] == [AMI]
    assert outcome.amis[0].region == REGION
    assert lines == [
        "0 s: PENDING",
        "60 s: CREATING",
        "90 s: BUILDING",
        "150 s: TESTING",
        "180 s: DISTRIBUTING",
        "210 s: INTEGRATING",
        "240 s: AVAILABLE",
    ]
    assert clock.slept == [30] * 8
    assert outcome.summary() == f"AVAILABLE after 240 s: {AMI} in {REGION}"
    stub.assert_no_pending_responses()


def test_a_failed_build_gives_its_reason_and_where_its_logs_are() -> None:
    client, stub = stubbed("imagebuilder")
    failed = image_state(
        "FAILED",
        reason="Image build failed: step install_efa\n exited 1",
        s3_logs=("t-logs-123456789012", "/imagebuilder/"),
    )
    expect_states(stub, image_state("BUILDING"), failed)
    with stub:
        outcome, lines, _ = follow(client)
    assert not outcome.succeeded and outcome.status == "FAILED"
    assert lines == ["0 s: BUILDING", "30 s: FAILED"]
    assert outcome.reason == "Image build failed: step install_efa exited 1"
    assert outcome.logs == (
        f"CloudWatch Logs group /aws/imagebuilder/{RECIPE}",
        "s3://t-logs-123456789012/imagebuilder/",
    )
    summary = outcome.summary()
    assert summary.startswith(f"{BUILD_ARN} ended FAILED after 30 s: Image build failed: step install_efa exited 1")
    assert summary.endswith(
        f"logs: CloudWatch Logs group /aws/imagebuilder/{RECIPE}, s3://t-logs-123456789012/imagebuilder/"
    )
    assert "\n" not in summary


def test_a_cancelled_build_ends_the_wait_without_an_ami() -> None:
    client, stub = stubbed("imagebuilder")
    expect_states(stub, image_state("CANCELLED", reason="Cancelled by user"))
    with stub:
        outcome, lines, clock = follow(client)
    assert outcome.status == "CANCELLED" and not outcome.succeeded and not outcome.timed_out
    assert lines == ["0 s: CANCELLED"] and clock.slept == []
    assert "ended CANCELLED after 0 s: Cancelled by user; logs: CloudWatch Logs group" in outcome.summary()


def test_the_wait_gives_up_at_the_timeout_and_says_the_build_goes_on() -> None:
    client, stub = stubbed("imagebuilder")
    expect_states(stub, *(image_state("BUILDING") for _ in range(4)))
    with stub:
        outcome, lines, clock = follow(client, timeout_s=100, poll_s=40)
    assert outcome.timed_out and outcome.status == "BUILDING" and not outcome.succeeded
    # It never sleeps past the deadline, and looks once more at it.
    assert clock.slept == [40, 40, 20] and lines == ["0 s: BUILDING"]
    assert outcome.summary() == (
        f"{BUILD_ARN} is still BUILDING after 2 min; the build goes on in AWS: "
        f"`aws imagebuilder get-image --image-build-version-arn {BUILD_ARN}` follows it"
    )
    stub.assert_no_pending_responses()


def test_an_available_image_without_an_ami_is_not_a_success() -> None:
    client, stub = stubbed("imagebuilder")
    expect_states(stub, image_state("AVAILABLE"))
    with stub:
        outcome, _, _ = follow(client)
    assert not outcome.succeeded
    assert outcome.summary() == f"{BUILD_ARN} is AVAILABLE but lists no AMI in its output resources"


def test_logs_are_in_the_images_own_log_group_when_it_names_one_and_s3_only_when_configured() -> None:
    image = image_state("FAILED", log_group="/kiln/t/image-builds")["image"]
    assert log_locations(image) == ("CloudWatch Logs group /kiln/t/image-builds",)
    image = image_state("FAILED", s3_logs=("logs", ""))["image"]
    assert log_locations(image)[1] == "s3://logs/"


def test_polling_errors_are_one_line_naming_the_call() -> None:
    client, stub = stubbed("imagebuilder")
    stub.add_client_error("get_image", "ThrottlingException", "Rate exceeded", 400)
    with stub, pytest.raises(AwsCallFailed) as raised:
        follow(client)
    assert str(raised.value) == (
        f"imagebuilder:GetImage {BUILD_ARN} was throttled by AWS (ThrottlingException) even after retries: "
        "wait a minute and run again"
    )


def test_a_build_starts_with_a_client_token_and_returns_its_build_version() -> None:
    client, stub = stubbed("imagebuilder")
    stub.add_response(
        "start_image_pipeline_execution",
        {"requestId": "r-1", "clientToken": IDEMPOTENCY_KEY, "imageBuildVersionArn": BUILD_ARN},
        {"imagePipelineArn": PIPELINE_ARN, "clientToken": IDEMPOTENCY_KEY},
    )
    with stub:
        assert start_build(client, PIPELINE_ARN, client_token=IDEMPOTENCY_KEY) == BUILD_ARN


def test_an_access_denied_start_is_one_line_naming_the_call() -> None:
    client, stub = stubbed("imagebuilder")
    stub.add_client_error("start_image_pipeline_execution", "AccessDeniedException", "not authorized", 403)
    with stub, pytest.raises(AwsCallFailed) as raised:
        start_build(client, PIPELINE_ARN, client_token=IDEMPOTENCY_KEY)
    assert str(raised.value).startswith(
        f"imagebuilder:StartImagePipelineExecution {PIPELINE_ARN} was denied (AccessDeniedException): "
    )


def test_the_pipeline_comes_from_the_image_stacks_outputs(aws: boto3.Session) -> None:
    deploy_image_stack(aws)
    found = find_pipeline_arn(aws.client("cloudformation"), cluster=CLUSTER, region=REGION, spec_path="c.yaml")
    assert found == PIPELINE_ARN


def test_an_image_stack_that_is_not_deployed_says_how_to_deploy_it(aws: boto3.Session) -> None:
    with pytest.raises(ImageStackUnusable) as raised:
        find_pipeline_arn(aws.client("cloudformation"), cluster=CLUSTER, region=REGION, spec_path="c.yaml")
    assert str(raised.value) == (
        f"the image stack {CLUSTER}-image is not deployed in {REGION}: "
        f"run `npx cdk deploy {CLUSTER}-image -c spec=c.yaml` first"
    )


def test_an_image_stack_without_the_pipeline_output_asks_for_a_redeploy(aws: boto3.Session) -> None:
    deploy_image_stack(aws, PipelineArn="")
    with pytest.raises(
        ImageStackUnusable, match=r"has no output PipelineArn: redeploy it with `npx cdk deploy t-image"
    ):
        find_pipeline_arn(aws.client("cloudformation"), cluster=CLUSTER, region=REGION, spec_path="c.yaml")


def test_an_image_stack_still_being_created_is_not_used() -> None:
    client, stub = stubbed("cloudformation")
    stack = {"StackName": "t-image", "CreationTime": "2025-01-01T00:00:00Z", "StackStatus": "CREATE_IN_PROGRESS"}
    stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "t-image"})
    with stub, pytest.raises(ImageStackUnusable, match=r"t-image is CREATE_IN_PROGRESS in us-east-1: `npx cdk deploy"):
        find_pipeline_arn(client, cluster=CLUSTER, region=REGION, spec_path="c.yaml")


def test_a_throttled_describe_stacks_is_one_line_naming_the_call() -> None:
    client, stub = stubbed("cloudformation")
    stub.add_client_error("describe_stacks", "Throttling", "Rate exceeded", 400)
    with stub, pytest.raises(AwsCallFailed, match=r"^cloudformation:DescribeStacks t-image was throttled by AWS"):
        find_pipeline_arn(client, cluster=CLUSTER, region=REGION, spec_path="c.yaml")
