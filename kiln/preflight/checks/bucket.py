"""What a deploy does with the data bucket's fixed name (create it, update it, attach it, or fail), and does the data
repository bucket exist?"""

from __future__ import annotations

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "bucket"
# CloudFormation tags what it creates with its stack's name and id (aws: tags, which no user can set or change).
STACK_TAG = "aws:cloudformation:stack-name"
STACK_ID_TAG = "aws:cloudformation:stack-id"
# CDK tags a bucket whose stack empties it before deleting it (retain: false).
AUTO_DELETE_TAG = "aws-cdk:auto-delete-objects"
MISSING = ("404", "NoSuchBucket", "NotFound")
FORBIDDEN = ("403", "AccessDenied")
GONE = "DELETE_COMPLETE"


def _head(aws: AwsClients, bucket: str) -> str:
    """Return 'exists', 'missing' or 'forbidden' for BUCKET; other errors propagate."""
    try:
        aws.s3.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = error_code(error)
        if code in MISSING:
            return "missing"
        if code in FORBIDDEN:
            return "forbidden"
        raise
    return "exists"


def _tags(aws: AwsClients, bucket: str) -> dict[str, str]:
    """Return BUCKET's tags (none: an empty dict)."""
    try:
        tags = aws.s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
    except ClientError as error:
        if error_code(error) == "NoSuchTagSet":
            return {}
        raise
    return {tag["Key"]: tag["Value"] for tag in tags}


def stack_alive(aws: AwsClients, stack: str) -> bool:
    """Return True when STACK (a name, or an id, which names one stack even after its deletion) exists."""
    try:
        stacks = aws.cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        # CloudFormation answers a stack it does not have with ValidationError ("Stack with id X does not exist").
        if error_code(error) == "ValidationError":
            return False
        raise
    return any(found["StackStatus"] != GONE for found in stacks)


class Owner:
    """The stack that created a bucket, as the bucket's tags say, and whether that very stack still exists."""

    def __init__(self, aws: AwsClients, bucket: str) -> None:
        tags = _tags(aws, bucket)
        self.stack = tags.get(STACK_TAG)
        self.alive = self.stack is not None and stack_alive(aws, tags.get(STACK_ID_TAG, self.stack))
        self.auto_delete = tags.get(AUTO_DELETE_TAG) == "true"

    def made_by(self) -> str:
        if self.stack is None:
            return "made outside CloudFormation"
        return f"made by stack {self.stack}" if self.alive else f"kept when its stack {self.stack} was deleted"


def _attached(plan: Plan, aws: AwsClients, name: str, subject: str) -> Finding:
    """Return what a deploy does with the bucket the spec attaches (storage.bucket.existing)."""
    state = _head(aws, name)
    if state == "missing":
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message="does not exist: storage.bucket.existing attaches a bucket, it creates none",
            remedy="correct storage.bucket.name, or remove existing so that kiln creates the bucket",
        )
    if state == "forbidden":
        return Finding(
            check=NAME,
            status="warn",
            subject=subject,
            message="exists, but this identity cannot list it (403): a deploy attaches it unseen",
            remedy="make sure its policy lets the cluster's roles and FSx read and write it, or attach a bucket of "
            "this account",
        )
    owner = Owner(aws, name)
    if owner.alive and owner.stack == plan.storage_stack and owner.auto_delete:
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message=f"is still {plan.storage_stack}'s, made with retain: false: a deploy that attaches it removes "
            "it from that stack, which empties and deletes it",
            remedy="deploy once with storage.bucket.retain: true (the stack then keeps it when it lets go), then "
            "set existing: true",
        )
    return Finding(
        check=NAME,
        status="ok",
        subject=subject,
        message=f"exists ({owner.made_by()}): a deploy attaches it, and kiln neither changes nor deletes it",
    )


def _data_bucket(plan: Plan, aws: AwsClients) -> Finding:
    name = plan.bucket_name
    subject = f"storage.bucket.name {name}"
    if name is None:
        return Finding(check=NAME, status="ok", subject="data bucket", message="CloudFormation generates its name")
    if plan.bucket_existing:
        return _attached(plan, aws, name, subject)
    state = _head(aws, name)
    if state == "missing":
        return Finding(check=NAME, status="ok", subject=subject, message="the name is free: a deploy creates it")
    if state == "forbidden":
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message="the name is taken by a bucket this identity cannot read (another account's, as a rule)",
            remedy="choose another storage.bucket.name, or omit it so CloudFormation generates one",
        )
    owner = Owner(aws, name)
    if owner.alive and owner.stack == plan.storage_stack:
        return Finding(
            check=NAME,
            status="ok",
            subject=subject,
            message=f"is this cluster's own ({owner.stack}): a deploy updates it",
        )
    if plan.environment is not None:
        remedy = "delete it (`kiln leftovers` prints how), or choose another environment name"
    else:
        remedy = (
            "set storage.bucket.existing: true to attach it (kiln then never deletes it), or choose another "
            "storage.bucket.name"
        )
    return Finding(
        check=NAME,
        status="fail",
        subject=subject,
        message=f"already exists in this account, {owner.made_by()}: CloudFormation cannot create it in "
        f"{plan.storage_stack}, so a deploy fails",
        remedy=remedy,
    )


def _import_bucket(plan: Plan, aws: AwsClients) -> Finding | None:
    name = plan.import_bucket
    if name is None or name == plan.bucket_name:
        return None
    subject = f"storage.lustre.data_repository.import_path bucket {name}"
    state = _head(aws, name)
    if state == "exists":
        return Finding(check=NAME, status="ok", subject=subject, message="exists and this identity can list it")
    if state == "missing":
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message="does not exist",
            remedy="create it, or correct import_path (FSx links the file system to an existing bucket)",
        )
    # A 403 proves the bucket exists; whether FSx may read it is the bucket policy's business, not the caller's.
    return Finding(
        check=NAME,
        status="warn",
        subject=subject,
        message="exists, but this identity cannot list it (403)",
        remedy="make sure its policy lets FSx and the cluster's roles read it (s3:ListBucket, s3:GetObject)",
    )


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    findings = [_data_bucket(plan, aws)]
    imported = _import_bucket(plan, aws)
    if imported is not None:
        findings.append(imported)
    return findings


CHECK = Check(name=NAME, about="S3 bucket names", run=check)
