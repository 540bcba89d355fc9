"""The one way a kiln command makes its boto3 session: one region rule, one retry configuration, --profile.

The region rule, the same for every command:
- a command that reads a spec asks the spec's region; --region may name it again, a different one is refused (the
  spec says where the cluster is: asking elsewhere would read or change the wrong place);
- --region alone, for a spec without a region or a command without a spec;
- else the region botocore is configured with: AWS_DEFAULT_REGION, or `region` in the AWS config profile;
- none: NoRegion, one line (no_region).

Every client made from the session shares CLIENT_CONFIG (botocore's standard retry mode, throttling included), so
a command that passes the session down to the modules that call AWS needs no configuration of its own. The Lambda
code (kiln/ci/reaper_code, kiln/constructs/grafana_code) runs without kiln and keeps its own clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias

from botocore.config import Config

from kiln.contracts.errors import InputError

# The names kiln annotates a session and its clients with, one per service kiln calls. They come from the typed stubs
# (boto3-stubs, mypy-boto3-<service>: dev dependencies, pinned in pyproject.toml), read by the type checker only:
# at run time these imports never happen, so an install of kiln needs no stubs. A module that annotates with them
# imports them under `if TYPE_CHECKING:` too; boto3 itself is imported at run time by aws_session alone.
if TYPE_CHECKING:
    from boto3 import Session as Session
    from mypy_boto3_amp.client import PrometheusServiceClient as PrometheusServiceClient
    from mypy_boto3_cloudformation.client import CloudFormationClient as CloudFormationClient
    from mypy_boto3_cloudformation.literals import StackStatusType
    from mypy_boto3_ec2.client import EC2Client as EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef
    from mypy_boto3_eks.client import EKSClient as EKSClient
    from mypy_boto3_fsx.client import FSxClient as FSxClient
    from mypy_boto3_iam.client import IAMClient as IAMClient
    from mypy_boto3_imagebuilder.client import ImagebuilderClient as ImagebuilderClient
    from mypy_boto3_kms.client import KMSClient as KMSClient
    from mypy_boto3_resourcegroupstaggingapi.client import (
        ResourceGroupsTaggingAPIClient as ResourceGroupsTaggingAPIClient,
    )
    from mypy_boto3_s3.client import S3Client as S3Client
    from mypy_boto3_sagemaker.client import SageMakerClient as SageMakerClient
    from mypy_boto3_scheduler.client import EventBridgeSchedulerClient as EventBridgeSchedulerClient
    from mypy_boto3_service_quotas.client import ServiceQuotasClient as ServiceQuotasClient
    from mypy_boto3_ssm.client import SSMClient as SSMClient
    from mypy_boto3_sts.client import STSClient as STSClient

    # one EC2 filter (Name, Values), as DescribeInstances and DescribeImages take them
    Ec2Filter: TypeAlias = FilterTypeDef
    # a CloudFormation stack status, as ListStacks' StackStatusFilter takes them
    StackStatus: TypeAlias = StackStatusType

# Retried with botocore's standard backoff (throttling included) before a call gives up; preflight's unchecked lines
# say how many attempts were made. total_max_attempts counts the first request too; the client config's
# max_attempts counts retries only (https://docs.aws.amazon.com/boto3/latest/guide/retries.html, "Available
# configuration options"): 5 attempts are the 1 + 4 that {"max_attempts": 4} gave preflight before.
MAX_ATTEMPTS = 5
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}, connect_timeout=5, read_timeout=20
)

# Where botocore finds a region when kiln names none: the `region` entry of its config table reads the environment
# variable AWS_DEFAULT_REGION and the profile's `region` key (botocore 1.44, configprovider.py,
# BOTOCORE_DEFAULT_SESSION_VARIABLES: 'region': ('region', 'AWS_DEFAULT_REGION', None, None)). botocore reads
# AWS_REGION only to choose its defaults mode on AWS compute (resolve_auto_mode), never as the region, so the line
# below does not tell anyone to set it.
CONFIGURED_REGION = "set AWS_DEFAULT_REGION or `region` in the AWS config profile (botocore does not read AWS_REGION)"


class HasRegion(Protocol):
    """What the rule reads of a spec: its region, None when it names none (kiln.spec.ClusterSpec)."""

    @property
    def region(self) -> str | None: ...


class NoRegion(InputError):
    """The command cannot tell which region to ask, or --region disagrees with the spec. str() is one line."""


def no_region(*, spec: bool) -> str:
    """Return the one line of a command that found no region; SPEC: the command reads a spec."""
    ways = "set `region` in the spec, pass --region" if spec else "pass --region"
    return f"no region: {ways}, or {CONFIGURED_REGION}"


def chosen_region(region: str | None, spec: HasRegion | None) -> str | None:
    """Return the region the rule names: SPEC's, else REGION (--region); None leaves it to botocore's configuration.

    NoRegion when REGION differs from SPEC's region.
    """
    if spec is not None and spec.region:
        if region and region != spec.region:
            raise NoRegion(f"--region {region}: the spec deploys to {spec.region}")
        return spec.region
    return region or None


def aws_session(*, region: str | None, profile: str | None, spec: HasRegion | None = None) -> Session:
    """Return a boto3 Session in the region the rule chooses, with PROFILE (--profile) and CLIENT_CONFIG.

    SPEC: the spec the command reads, None for a command without one. A session of its own: boto3's default one
    keeps whatever credentials it found first in the process. Without PROFILE boto3 finds credentials as usual.
    Raises NoRegion (see chosen_region, no_region), and NoCredentials (kiln.aws.errors) when PROFILE or AWS_PROFILE
    names a profile that is not there.
    """
    import boto3
    import botocore.session
    from botocore.exceptions import BotoCoreError

    from kiln.aws.errors import raise_if_no_credentials

    name = chosen_region(region, spec)
    core = botocore.session.get_session()
    core.set_default_client_config(CLIENT_CONFIG)
    try:
        session = boto3.Session(botocore_session=core, profile_name=profile or None, region_name=name)
        configured = session.region_name
    except BotoCoreError as error:
        raise_if_no_credentials(error)
        raise
    if not configured:
        raise NoRegion(no_region(spec=spec is not None))
    return session
