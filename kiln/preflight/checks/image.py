"""Can every node boot compute.image.ami_id: does it exist, is it available, of their architecture, small enough,
and does it boot from the device kiln maps the root volume to (kiln.preflight.root_device)?"""

from __future__ import annotations

from datetime import datetime, timezone

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.catalog import instance_type
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding, Status
from kiln.preflight.plan import Plan
from kiln.preflight.root_device import mismatch as root_device_mismatch

NAME = "image"
NOT_FOUND = ("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable")
CHOOSE = "set compute.image.ami_id to an available AMI"


def now() -> datetime:
    """Return the current time in UTC (tests replace it)."""
    return datetime.now(timezone.utc)


def describe(aws: AwsClients, ami_id: str) -> dict | None:
    """Return the image AMI_ID as EC2 describes it, or None when this account cannot see it."""
    try:
        found = aws.ec2.describe_images(ImageIds=[ami_id])
    except ClientError as error:
        if error_code(error) in NOT_FOUND:
            return None
        raise
    return next(iter(found["Images"]), None)


def root_gib(image: dict) -> int | None:
    """Return the size of the image's root volume snapshot in GiB, or None when its root is not EBS."""
    root = image.get("RootDeviceName")
    for mapping in image.get("BlockDeviceMappings", []):
        if mapping.get("DeviceName") == root and "Ebs" in mapping:
            return mapping["Ebs"].get("VolumeSize")
    return None


def _state(image: dict) -> tuple[Status, str, str] | None:
    """Return the problem of an image that is not available, or None."""
    state = image["State"]
    if state == "available":
        return None
    if state == "pending":
        return "warn", "is pending: EC2 is still creating it", "wait until it is available, then deploy"
    reason = image.get("StateReason", {}).get("Message")
    why = f" ({reason})" if reason else ""
    return "fail", f"is {state}{why}: EC2 cannot launch it", CHOOSE


def _architectures(plan: Plan, image: dict) -> tuple[Status, str, str] | None:
    """Return a failure naming every node that boots the image but whose instance type runs another architecture."""
    arch = image["Architecture"]
    booting = [(node, instance_type(node.instance_type).architectures) for node in plan.nodes if node.boots_ami]
    others = [(node, runs) for node, runs in booting if arch not in runs]
    if not others:
        return None
    nodes = ", ".join(f"{node.instance_type} ({node.role})" for node, _ in others)
    wanted = " or ".join(dict.fromkeys(name for _, runs in others for name in runs))
    return "fail", f"is {arch}, but {nodes} run {wanted} only", f"set compute.image.ami_id to an {wanted} AMI"


def _root(plan: Plan, image: dict) -> tuple[Status, str, str] | None:
    """Return a failure when the image's root snapshot is larger than the smallest root volume booting it."""
    size, smallest = root_gib(image), plan.smallest_root_gib
    if size is None or smallest is None or size <= smallest:
        return None
    return (
        "fail",
        f"has a {size} GiB root snapshot; the smallest root_volume_gib is {smallest} GiB and a volume cannot be "
        f"smaller than its snapshot",
        f"raise root_volume_gib to at least {size} in every group below it",
    )


def _deprecated(image: dict, at: datetime) -> tuple[Status, str, str] | None:
    """Return a warning when the image's deprecation time has passed."""
    text = image.get("DeprecationTime")
    if not text:
        return None
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    if when > at:
        return None
    return (
        "warn",
        f"was deprecated {when.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC: it still launches, but its owner "
        "no longer maintains it",
        "move compute.image.ami_id to a current image",
    )


def _summary(plan: Plan, image: dict) -> str:
    """Return what a bootable image is: name, architecture and root size."""
    name = image.get("Name") or "unnamed"
    size = root_gib(image)
    smallest = plan.smallest_root_gib
    fits = "" if size is None or smallest is None else f", root snapshot {size} GiB ≤ root_volume_gib {smallest}"
    return f"{name} is available, {image['Architecture']}{fits}"


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return one ok finding for an image every node boots, else one finding per problem."""
    if plan.ami_id is None:
        message = f"unset: nodes boot the {plan.backend} default image"
        return [Finding(check=NAME, status="ok", subject="compute.image.ami_id", message=message)]
    subject = f"compute.image.ami_id {plan.ami_id}"
    image = describe(aws, plan.ami_id)
    if image is None:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"does not exist in {plan.region} or is not shared with this account",
                remedy="correct compute.image.ami_id (AMIs are regional: copy it to this region or share it)",
            )
        ]
    problems = [
        _state(image),
        _architectures(plan, image),
        _root(plan, image),
        root_device_mismatch(plan, image),
        _deprecated(image, now()),
    ]
    findings = [
        Finding(check=NAME, status=status, subject=subject, message=message, remedy=remedy)
        for status, message, remedy in filter(None, problems)
    ]
    return findings or [Finding(check=NAME, status="ok", subject=subject, message=_summary(plan, image))]


CHECK = Check(name=NAME, about="the node image", run=check)
