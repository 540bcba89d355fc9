"""Run a cluster's EC2 Image Builder pipeline once and follow the image it builds.

Image Builder takes an image through PENDING, CREATING, BUILDING, TESTING, DISTRIBUTING and INTEGRATING to
AVAILABLE, or ends it FAILED or CANCELLED. kiln polls GetImage and reports each change of state. The build runs in
AWS: when kiln stops waiting, the build goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiln.aws.errors import aws_call
from kiln.aws.remote.cluster import UNUSABLE_STACK_STATES
from kiln.ci.reaper_code.kiln_reaper.teardown import describe_stack
from kiln.contracts.errors import Failure
from kiln.contracts.image import image_stack_name
from kiln.contracts.outputs import ImageOutput

if TYPE_CHECKING:
    from kiln.aws.session import CloudFormationClient, ImagebuilderClient

AVAILABLE = "AVAILABLE"
IN_PROGRESS = ("PENDING", "CREATING", "BUILDING", "TESTING", "DISTRIBUTING", "INTEGRATING")
# Where Image Builder writes a build's log when the image names no log group of its own.
DEFAULT_LOG_GROUP_PREFIX = "/aws/imagebuilder/"


class ImageStackUnusable(Failure):
    """The image stack is missing, unfinished or without its pipeline; str() is one line naming what to do."""


@dataclass(frozen=True)
class BuiltAmi:
    """One AMI an image distributed: its region and id."""

    region: str
    image_id: str
    name: str = ""
    account_id: str = ""


@dataclass(frozen=True)
class BuildOutcome:
    """How following a build ended: AVAILABLE with its AMIs, FAILED or CANCELLED with why, or still running."""

    arn: str
    status: str
    elapsed_s: float
    amis: tuple[BuiltAmi, ...] = ()
    reason: str = ""
    logs: tuple[str, ...] = ()
    timed_out: bool = False

    @property
    def succeeded(self) -> bool:
        """Return whether the image is available with at least one AMI."""
        return self.status == AVAILABLE and bool(self.amis)

    def summary(self) -> str:
        """Return one line: the AMIs, or what went wrong and where to look."""
        if self.succeeded:
            where = ", ".join(f"{ami.image_id} in {ami.region}" for ami in self.amis)
            return f"{AVAILABLE} after {self.elapsed_s:.0f} s: {where}"
        if self.timed_out:
            return (
                f"{self.arn} is still {self.status} after {self.elapsed_s / 60:.0f} min; the build goes on in AWS: "
                f"`aws imagebuilder get-image --image-build-version-arn {self.arn}` follows it"
            )
        if self.status == AVAILABLE:
            return f"{self.arn} is {AVAILABLE} but lists no AMI in its output resources"
        logs = f"; logs: {', '.join(self.logs)}" if self.logs else ""
        return f"{self.arn} ended {self.status} after {self.elapsed_s:.0f} s: {self.reason or 'no reason given'}{logs}"

    def as_json(self) -> dict[str, Any]:
        """Return the outcome as plain data for --json."""
        return {
            "image_build_version_arn": self.arn,
            "status": self.status,
            "succeeded": self.succeeded,
            "timed_out": self.timed_out,
            "elapsed_seconds": round(self.elapsed_s),
            "amis": [
                {"region": a.region, "image_id": a.image_id, "name": a.name, "account_id": a.account_id}
                for a in self.amis
            ],
            "reason": self.reason,
            "logs": list(self.logs),
        }


def find_pipeline_arn(cloudformation: CloudFormationClient, *, cluster: str, region: str, spec_path: str) -> str:
    """Return the pipeline ARN among the outputs of CLUSTER's image stack, or raise ImageStackUnusable."""
    name = image_stack_name(cluster)
    deploy = f"`npx cdk deploy {name} -c spec={spec_path}`"
    with aws_call(f"cloudformation:DescribeStacks {name}"):
        stack = describe_stack(cloudformation, name)
    if stack is None:
        raise ImageStackUnusable(f"the image stack {name} is not deployed in {region}: run {deploy} first")
    status = stack.get("StackStatus", "")
    if status.startswith(UNUSABLE_STACK_STATES):
        raise ImageStackUnusable(f"the image stack {name} is {status} in {region}: {deploy} must finish first")
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
    arn = outputs.get(ImageOutput.PIPELINE_ARN.value, "")
    if not arn:
        raise ImageStackUnusable(
            f"the image stack {name} has no output {ImageOutput.PIPELINE_ARN.value}: redeploy it with {deploy}"
        )
    return str(arn)


def start_build(imagebuilder: ImagebuilderClient, pipeline_arn: str, *, client_token: str) -> str:
    """Start one run of the pipeline and return its image build version ARN.

    CLIENT_TOKEN makes the call idempotent: a retry of the same request does not start a second build.
    """
    with aws_call(f"imagebuilder:StartImagePipelineExecution {pipeline_arn}"):
        response = imagebuilder.start_image_pipeline_execution(imagePipelineArn=pipeline_arn, clientToken=client_token)
    return response["imageBuildVersionArn"]


def wait_for_image(
    imagebuilder: ImagebuilderClient,
    arn: str,
    *,
    timeout_s: float,
    progress: Callable[[str], None],
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> BuildOutcome:
    """Poll the image build ARN until it ends or TIMEOUT_S passes; PROGRESS gets one line per change of state."""
    started = clock()
    reported = None
    while True:
        with aws_call(f"imagebuilder:GetImage {arn}"):
            image = imagebuilder.get_image(imageBuildVersionArn=arn)["image"]
        state = image.get("state") or {}
        status = state.get("status", "UNKNOWN")
        elapsed = clock() - started
        if status != reported:
            progress(f"{elapsed:.0f} s: {status}")
            reported = status
        if status == AVAILABLE:
            return BuildOutcome(arn=arn, status=status, elapsed_s=elapsed, amis=distributed_amis(image))
        if status not in IN_PROGRESS:
            reason = " ".join(str(state.get("reason", "")).split())
            return BuildOutcome(arn=arn, status=status, elapsed_s=elapsed, reason=reason, logs=log_locations(image))
        remaining = timeout_s - elapsed
        if remaining <= 0:
            return BuildOutcome(arn=arn, status=status, elapsed_s=elapsed, timed_out=True)
        sleep(min(poll_s, remaining))


def distributed_amis(image: Mapping[str, Any]) -> tuple[BuiltAmi, ...]:
    """Return the AMIs in an image's output resources, one per distribution region."""
    amis = (image.get("outputResources") or {}).get("amis") or []
    return tuple(
        BuiltAmi(
            region=ami.get("region", ""),
            image_id=ami.get("image", ""),
            name=ami.get("name", ""),
            account_id=ami.get("accountId", ""),
        )
        for ami in amis
        if ami.get("image")
    )


def log_locations(image: Mapping[str, Any]) -> tuple[str, ...]:
    """Return where a build's logs are: its CloudWatch Logs group, and the S3 prefix when its infrastructure has one."""
    group = (image.get("loggingConfiguration") or {}).get("logGroupName")
    if not group:
        # Image Builder names the default group after the image, which is named after its recipe.
        name = (image.get("imageRecipe") or {}).get("name") or image.get("name")
        group = DEFAULT_LOG_GROUP_PREFIX + name if name else None
    found = [f"CloudWatch Logs group {group}"] if group else []
    s3 = ((image.get("infrastructureConfiguration") or {}).get("logging") or {}).get("s3Logs") or {}
    if s3.get("s3BucketName"):
        prefix = s3.get("s3KeyPrefix", "").strip("/")
        found.append(f"s3://{s3['s3BucketName']}/{prefix + '/' if prefix else ''}")
    return tuple(found)
