"""DataBucket: the cluster's S3 bucket, locked down and retained by default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.catalog.names import BUCKET_NAME_RULE, is_bucket_name
from kiln.constructs import acknowledgements
from kiln.constructs._checks import require, unresolved
from kiln.constructs.review import acknowledge_wildcards


@dataclass(frozen=True, kw_only=True)
class DataBucketProps:
    """Props for DataBucket.

    bucket_name: a fixed name; default: CloudFormation generates one.
    retain: keep the bucket and its objects on stack deletion; default True. False empties and
        deletes it (for short-lived CI environments). A kept bucket keeps its policies (TLS only; the access-log
        bucket's lets S3 deliver the logs) and its access-log bucket, so it works and stays locked down after.
    abort_incomplete_upload_days: days before unfinished multipart uploads are removed; default 7.
    noncurrent_version_days: days old object versions are kept, in the bucket and its access-log bucket; default 30.
    access_logs: write server access logs to a sibling bucket; default True.
    access_log_prefix: where in that bucket the logs go; name it after the bucket's purpose (default data-bucket/).
    access_log_bucket_name: a fixed name for that bucket; default: CloudFormation generates one.
    """

    bucket_name: str | None = None
    retain: bool = True
    abort_incomplete_upload_days: int = 7
    noncurrent_version_days: int = 30
    access_logs: bool = True
    access_log_prefix: str = "data-bucket/"
    access_log_bucket_name: str | None = None

    def __post_init__(self) -> None:
        for field, name in (("bucket_name", self.bucket_name), ("access_log_bucket_name", self.access_log_bucket_name)):
            if name is not None and not unresolved(name):
                require(self, is_bucket_name(name), field, name, BUCKET_NAME_RULE)
        require(
            self,
            self.abort_incomplete_upload_days >= 1,
            "abort_incomplete_upload_days",
            self.abort_incomplete_upload_days,
            "1 or more",
        )
        require(
            self,
            self.noncurrent_version_days >= 1,
            "noncurrent_version_days",
            self.noncurrent_version_days,
            "1 or more",
        )


def _locked_bucket(
    scope: Construct,
    construct_id: str,
    *,
    bucket_name: str | None,
    retain: bool,
    lifecycle_rules: Sequence[s3.LifecycleRule],
    object_ownership: s3.ObjectOwnership,
    server_access_logs_bucket: s3.IBucket | None = None,
    server_access_logs_prefix: str | None = None,
) -> s3.Bucket:
    """Return a bucket as both of DataBucket's are: versioned, S3-managed encryption, no public access, SSL and TLS
    1.2 or later only; kept on stack deletion when RETAIN, otherwise emptied and deleted."""
    return s3.Bucket(
        scope,
        construct_id,
        bucket_name=bucket_name,
        versioned=True,
        server_access_logs_bucket=server_access_logs_bucket,
        server_access_logs_prefix=server_access_logs_prefix,
        lifecycle_rules=lifecycle_rules,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        object_ownership=object_ownership,
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        auto_delete_objects=not retain,
    )


class DataBucket(Construct):
    """Encrypted, versioned, SSL-only, private bucket for datasets, checkpoints and node scripts."""

    def __init__(self, scope: Construct, construct_id: str, props: DataBucketProps | None = None) -> None:
        super().__init__(scope, construct_id)
        props = props or DataBucketProps()
        expire_old_versions = s3.LifecycleRule(
            id="ExpireOldVersions", noncurrent_version_expiration=Duration.days(props.noncurrent_version_days)
        )
        self.access_log_bucket: s3.Bucket | None = None
        if props.access_logs:
            # Versioned, so a log object deleted or overwritten stays recoverable as long as old data versions do.
            self.access_log_bucket = _locked_bucket(
                self,
                "AccessLogs",
                bucket_name=props.access_log_bucket_name,
                retain=props.retain,
                lifecycle_rules=[expire_old_versions],
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            )
            acknowledge_wildcards(
                self.access_log_bucket,
                (acknowledgements.ACCESS_LOG_DELIVERY, acknowledgements.BUCKET_AUTO_DELETE),
                bucket=self.access_log_bucket.bucket_arn,
                prefix=props.access_log_prefix,
            )
        self.bucket = _locked_bucket(
            self,
            "Resource",
            bucket_name=props.bucket_name,
            retain=props.retain,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix=props.access_log_prefix if self.access_log_bucket else None,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="AbortIncompleteUploads",
                    abort_incomplete_multipart_upload_after=Duration.days(props.abort_incomplete_upload_days),
                ),
                expire_old_versions,
            ],
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        )
        acknowledge_wildcards(self.bucket, (acknowledgements.BUCKET_AUTO_DELETE,), bucket=self.bucket.bucket_arn)
        if props.retain:
            for kept in (self.bucket, self.access_log_bucket):
                if kept is not None and kept.policy is not None:
                    kept.policy.apply_removal_policy(RemovalPolicy.RETAIN)

    @property
    def bucket_name(self) -> str:
        return self.bucket.bucket_name

    @property
    def bucket_arn(self) -> str:
        return self.bucket.bucket_arn

    def s3_url(self, key: str = "") -> str:
        """Return s3://bucket/KEY."""
        return self.bucket.s3_url_for_object(key) if key else f"s3://{self.bucket.bucket_name}"

    def grant_read(self, grantee: iam.IGrantable, prefix: str = "*") -> iam.Grant:
        """Allow GRANTEE to list the bucket and read objects under PREFIX."""
        return self.bucket.grant_read(grantee, prefix)

    def grant_read_write(self, grantee: iam.IGrantable, prefix: str = "*") -> iam.Grant:
        """Allow GRANTEE to read, write and delete objects under PREFIX."""
        return self.bucket.grant_read_write(grantee, prefix)
