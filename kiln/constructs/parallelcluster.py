"""ParallelCluster: an AWS ParallelCluster 3 cluster deployed through its CloudFormation provider."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aws_cdk import Aws, CfnOutput, CustomResource, Fn, Stack
from aws_cdk import aws_cloudformation as cfn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from kiln.bootstrap.fetch import FETCH_SCRIPT, fetch_arguments
from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.limits import SERVICE_NODE_ROOT_VOLUME_GIB
from kiln.catalog.platforms import service_fact
from kiln.constructs import nag_rules
from kiln.constructs._checks import acknowledge_wildcards, require, require_in, require_node_group, unresolved
from kiln.constructs.launch_template import CapacityOption
from kiln.constructs.lustre import ILustreFileSystem
from kiln.constructs.node_access import ssm_agent_statements
from kiln.constructs.node_bootstrap import NodeBootstrap

# The one place the ParallelCluster version is pinned: provider template, schema in tests, Makefile.
PARALLELCLUSTER_VERSION = "3.16.1"
PROVIDER_TEMPLATE = (
    "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
    "/parallelcluster/{version}/templates/custom_resource/cluster.yaml"
)
OperatingSystem = Literal["ubuntu2204", "ubuntu2404", "al2023"]
# kiln's OS names in ParallelCluster's Image.Os words.
OPERATING_SYSTEMS: dict[str, str] = {"ubuntu2204": "ubuntu2204", "ubuntu2404": "ubuntu2404", "al2023": "alinux2023"}
CLUSTER_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,59}$")
OPEN_TO_ALL = ("0.0.0.0/0", "::/0")
# The provider's default Lambda role attaches a cluster's AdditionalIamPolicies only when their ARN is like these
# (besides ten AWS managed policies): kiln's own policies take the path below instead of widening that role.
ATTACHABLE_POLICIES: tuple[str, ...] = tuple(service_fact("parallelcluster", "provider_attachable_policies").value)
ATTACHABLE_PATH = "/parallelcluster/"
# The DevSettings/Timeouts a cluster may set (platforms.json): how long a node's setup may take.
BOOTSTRAP_TIMEOUTS = tuple(
    service_fact("parallelcluster", key).value["property"].rsplit("/", 1)[-1]
    for key in ("head_node_bootstrap_timeout", "compute_node_bootstrap_timeout")
)


def attachable_policy(scope: Construct, construct_id: str, **kwargs: Any) -> iam.ManagedPolicy:
    """Return a managed policy the ParallelCluster provider's Lambda role may attach to cluster roles."""
    return iam.ManagedPolicy(scope, construct_id, path=ATTACHABLE_PATH, **kwargs)


def is_attachable(policy: iam.IManagedPolicy) -> bool:
    """Return whether the provider's default Lambda role may attach POLICY (kiln's path, or a matching ARN)."""
    if isinstance(policy, iam.ManagedPolicy):
        return policy.node.default_child.path == ATTACHABLE_PATH
    arn = policy.managed_policy_arn
    if unresolved(arn):
        return False
    # ARN patterns with ${AWS::Partition} and ${AWS::AccountId}: any partition and account.
    patterns = [re.sub(r"\$\{AWS::[A-Za-z]+\}", "*", pattern) for pattern in ATTACHABLE_POLICIES]
    return any(fnmatch.fnmatchcase(arn, pattern) for pattern in patterns)


@dataclass(frozen=True, kw_only=True)
class SlurmQueue:
    """One Slurm queue with one compute resource.

    name: queue name (lowercase letters, digits, '-').
    instance_type: its EC2 type; EFA is on whenever the type supports it.
    min_count / max_count: static and maximum nodes (capacity blocks need min == max > 0).
    capacity: on-demand (default), spot, capacity-block or reservation.
    placement_group: a cluster placement group for the queue; default True.
    root_volume_gib: encrypted gp3 root volume; default 200.
    """

    name: str
    instance_type: str
    min_count: int = 0
    max_count: int = 1
    capacity: CapacityOption = field(default_factory=CapacityOption)
    placement_group: bool = True
    root_volume_gib: int = 200

    def __post_init__(self) -> None:
        require_node_group(self.name, self.min_count, self.max_count, what="queue name")
        catalog_instance_type(self.instance_type)
        if self.capacity.type == "capacity-block":
            require(
                self.min_count == self.max_count > 0,
                "min_count/max_count",
                (self.min_count, self.max_count),
                "equal and above 0 for a capacity block (ParallelCluster runs them as static nodes)",
            )

    @property
    def efa(self) -> bool:
        return catalog_instance_type(self.instance_type).efa_supported


@dataclass(frozen=True, kw_only=True)
class ParallelClusterProps:
    """Props for ParallelCluster.

    cluster_name: the ParallelCluster name (must differ from the stack name).
    subnet: private subnet of the head node, queues and login nodes.
    queues: the Slurm queues.
    bootstrap / cluster_env: the bundle every node runs as its OnNodeConfigured action
        (BootstrapAssets.node_bootstrap for kiln's `parallelcluster` bundle) and its deploy-time values.
    head_node_instance_type: default m5.8xlarge.
    login_instance_type / login_count: a login node pool; count 0 for none (default 1).
    os: ubuntu2204 (default), ubuntu2404 or al2023; custom_ami: a baked image instead of the stock one.
    file_system: an FSx for Lustre file system (LustreFileSystem, or from_lustre_attributes) mounted at
        fsx_mount_dir (/fsx); default none.
    security_groups: added to every node (e.g. one the file system admits).
    ssh_allowed_ips: the CIDR (or prefix list) that may reach the head and login nodes over SSH; ParallelCluster's
        own default is 0.0.0.0/0, so it is required (the VPC's CIDR, say).
    head_node_policies: managed policies for the head node alone (e.g. writing to a Prometheus workspace). The
        provider's Lambda role attaches only policies ParallelCluster's own policy lets it (ATTACHABLE_POLICIES):
        make them with attachable_policy (path /parallelcluster/).
    scaledown_idle_minutes: idle time before dynamic nodes stop; default 10.
    slurm_settings: further Scheduling.SlurmSettings entries.
    bootstrap_timeouts: DevSettings/Timeouts in seconds (HeadNodeBootstrapTimeout, ComputeNodeBootstrapTimeout),
        long enough for the nodes' setup; unset: ParallelCluster's defaults.
    delete_with_stack: delete the cluster with the stack (default True; data lives in FSx and S3).
    """

    cluster_name: str
    subnet: ec2.ISubnet
    queues: Sequence[SlurmQueue]
    bootstrap: NodeBootstrap
    cluster_env: Mapping[str, str]
    ssh_allowed_ips: str
    head_node_instance_type: str = "m5.8xlarge"
    login_instance_type: str = "m5.2xlarge"
    login_count: int = 1
    os: OperatingSystem = "ubuntu2204"
    custom_ami: str | None = None
    file_system: ILustreFileSystem | None = None
    fsx_mount_dir: str = "/fsx"
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    head_node_policies: Sequence[iam.IManagedPolicy] = ()
    scaledown_idle_minutes: int = 10
    slurm_settings: Mapping[str, Any] = field(default_factory=dict)
    bootstrap_timeouts: Mapping[str, int] = field(default_factory=dict)
    delete_with_stack: bool = True

    def __post_init__(self) -> None:
        require(
            bool(CLUSTER_NAME.match(self.cluster_name)),
            "cluster_name",
            self.cluster_name,
            "a letter, then up to 59 letters, digits or '-'",
        )
        require(bool(self.queues), "queues", list(self.queues), "at least one queue")
        names = [q.name for q in self.queues]
        require(len(set(names)) == len(names), "queue names", names, "unique names")
        require_in("os", self.os, OPERATING_SYSTEMS)
        require(self.login_count >= 0, "login_count", self.login_count, "0 or more")
        require(self.scaledown_idle_minutes >= 1, "scaledown_idle_minutes", self.scaledown_idle_minutes, "1 or more")
        if not unresolved(self.ssh_allowed_ips):
            require(
                self.ssh_allowed_ips not in OPEN_TO_ALL,
                "ssh_allowed_ips",
                self.ssh_allowed_ips,
                "a CIDR narrower than the whole internet (the VPC's, or a prefix list)",
            )
        for name, seconds in self.bootstrap_timeouts.items():
            require_in("bootstrap_timeouts", name, BOOTSTRAP_TIMEOUTS)
            require(seconds > 0, f"bootstrap_timeouts {name}", seconds, "a positive number of seconds")
        for policy in self.head_node_policies:
            require(
                is_attachable(policy),
                "head_node_policies",
                policy.node.path if isinstance(policy, Construct) else policy.managed_policy_arn,
                "a policy the provider may attach: made with attachable_policy (path "
                f"{ATTACHABLE_PATH}), or an ARN matching {' or '.join(ATTACHABLE_POLICIES)}",
            )


class ParallelCluster(Construct):
    """ParallelCluster 3 through its official CloudFormation provider: a nested stack and a Custom::PclusterCluster."""

    def __init__(self, scope: Construct, construct_id: str, props: ParallelClusterProps) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        require(
            props.cluster_name != Stack.of(self).stack_name,
            "cluster_name",
            props.cluster_name,
            "a name other than the stack's",
        )
        self.fetch_script = s3_assets.Asset(self, "FetchScript", path=str(FETCH_SCRIPT))
        self.ssm_agent_policy = self._ssm_agent_policy()
        self.config = self._configuration()
        self.provider = cfn.CfnStack(
            self, "Provider", template_url=Fn.sub(PROVIDER_TEMPLATE.replace("{version}", PARALLELCLUSTER_VERSION))
        )
        self.cluster = CustomResource(
            self,
            "Resource",
            service_token=self.provider.get_att("Outputs.ServiceToken").to_string(),
            resource_type="Custom::PclusterCluster",
            properties={
                "ClusterName": props.cluster_name,
                "ClusterConfiguration": self.config,
                "DeletionPolicy": "Delete" if props.delete_with_stack else "Retain",
            },
        )
        CfnOutput(self, "HeadNodePrivateIp", value=self.head_node_private_ip, description="Slurm head node")

    @property
    def head_node_private_ip(self) -> str:
        return self.cluster.get_att_string("headNode.privateIpAddress")

    def _on_node_configured(self, role: str) -> dict[str, Any]:
        """Run the bundle as ParallelCluster's OnNodeConfigured action, telling the node its role outright."""
        props = self.props
        arguments = fetch_arguments(props.bootstrap.s3_url, props.bootstrap.entry_point, props.cluster_env, role=role)
        return {"OnNodeConfigured": {"Script": self.fetch_script.s3_object_url, "Args": arguments}}

    def _login_read_policy(self) -> iam.ManagedPolicy:
        """Login pools take no S3Access: an attachable policy that reads exactly fetch.sh and the bundle."""
        props = self.props
        objects = [
            f"arn:{Aws.PARTITION}:s3:::{self.fetch_script.s3_bucket_name}/{self.fetch_script.s3_object_key}",
            f"arn:{Aws.PARTITION}:s3:::{props.bootstrap.bucket.bucket_name}/{props.bootstrap.object_key}",
        ]
        return attachable_policy(
            self,
            "LoginNodeBootstrapRead",
            description="kiln: ParallelCluster login nodes read the bootstrap's fetch script and bundle",
            statements=[iam.PolicyStatement(actions=["s3:GetObject"], resources=objects)],
        )

    def _ssm_agent_policy(self) -> iam.ManagedPolicy:
        """Every node's SSM Agent: Session Manager and Run Command (kiln ci), not AmazonSSMManagedInstanceCore, in a
        policy the provider may attach (ParallelCluster attaches no SSM policy of its own)."""
        policy = attachable_policy(
            self,
            "NodeSsmAgent",
            description="kiln: ParallelCluster nodes' SSM Agent, for Session Manager and Run Command only",
            statements=ssm_agent_statements(self),
        )
        acknowledge_wildcards(policy, nag_rules.NODE_SSM_GRANTS)
        return policy

    def _iam(self, policies: Sequence[iam.IManagedPolicy] = ()) -> dict[str, Any]:
        # Nodes read exactly the two objects they need: fetch.sh and the bundle.
        s3_access = [
            {
                "BucketName": self.fetch_script.s3_bucket_name,
                "KeyName": self.fetch_script.s3_object_key,
                "EnableWriteAccess": False,
            },
            {
                "BucketName": self.props.bootstrap.bucket.bucket_name,
                "KeyName": self.props.bootstrap.object_key,
                "EnableWriteAccess": False,
            },
        ]
        additional = [self.ssm_agent_policy.managed_policy_arn, *(policy.managed_policy_arn for policy in policies)]
        return {"S3Access": s3_access, "AdditionalIamPolicies": [{"Policy": arn} for arn in additional]}

    def _root_volume(self, size: int) -> dict[str, Any]:
        return {"LocalStorage": {"RootVolume": {"Size": size, "Encrypted": True, "VolumeType": "gp3"}}}

    def _queue(self, queue: SlurmQueue) -> dict[str, Any]:
        props = self.props
        networking: dict[str, Any] = {
            "SubnetIds": [props.subnet.subnet_id],
            "PlacementGroup": {"Enabled": queue.placement_group},
        }
        if props.security_groups:
            networking["AdditionalSecurityGroups"] = [g.security_group_id for g in props.security_groups]
        entry: dict[str, Any] = {
            "Name": queue.name,
            "CapacityType": queue.capacity.purchase_option,
            "Networking": networking,
            "ComputeResources": [
                {
                    "Name": f"{queue.name}-nodes",
                    "InstanceType": queue.instance_type,
                    "MinCount": queue.min_count,
                    "MaxCount": queue.max_count,
                    "Efa": {"Enabled": queue.efa},
                }
            ],
            "ComputeSettings": self._root_volume(queue.root_volume_gib),
            "CustomActions": self._on_node_configured("worker"),
            "Iam": self._iam(),
        }
        if queue.capacity.reservation_id:
            entry["CapacityReservationTarget"] = {"CapacityReservationId": queue.capacity.reservation_id}
        return entry

    def _configuration(self) -> dict[str, Any]:
        props = self.props
        head_networking: dict[str, Any] = {"SubnetId": props.subnet.subnet_id}
        if props.security_groups:
            head_networking["AdditionalSecurityGroups"] = [g.security_group_id for g in props.security_groups]
        image: dict[str, Any] = {"Os": OPERATING_SYSTEMS[props.os]}
        if props.custom_ami:
            image["CustomAmi"] = props.custom_ami
        config: dict[str, Any] = {
            "Region": Stack.of(self).region,
            "Image": image,
            "HeadNode": {
                "InstanceType": props.head_node_instance_type,
                "Networking": head_networking,
                **self._root_volume(SERVICE_NODE_ROOT_VOLUME_GIB),
                "Iam": self._iam(props.head_node_policies),
                # ParallelCluster then lets only root and its admin users reach IMDS on head and login nodes
                # (platforms.json, parallelcluster.imds_secured_roles); the bootstrap's configure_imds takes the rest.
                "Imds": {"Secured": True},
                "Ssh": {"AllowedIps": props.ssh_allowed_ips},
                "CustomActions": self._on_node_configured("controller"),
            },
            "Scheduling": {
                "Scheduler": "slurm",
                "SlurmSettings": {"ScaledownIdletime": props.scaledown_idle_minutes, **props.slurm_settings},
                "SlurmQueues": [self._queue(q) for q in props.queues],
            },
            "Imds": {"ImdsSupport": "v2.0"},
        }
        if props.bootstrap_timeouts:
            config["DevSettings"] = {"Timeouts": dict(props.bootstrap_timeouts)}
        if props.file_system is not None:
            config["SharedStorage"] = [
                {
                    "MountDir": props.fsx_mount_dir,
                    "Name": "fsx",
                    "StorageType": "FsxLustre",
                    "FsxLustreSettings": {"FileSystemId": props.file_system.file_system_id},
                }
            ]
        if props.login_count:
            config["LoginNodes"] = {
                "Pools": [
                    {
                        "Name": "login",
                        "InstanceType": props.login_instance_type,
                        "Count": props.login_count,
                        # Without its own, a pool takes the head node's (ParallelCluster 3.11+); said outright.
                        "Ssh": {"AllowedIps": props.ssh_allowed_ips},
                        "CustomActions": self._on_node_configured("login"),
                        "Iam": {
                            "AdditionalIamPolicies": [
                                {"Policy": self.ssm_agent_policy.managed_policy_arn},
                                {"Policy": self._login_read_policy().managed_policy_arn},
                            ]
                        },
                        "Networking": {
                            "SubnetIds": [props.subnet.subnet_id],
                            **(
                                {"AdditionalSecurityGroups": head_networking["AdditionalSecurityGroups"]}
                                if props.security_groups
                                else {}
                            ),
                        },
                    }
                ]
            }
        return config
