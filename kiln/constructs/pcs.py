"""PcsCluster: an AWS PCS Slurm cluster with EFA node groups, a login group and one queue per group."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from aws_cdk import CfnOutput
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_pcs as pcs
from constructs import Construct

from kiln.bootstrap.fetch import fetch_user_data
from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.limits import SERVICE_NODE_ROOT_VOLUME_GIB
from kiln.catalog.names import NEURON_GRES, neuron_device_files
from kiln.catalog.platforms import at_least, newest_pcs_slurm, pcs_slurm_versions, service_fact, version_key
from kiln.constructs import acknowledgements
from kiln.constructs._checks import PropError, require, require_in, require_node_group, unresolved
from kiln.constructs.ids import hashed_id
from kiln.constructs.launch_template import CapacityOption, EfaLaunchTemplate, EfaLaunchTemplateProps
from kiln.constructs.node_access import ssm_agent_statements
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.review import acknowledge_wildcards

ClusterSize = Literal["SMALL", "MEDIUM", "LARGE"]
CLUSTER_SIZES: tuple[str, ...] = get_args(ClusterSize)
# PCS only hands instance profiles to nodes when the role lives under this path (or is named AWSPCS...).
PCS_ROLE_PATH = "/aws-pcs/"
# Hex digits of the digest a node group's PCS name ends in (node_group_name).
NAME_DIGEST_LENGTH = 6
# The SlurmCustomSettingProperty of each PCS resource that takes slurm.conf parameters.
SlurmSettingT = TypeVar(
    "SlurmSettingT",
    pcs.CfnCluster.SlurmCustomSettingProperty,
    pcs.CfnQueue.SlurmCustomSettingProperty,
    pcs.CfnComputeNodeGroup.SlurmCustomSettingProperty,
)


def pcs_name_rule(kind: str) -> dict[str, Any]:
    """Return PCS's rule for KIND's names (compute_node_group or queue): min, max and pattern (platforms.json)."""
    rule: dict[str, Any] = service_fact("pcs", "name_rules").value[kind]
    return rule


def node_group_name(name: str, instance_types: Sequence[str]) -> str:
    """Return the name PCS gives node group NAME: NAME, cut to fit, then a digest of NAME and INSTANCE_TYPES.

    PCS cannot change a node group's name or instance types (platforms.json, pcs.node_group_fixed): CloudFormation
    replaces the group, creating the new one before it deletes the old. Both live in the name's digest, so the new
    group never takes the old one's name, and every other change keeps the name and updates the group in place.
    """
    longest = pcs_name_rule("compute_node_group")["max"]
    digest = hashlib.sha256(json.dumps([name, sorted(instance_types)]).encode()).hexdigest()[:NAME_DIGEST_LENGTH]
    return f"{name[: longest - NAME_DIGEST_LENGTH - 1].rstrip('-')}-{digest}"


@dataclass(frozen=True)
class GroupSlurmSettings:
    """What PCS writes into Slurm's configuration for one compute node group and its queue.

    gres: gres.conf records (slurmConfiguration.gresCustomSettings); PCS adds NodeName=.
    node: the node group's custom Slurm settings (Gres, ...).
    queue: the queue's custom Slurm settings (OverSubscribe, ...).
    """

    gres: tuple[dict[str, str], ...] = ()
    node: dict[str, str] = field(default_factory=dict)
    queue: dict[str, str] = field(default_factory=dict)


def exclusive_queue_setting(slurm_version: str) -> tuple[str, str]:
    """Return the queue setting (name, value) that gives each job whole nodes on SLURM_VERSION (platforms.json,
    pcs.exclusive_queue): the newest entry at or below it (OverSubscribe=EXCLUSIVE; Exclusive=NODE from 26.05)."""
    fitting = [e for e in service_fact("pcs", "exclusive_queue").value if at_least(slurm_version, e["from_version"])]
    if not fitting:
        raise PropError(f"slurm_version: {slurm_version!r} is older than every PCS exclusive-queue setting kiln knows")
    newest = max(fitting, key=lambda entry: version_key(entry["from_version"]))
    return newest["parameter"], newest["value"]


def group_slurm_settings(instance_type: str, slurm_version: str) -> GroupSlurmSettings:
    """Return PCS's Slurm settings for a compute node group of INSTANCE_TYPE on SLURM_VERSION.

    A type with Neuron devices gets a whole-node queue (one job per node, as AWS's Neuron Slurm samples submit with
    --exclusive), and, from the version PCS is documented to take GRES records on (platforms.json, pcs.gres_settings),
    its devices as GRES `neuron`: one gres.conf record of its /dev/neuronN files and the Gres setting that makes them
    schedulable. PCS configures GPUs itself: a GPU type (or one without accelerators) gets nothing.
    """
    devices = catalog_instance_type(instance_type).neuron_count
    if not devices:
        return GroupSlurmSettings()
    queue = dict([exclusive_queue_setting(slurm_version)])
    gres = service_fact("pcs", "gres_settings").value
    if not at_least(slurm_version, gres["from_version"]):
        return GroupSlurmSettings(queue=queue)
    record = {"Name": NEURON_GRES, "File": neuron_device_files(devices)}
    return GroupSlurmSettings(gres=(record,), node={gres["node_setting"]: f"{NEURON_GRES}:{devices}"}, queue=queue)


@dataclass(frozen=True, kw_only=True)
class PcsNodeGroup:
    """One PCS compute node group.

    name: the group's name and its queue's (lowercase, digits, '-'); PCS names the node group node_group_name(...).
    instance_type: one EC2 type per group.
    min_count: the nodes that stay up; default 0.
    max_count: the most nodes the group scales up to; default 1.
    capacity: on-demand (default), spot, capacity-block or reservation.
    root_volume_gib: encrypted gp3 root volume; default 200.
    placement_group: a cluster placement group for EFA (kiln's ClusterPlacementGroup.placement_group, or
        ec2.PlacementGroup.from_placement_group_name for one made elsewhere); default none: EC2 places the
        nodes where it has capacity.
    """

    name: str
    instance_type: str
    min_count: int = 0
    max_count: int = 1
    capacity: CapacityOption = field(default_factory=CapacityOption)
    root_volume_gib: int = SERVICE_NODE_ROOT_VOLUME_GIB
    placement_group: ec2.IPlacementGroup | None = None

    def __post_init__(self) -> None:
        require_node_group(self, self.name, self.min_count, self.max_count)
        shortest = pcs_name_rule("queue")["min"]
        require(
            self, len(self.name) >= shortest, "name", self.name, f"at least {shortest} characters (PCS's queue names)"
        )


@dataclass(frozen=True, kw_only=True)
class PcsClusterProps:
    """Props for PcsCluster.

    vpc: the cluster's VPC.
    subnet: the cluster's private subnet (one AZ, with the EFA placement group and FSx).
    efa_security_group: joins every node interface.
    ami_id: an image with the PCS agent and Slurm for slurm_version (AMI id or a CfnParameter's value).
    root_device_name: the device ami_id boots from, where every node's root volume is mapped: the AMI's
        RootDeviceName, or kiln.catalog.platforms.root_device_name(os) for an AMI named only at deploy (/dev/xvda for
        PCS's sample AMIs, which run Amazon Linux 2023).
    compute_groups: compute node groups, each with its own queue.
    login: the login node group (static); default none: no login nodes.
    bootstrap: the bundle nodes fetch and run at boot (BootstrapAssets.node_bootstrap for kiln's `pcs` bundle); the
        launch template's user data carries its digest, and a node refuses a zip that does not match it.
    cluster_env: the bundle's deploy-time values.
    slurm_version: PCS Slurm version; default the newest PCS runs (kiln.catalog.platforms).
    size: controller size, SMALL (default), MEDIUM or LARGE.
    scale_down_idle_seconds: idle time before dynamic nodes are stopped; default 600.
    slurm_custom_settings: further slurm.conf parameters PCS accepts at cluster level; default none: PCS's own
        values.
    security_groups: further groups for the nodes' primary interface (file systems, ...); default none: the
        nodes join the EFA group alone.
    node_tags: the tags of every node's instance, volumes and network interfaces, compute and login alike (the
        spec's and kiln:cluster): their launch templates' TagSpecifications; default none: the nodes carry only
        the tags PCS adds.
    """

    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    efa_security_group: ec2.ISecurityGroup
    ami_id: str
    root_device_name: str
    compute_groups: Sequence[PcsNodeGroup]
    bootstrap: NodeBootstrap
    cluster_env: Mapping[str, str]
    login: PcsNodeGroup | None = None
    slurm_version: str = field(default_factory=newest_pcs_slurm)
    size: ClusterSize = "SMALL"
    scale_down_idle_seconds: int = 600
    slurm_custom_settings: Mapping[str, str] = field(default_factory=dict)
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    node_tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_in(self, "size", self.size, CLUSTER_SIZES)
        require_in(self, "slurm_version", self.slurm_version, pcs_slurm_versions())
        require(self, bool(self.compute_groups), "compute_groups", list(self.compute_groups), "at least one node group")
        names = [g.name for g in self.compute_groups] + ([self.login.name] if self.login else [])
        require(self, len(set(names)) == len(names), "node group names", names, "unique names")
        groups = [*self.compute_groups, *([self.login] if self.login else [])]
        pcs_names = [node_group_name(g.name, [g.instance_type]) for g in groups]
        require(self, len(set(pcs_names)) == len(pcs_names), "node group names in PCS", pcs_names, "unique names")
        require(
            self,
            self.scale_down_idle_seconds >= 60,
            "scale_down_idle_seconds",
            self.scale_down_idle_seconds,
            "60 or more",
        )
        if not unresolved(self.ami_id):
            require(
                self,
                bool(re.match(r"^ami-[0-9a-f]+$", self.ami_id)),
                "ami_id",
                self.ami_id,
                "an AMI id such as ami-0123456789abcdef0",
            )


class PcsCluster(Construct):
    """AWS PCS cluster, node groups with EFA launch templates, queues, and a least-privilege node role.

    A compute group whose instance type has Neuron devices gets a whole-node queue and its devices as GRES `neuron`
    where the Slurm version takes them (group_slurm_settings).
    """

    def __init__(self, scope: Construct, construct_id: str, props: PcsClusterProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        # No Name: CloudFormation names the cluster, so a change PCS cannot make in place (size, subnet, security
        # group; platforms.json, pcs.cluster_fixed) creates a second cluster beside the first instead of failing.
        self.security_group = ec2.SecurityGroup(
            self,
            "ClusterSecurityGroup",
            vpc=props.vpc,
            description="PCS controller and nodes: Slurm and node-to-node traffic among members; egress for bootstrap",
        )
        # Ingress from members only: the group allows all outbound already, so an egress rule to itself would be
        # dropped with a synth warning (what connections.allow_internally adds).
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "Slurm controller, slurmd, srun"
        )
        self.cluster = pcs.CfnCluster(
            self,
            "Resource",
            scheduler=pcs.CfnCluster.SchedulerProperty(type="SLURM", version=props.slurm_version),
            size=props.size,
            networking=pcs.CfnCluster.NetworkingProperty(
                subnet_ids=[props.subnet.subnet_id], security_group_ids=[self.security_group.security_group_id]
            ),
            slurm_configuration=pcs.CfnCluster.SlurmConfigurationProperty(
                scale_down_idle_time_in_seconds=props.scale_down_idle_seconds,
                slurm_custom_settings=_custom_settings(
                    pcs.CfnCluster.SlurmCustomSettingProperty, props.slurm_custom_settings
                )
                or None,
            ),
        )
        self.role = self._node_role()
        self.instance_profile = iam.CfnInstanceProfile(
            self, "InstanceProfile", roles=[self.role.role_name], path=PCS_ROLE_PATH
        )
        self.node_groups: dict[str, pcs.CfnComputeNodeGroup] = {}
        self.queues: dict[str, pcs.CfnQueue] = {}
        for group in props.compute_groups:
            slurm = group_slurm_settings(group.instance_type, props.slurm_version)
            self.node_groups[group.name] = self._node_group(group, role="worker", slurm=slurm)
            # The queue keeps the group's name (what `sbatch -p` takes) and follows a replaced node group in place.
            self.queues[group.name] = pcs.CfnQueue(
                self,
                hashed_id("Queue", group.name),
                cluster_id=self.cluster.attr_id,
                name=group.name,
                compute_node_group_configurations=[
                    pcs.CfnQueue.ComputeNodeGroupConfigurationProperty(
                        compute_node_group_id=self.node_groups[group.name].attr_id
                    )
                ],
                slurm_configuration=pcs.CfnQueue.SlurmConfigurationProperty(
                    slurm_custom_settings=_custom_settings(pcs.CfnQueue.SlurmCustomSettingProperty, slurm.queue)
                )
                if slurm.queue
                else None,
            )
        self.login_group = self._node_group(props.login, role="login") if props.login else None
        CfnOutput(self, "ClusterId", value=self.cluster.attr_id, description="AWS PCS cluster id")
        if self.login_group is not None:
            CfnOutput(
                self,
                "LoginNodeGroupId",
                value=self.login_group.attr_id,
                description="Login nodes: EC2 instances tagged aws:pcs:compute-node-group-id with this id",
            )

    def _node_role(self) -> iam.Role:
        props = self._props
        role = iam.Role(
            self,
            "NodeRole",
            path=PCS_ROLE_PATH,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="kiln PCS nodes: register with the cluster, fetch the bootstrap bundle, SSM Agent",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["pcs:RegisterComputeNodeGroupInstance"], resources=[self.cluster.attr_arn])
        )
        props.bootstrap.grant_read(role)
        # Session Manager and Run Command, not AmazonSSMManagedInstanceCore: PCS requires only the registration above
        # and names managed policies as optional additions
        # (https://docs.aws.amazon.com/pcs/latest/userguide/security-instance-profiles.html).
        for statement in ssm_agent_statements(self):
            role.add_to_policy(statement)
        acknowledge_wildcards(role, acknowledgements.NODE_SSM_GRANTS)
        return role

    def _node_group(
        self, group: PcsNodeGroup, role: str, slurm: GroupSlurmSettings | None = None
    ) -> pcs.CfnComputeNodeGroup:
        props = self._props
        bootstrap = props.bootstrap
        user_data = fetch_user_data(
            bootstrap.s3_url,
            bootstrap.entry_point,
            props.cluster_env,
            role=role,
            bundle_sha256=bootstrap.content_sha256,
        )
        template = EfaLaunchTemplate(
            self,
            hashed_id("LaunchTemplate", group.name),
            EfaLaunchTemplateProps(
                instance_type=group.instance_type,
                efa_security_group=props.efa_security_group,
                security_groups=[self.security_group, *props.security_groups],
                root_device_name=props.root_device_name,
                root_volume_gib=group.root_volume_gib,
                capacity=group.capacity,
                placement_group=group.placement_group,
                user_data_parts=[user_data],
                tags=props.node_tags,
            ),
        )
        return pcs.CfnComputeNodeGroup(
            self,
            hashed_id("NodeGroup", group.name),
            cluster_id=self.cluster.attr_id,
            name=node_group_name(group.name, [group.instance_type]),
            ami_id=props.ami_id,
            custom_launch_template=pcs.CfnComputeNodeGroup.CustomLaunchTemplateProperty(
                template_id=template.launch_template_id, version=template.latest_version
            ),
            iam_instance_profile_arn=self.instance_profile.attr_arn,
            instance_configs=[pcs.CfnComputeNodeGroup.InstanceConfigProperty(instance_type=group.instance_type)],
            scaling_configuration=pcs.CfnComputeNodeGroup.ScalingConfigurationProperty(
                min_instance_count=group.min_count, max_instance_count=group.max_count
            ),
            subnet_ids=[props.subnet.subnet_id],
            purchase_option=group.capacity.purchase_option,
            slurm_configuration=pcs.CfnComputeNodeGroup.SlurmConfigurationProperty(
                gres_custom_settings=[dict(record) for record in slurm.gres] or None,
                slurm_custom_settings=_custom_settings(pcs.CfnComputeNodeGroup.SlurmCustomSettingProperty, slurm.node)
                or None,
            )
            if slurm is not None and (slurm.gres or slurm.node)
            else None,
        )

    @property
    def cluster_id(self) -> str:
        return self.cluster.attr_id

    @property
    def cluster_arn(self) -> str:
        return self.cluster.attr_arn

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections


def _custom_settings(setting: type[SlurmSettingT], settings: Mapping[str, str]) -> list[SlurmSettingT]:
    """Return SETTINGS as a list of SETTING (a PCS resource's SlurmCustomSettingProperty), by name."""
    return [setting(parameter_name=name, parameter_value=value) for name, value in sorted(settings.items())]
