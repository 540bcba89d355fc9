"""StorageStack: the data bucket, FSx for Lustre and the metrics workspace, from the spec."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from kiln.constructs import (
    DataBucket,
    DataBucketProps,
    DataRepositoryLink,
    LustreFileSystem,
    LustreFileSystemProps,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
)
from kiln.spec import ClusterSpec
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.network import NetworkStack


def _import_link(spec: ClusterSpec, bucket: DataBucket, scope: Construct) -> DataRepositoryLink:
    from aws_cdk import aws_s3 as s3

    repo = spec.storage.lustre.data_repository
    if repo.import_path is None:
        return DataRepositoryLink(bucket=bucket.bucket, auto_export=repo.export)
    bucket_name, _, prefix = repo.import_path.removeprefix("s3://").partition("/")
    other = s3.Bucket.from_bucket_name(scope, "ImportBucket", bucket_name)
    return DataRepositoryLink(bucket=other, prefix=prefix, auto_export=repo.export)


class StorageStack(cdk.Stack):
    """Durable data: the S3 bucket, Lustre in the compute subnet linked to it, and the metrics workspace."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: ClusterSpec,
        network: NetworkStack,
        ci: CiEnvironment | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, description=f"kiln {spec.name}: storage (S3, FSx for Lustre)", **kwargs)
        retain = spec.storage.bucket.retain
        names = (
            {"bucket_name": ci.bucket_name("data"), "access_log_bucket_name": ci.bucket_name("data-logs")}
            if ci is not None
            else {"bucket_name": spec.storage.bucket.name}
        )
        self.bucket = DataBucket(self, "Data", DataBucketProps(retain=retain, **names))
        self.lustre: LustreFileSystem | None = None
        self.lustre_clients: ec2.SecurityGroup | None = None
        cdk.CfnOutput(self, "BucketName", value=self.bucket.bucket_name)
        # Metrics outlive a cluster as its data does: the workspace is kept exactly when the bucket is.
        self.prometheus: PrometheusWorkspace | None = None
        if spec.observability is not None and spec.observability.prometheus:
            self.prometheus = PrometheusWorkspace(
                self, "Metrics", PrometheusWorkspaceProps(alias=f"{spec.name}-metrics", retain=retain)
            )
            cdk.CfnOutput(self, "PrometheusEndpoint", value=self.prometheus.prometheus_endpoint)
        fs = spec.storage.lustre
        if fs is None:
            return
        self.lustre = LustreFileSystem(
            self,
            "Lustre",
            LustreFileSystemProps(
                vpc=network.training_vpc.vpc,
                subnet=network.training_vpc.compute_subnet,
                deployment=fs.deployment,
                storage_gib=fs.storage_gib,
                throughput_per_tib=fs.throughput_per_tib,
                compression=fs.compression,
                efa=fs.efa,
                efa_security_group=network.efa.security_group if fs.efa else None,
                data_repository=_import_link(spec, self.bucket, self),
                # Scratch data has no durable copy: only a persistent file system outlives the stack.
                retain=retain and fs.deployment == "PERSISTENT_2",
            ),
        )
        # Nodes join this group to mount Lustre; owning it here keeps compute -> storage one-way.
        self.lustre_clients = ec2.SecurityGroup(
            self,
            "LustreClients",
            vpc=network.training_vpc.vpc,
            description="Members may mount the FSx for Lustre file system",
        )
        self.lustre.allow_from(self.lustre_clients)
        cdk.CfnOutput(self, "FileSystemId", value=self.lustre.file_system_id)
        cdk.CfnOutput(self, "FileSystemDnsName", value=self.lustre.dns_name)
        cdk.CfnOutput(self, "FileSystemMountName", value=self.lustre.mount_name)
