"""NodeBootstrap: what a compute construct needs of a bootstrap bundle, and nothing about how it was made."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from kiln.constructs._checks import require, unresolved


@dataclass(frozen=True, kw_only=True)
class NodeBootstrap:
    """A zipped bootstrap bundle in S3 and the script in it that a node runs at boot.

    bucket: the bucket of the zip (BootstrapAssets.node_bootstrap gives kiln's rendered bundle; any zip you staged
        yourself works the same way).
    object_key: the zip's key in that bucket.
    entry_point: the script inside the zip a node runs, as a relative path (e.g. pcs.sh).
    content_sha256: the digest of the files the zip holds (kiln.bootstrap.fetch.bundle_digest of the directory
        zipped; BootstrapAssets gives it). Required: a PCS, ParallelCluster or EKS node checks the zip against it
        and refuses to unpack or run a zip that does not match, so whoever may write the zip's bucket cannot change
        what nodes run (HyperPod's nodes read the scripts the deploy copied into the cluster's own bucket instead).
    object_url: s3://bucket/key as one value, when its maker has one (an S3 asset does); default: built
        from bucket and object_key.
    """

    bucket: s3.IBucket
    object_key: str
    entry_point: str
    content_sha256: str
    object_url: str | None = None

    def __post_init__(self) -> None:
        require(self, bool(self.object_key), "object_key", self.object_key, "the key of the zipped bundle")
        if not unresolved(self.entry_point):
            relative = bool(self.entry_point) and not self.entry_point.startswith("/") and ".." not in self.entry_point
            require(
                self, relative, "entry_point", self.entry_point, "a relative path inside the bundle, such as pcs.sh"
            )
        digest = self.content_sha256
        if not unresolved(digest):
            hex_digest = isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
            require(
                self,
                hex_digest,
                "content_sha256",
                digest,
                "64 lowercase hex digits (kiln.bootstrap.fetch.bundle_digest of the zipped directory): nodes run only "
                "a bundle they can check",
            )

    @property
    def s3_url(self) -> str:
        """s3://bucket/key of the zip."""
        return self.object_url or f"s3://{self.bucket.bucket_name}/{self.object_key}"

    @property
    def object_arn(self) -> str:
        """The ARN of the zip object, for policies that grant reading exactly it."""
        return self.bucket.arn_for_objects(self.object_key)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let GRANTEE download the zip and nothing else from its bucket."""
        return iam.Grant.add_to_principal(grantee=grantee, actions=["s3:GetObject"], resource_arns=[self.object_arn])
