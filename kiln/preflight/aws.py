"""The AWS clients preflight asks, made once per run, and how a refused call becomes an unchecked finding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import ACCESS_DENIED, BAD_CREDENTIALS, THROTTLED, error_code, error_message, one_line
from kiln.aws.session import MAX_ATTEMPTS
from kiln.preflight.findings import Finding

if TYPE_CHECKING:
    from kiln.aws.session import (
        CloudFormationClient,
        EC2Client,
        FSxClient,
        IAMClient,
        KMSClient,
        PrometheusServiceClient,
        ResourceGroupsTaggingAPIClient,
        S3Client,
        ServiceQuotasClient,
        Session,
        SSMClient,
    )

# IAM actions whose name is not the operation's (S3 authorizes HeadBucket as s3:ListBucket; the tagging API's
# actions are tag:*, its signing name is tagging).
IAM_ACTION_OVERRIDES = {("s3", "HeadBucket"): "s3:ListBucket", ("tagging", "GetResources"): "tag:GetResources"}


@dataclass(frozen=True, kw_only=True)
class AwsClients:
    """One client per service preflight reads, all in the plan's region, all made on the calling thread."""

    region: str
    account: str
    ec2: EC2Client
    service_quotas: ServiceQuotasClient
    ssm: SSMClient
    s3: S3Client
    fsx: FSxClient
    iam: IAMClient
    cloudformation: CloudFormationClient
    tagging: ResourceGroupsTaggingAPIClient
    amp: PrometheusServiceClient
    kms: KMSClient

    @classmethod
    def from_session(cls, session: Session, region: str) -> AwsClients:
        """Make the clients (botocore sessions are not thread-safe; clients are) and read the account id.

        Raises ClientError or BotoCoreError when the credentials are missing or refused: nothing can be checked.
        """

        account = session.client("sts", region_name=region).get_caller_identity()["Account"]
        return cls(
            region=region,
            account=account,
            ec2=session.client("ec2", region_name=region),
            service_quotas=session.client("service-quotas", region_name=region),
            ssm=session.client("ssm", region_name=region),
            s3=session.client("s3", region_name=region),
            fsx=session.client("fsx", region_name=region),
            iam=session.client("iam", region_name=region),
            cloudformation=session.client("cloudformation", region_name=region),
            tagging=session.client("resourcegroupstaggingapi", region_name=region),
            amp=session.client("amp", region_name=region),
            kms=session.client("kms", region_name=region),
        )

    def clients(self) -> tuple[Any, ...]:
        """Return every client, in the order iam_action looks an operation up."""
        return (
            self.ec2,
            self.service_quotas,
            self.ssm,
            self.s3,
            self.fsx,
            self.iam,
            self.cloudformation,
            self.tagging,
            self.amp,
            self.kms,
        )

    def iam_action(self, operation: str) -> str:
        """Return the IAM action behind OPERATION (an operation name of one of these clients)."""
        for client in self.clients():
            model = client.meta.service_model
            if operation in model.operation_names:
                prefix = model.signing_name
                return IAM_ACTION_OVERRIDES.get((prefix, operation), f"{prefix}:{operation}")
        return operation


def unchecked(check: str, subject: str, error: Exception, *, action: str, skip_hint: str) -> Finding:
    """Return the one line a check that could not ask AWS gives: what was refused, and what to do."""
    if isinstance(error, ClientError):
        code = error_code(error)
        if code in ACCESS_DENIED:
            message = f"{action} was denied ({code})"
            remedy = f"allow {action} (read-only) for the identity running kiln, or {skip_hint}"
        elif code in THROTTLED:
            message = f"{action} was throttled ({code}) after {MAX_ATTEMPTS} attempts"
            remedy = "run preflight again in a minute"
        elif code in BAD_CREDENTIALS:
            message = f"{action}: AWS rejected the credentials ({code})"
            remedy = "refresh them (`aws sso login`, or the CI role)"
        else:
            message = f"{action} failed ({code or 'no code'}): {error_message(error)}"
            remedy = f"fix what AWS says, or {skip_hint}"
    else:
        message = f"{action}: {one_line(str(error))}"
        remedy = f"check the network and the region, or {skip_hint}"
    return Finding(check=check, status="unchecked", subject=subject, message=message, remedy=remedy)


AWS_ERRORS = (ClientError, BotoCoreError)
