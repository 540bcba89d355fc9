"""Can CloudFormation create the data bucket under its fixed name, and does the data repository bucket exist?"""

from __future__ import annotations

from botocore.exceptions import ClientError

from kiln.ci.reaper_code.kiln_reaper.teardown import error_code
from kiln.preflight.aws import AwsClients
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan
from kiln.preflight.run import Check

NAME = "bucket"
STACK_TAG = "aws:cloudformation:stack-name"
MISSING = ("404", "NoSuchBucket", "NotFound")
FORBIDDEN = ("403", "AccessDenied")


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


def _stack_of(aws: AwsClients, bucket: str) -> str | None:
    """Return the CloudFormation stack that created BUCKET, or None (untagged, or no tags at all)."""
    try:
        tags = aws.s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
    except ClientError as error:
        if error_code(error) == "NoSuchTagSet":
            return None
        raise
    return next((tag["Value"] for tag in tags if tag["Key"] == STACK_TAG), None)


def _data_bucket(plan: Plan, aws: AwsClients) -> Finding:
    name = plan.bucket_name
    subject = f"storage.bucket.name {name}"
    if name is None:
        return Finding(check=NAME, status="ok", subject="data bucket", message="CloudFormation generates its name")
    state = _head(aws, name)
    if state == "missing":
        return Finding(check=NAME, status="ok", subject=subject, message="the name is free")
    if state == "forbidden":
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message="the name is taken by a bucket this identity cannot read (another account's, as a rule)",
            remedy="choose another storage.bucket.name, or omit it so CloudFormation generates one",
        )
    owner = _stack_of(aws, name)
    if owner == plan.storage_stack:
        return Finding(check=NAME, status="ok", subject=subject, message=f"is this cluster's own ({owner})")
    made_by = f"by stack {owner}" if owner else "outside CloudFormation"
    return Finding(
        check=NAME,
        status="fail",
        subject=subject,
        message=f"already exists in this account, made {made_by}: {plan.storage_stack} cannot create it",
        remedy="choose another storage.bucket.name (kiln never takes over a bucket it did not create)",
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
