"""The boto3 session a read-only command asks AWS with: the spec's region, or --region, never two of them."""

from __future__ import annotations

from typing import Any

from kiln.contracts.errors import InputError
from kiln.spec import ClusterSpec


class NoRegion(InputError):
    """The command cannot tell which region to ask. str() is one line."""


def spec_session(spec: ClusterSpec, region: str | None, profile: str | None = None) -> Any:
    """Return a boto3 Session in SPEC's region, or REGION (--region); NoRegion when they disagree or neither is set.

    A session of its own: boto3's default one keeps whatever credentials it found first in the process. PROFILE
    (--profile) names the AWS config profile to use, else boto3 finds credentials as usual.
    NoCredentials (kiln.aws_errors) when PROFILE or AWS_PROFILE names a profile that is not there.
    """
    import boto3
    from botocore.exceptions import BotoCoreError

    from kiln.aws_errors import raise_if_no_credentials

    if region and spec.region and region != spec.region:
        raise NoRegion(f"--region {region}: the spec deploys to {spec.region}")
    try:
        session = boto3.Session(profile_name=profile, region_name=region or spec.region or None)
    except BotoCoreError as error:
        raise_if_no_credentials(error)
        raise
    if not session.region_name:
        raise NoRegion(
            "no region: set `region` in the spec, pass --region, or set AWS_DEFAULT_REGION (boto3 does not read "
            "AWS_REGION)"
        )
    return session
