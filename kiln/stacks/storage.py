"""StorageStack: the data bucket, FSx for Lustre and the metrics workspace, from the spec."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.constructs import (
    DataBucket,
    DataBucketProps,
    DataRepositoryLink,
    LustreFileSystem,
    LustreFileSystemAttributes,
    LustreFileSystemProps,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
)
from kiln.constructs.lustre import ILustreFileSystem, file_system_dns_name
from kiln.constructs.retention import retain_all
from kiln.spec import ClusterSpec
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.network import NetworkStack
from kiln.stacks.retention import retention


def _import_link(spec: ClusterSpec, bucket: s3.IBucket, scope: Construct) -> DataRepositoryLink:
    repo = spec.storage.lustre.data_repository
    if repo.import_path is None:
        return DataRepositoryLink(bucket=bucket, auto_export=repo.export)
    bucket_name, _, prefix = repo.import_path.removeprefix("s3://").partition("/")
    other = s3.Bucket.from_bucket_name(scope, "ImportBucket", bucket_name)
    return DataRepositoryLink(bucket=other, prefix=prefix, auto_export=repo.export)


class StorageStack(cdk.Stack):
    """Durable data: the S3 bucket, Lustre in the compute subnet linked to it, and the metrics workspace.

    The spec may attach a bucket (storage.bucket.existing) and a file system (storage.lustre.file_system_id) made
    elsewhere: the stack then refers to them and never creates, changes or deletes them.
    """

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
        kept = retention(spec)
        wanted = spec.storage.bucket
        # A short-lived environment always names its own buckets (kiln.stacks.ci_mode), attached or not.
        self.data_bucket: DataBucket | None = None
        self.bucket: DataBucket | s3.IBucket
        if wanted.existing and ci is None:
            self.bucket = s3.Bucket.from_bucket_name(self, "Data", wanted.name)
        else:
            names = (
                {"bucket_name": ci.bucket_name("data"), "access_log_bucket_name": ci.bucket_name("data-logs")}
                if ci is not None
                else {"bucket_name": wanted.name}
            )
            self.bucket = self.data_bucket = DataBucket(self, "Data", DataBucketProps(retain=kept.data, **names))
        self.lustre: ILustreFileSystem | None = None
        self.lustre_clients: ec2.ISecurityGroup | None = None
        cdk.CfnOutput(self, "BucketName", value=self.bucket.bucket_name)
        # Metrics outlive a cluster as its data does.
        self.prometheus: PrometheusWorkspace | None = None
        if spec.observability is not None and spec.observability.prometheus:
            self.prometheus = PrometheusWorkspace(
                self, "Metrics", PrometheusWorkspaceProps(alias=f"{spec.name}-metrics", retain=kept.data)
            )
            cdk.CfnOutput(self, "PrometheusEndpoint", value=self.prometheus.prometheus_endpoint)
        fs = spec.storage.lustre
        if fs is not None:
            if fs.attached:
                self._attach_lustre(fs.file_system_id, fs.mount_name, fs.security_group_id)
            else:
                self._create_lustre(spec, network, retain=kept.file_system)
            cdk.CfnOutput(self, "FileSystemId", value=self.lustre.file_system_id)
            cdk.CfnOutput(self, "FileSystemDnsName", value=self.lustre.dns_name)
            cdk.CfnOutput(self, "FileSystemMountName", value=self.lustre.mount_name)
        if not any(isinstance(node, cdk.CfnResource) for node in self.node.find_all()):
            # Everything attached, nothing made: CloudFormation takes no template without a resource, so one that
            # costs nothing and does nothing stands in (its outputs still name what is attached).
            cdk.CfnWaitConditionHandle(self, "AttachedOnly")

    def _attach_lustre(self, file_system_id: str, mount_name: str, client_group_id: str) -> None:
        # The file system already admits this group: nodes join it, and kiln adds no rule to a group it did not make.
        self.lustre_clients = ec2.SecurityGroup.from_security_group_id(
            self, "LustreClients", client_group_id, mutable=False
        )
        self.lustre = LustreFileSystem.from_lustre_attributes(
            self,
            "Lustre",
            LustreFileSystemAttributes(
                file_system_id=file_system_id,
                dns_name=file_system_dns_name(self, file_system_id),
                mount_name=mount_name,
            ),
        )

    def _create_lustre(self, spec: ClusterSpec, network: NetworkStack, *, retain: bool) -> None:
        fs = spec.storage.lustre
        lustre = LustreFileSystem(
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
                retain=retain,
            ),
        )
        # Nodes join this group to mount Lustre; owning it here keeps compute -> storage one-way.
        clients = ec2.SecurityGroup(
            self,
            "LustreClients",
            vpc=network.training_vpc.vpc,
            description="Members may mount the FSx for Lustre file system",
        )
        if retain:
            # The kept file system's rules name this group: it stays, and a later spec attaches through it.
            retain_all(clients)
        lustre.allow_from(clients)
        self.lustre, self.lustre_clients = lustre, clients
