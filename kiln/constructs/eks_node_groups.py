"""The node groups of an EksTrainingCluster: EFA GPU and Neuron groups, the CPU system group, their launch templates.

EksTrainingCluster adds them with add_accelerated_node_group and add_system_node_group: each launch template is a
child of the cluster construct and each node group a child of its eks.Cluster, so their construct ids (and logical
ids) are the cluster's own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.facts import ACCELERATOR_KINDS, UnknownInstanceType
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.catalog.limits import EBS_GP3_MAX_GIB, EKS_SYSTEM_NODE_COUNT, EKS_SYSTEM_NODE_TYPE
from kiln.catalog.names import NODE_GROUP_NAME_RULE, is_node_group_name
from kiln.catalog.platforms import image_profile, root_device_name
from kiln.constructs import acknowledgements
from kiln.constructs._checks import PropError, field_name, refuse, require, require_in
from kiln.constructs.children import l1_of
from kiln.constructs.eks_addons import GPU_PRESENT_LABEL, AcceleratorKind
from kiln.constructs.eks_disruption import accelerated_update_config
from kiln.constructs.eks_scheduling import node_template_tags
from kiln.constructs.ids import hashed_id
from kiln.constructs.launch_template import (
    CapacityOption,
    EfaLaunchTemplate,
    EfaLaunchTemplateProps,
    launch_tag_specifications,
)
from kiln.constructs.node_access import ssm_agent_statements
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.review import acknowledge_wildcards
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP
from kiln.contracts.tags import TAG_EKS_CLUSTER, TAG_NODE_GROUP

# AWS-managed policies of the node role, what nodes themselves need (each acknowledged in
# acknowledgements.EKS_NODE_POLICIES). The VPC CNI's policy is on its own Pod Identity role instead; Session Manager (an
# operator's shell, `kiln ci run`'s port forward) takes SSM Agent's own actions (kiln.constructs.node_access), not
# AmazonSSMManagedInstanceCore.
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
)

AcceleratedAmiType = Literal["AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA", "AL2023_x86_64_NEURON"]


@dataclass(frozen=True, kw_only=True)
class AcceleratedImage:
    """An EKS-optimized AL2023 accelerated image: its node group AMI type, the accelerators it drives, its CPU."""

    ami_type: eks.NodegroupAmiType
    accelerator: AcceleratorKind
    architecture: str


# The images whose accelerator driver and EFA host software come preinstalled, by EKS API name: NVIDIA's for the
# G and P types, Neuron's for inf1, inf2, trn1 and trn2 (EKS User Guide, "Use EKS-optimized accelerated AMIs for GPU
# instances"). A group's instance type decides among them (kiln's catalog: accelerator kind and architectures).
ACCELERATED_AMI_TYPES: dict[str, AcceleratedImage] = {
    "AL2023_x86_64_NVIDIA": AcceleratedImage(
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA, accelerator="gpu", architecture="x86_64"
    ),
    "AL2023_ARM_64_NVIDIA": AcceleratedImage(
        ami_type=eks.NodegroupAmiType.AL2023_ARM_64_NVIDIA, accelerator="gpu", architecture="arm64"
    ),
    "AL2023_x86_64_NEURON": AcceleratedImage(
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON, accelerator="neuron", architecture="x86_64"
    ),
}
ACCELERATOR_NAMES = {"gpu": "GPUs", "neuron": "Neuron devices"}
ACCELERATED_TYPE_RULE = "a type with NVIDIA GPUs or AWS Neuron devices (Trainium, Inferentia)"
# Node labels by accelerator: the NVIDIA device plugin's chart selects its nodes by label; kiln's Neuron device plugin
# selects by instance type (kiln.constructs.neuron_addons), so Neuron nodes need none.
ACCELERATOR_LABELS: dict[str, Mapping[str, str]] = {"gpu": GPU_PRESENT_LABEL, "neuron": {}}
# Spot is asked on the node group: EKS refuses launch templates that request spot themselves.
NODEGROUP_CAPACITY = {
    "ONDEMAND": eks.CapacityType.ON_DEMAND,
    "SPOT": eks.CapacityType.SPOT,
    "CAPACITY_BLOCK": eks.CapacityType.CAPACITY_BLOCK,
}
INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
# Every node group boots an EKS-optimized AMI of one OS (its AMI types above and the system group's are all AL2023;
# platforms.json, images.eks-al2023), whose root device the launch templates map (ec2.root_device_names).
(EKS_NODE_OS,) = image_profile("eks-al2023").fact("operating_systems").value
EKS_ROOT_DEVICE = root_device_name(EKS_NODE_OS)
# IMDS answers the node itself (and host-network pods such as aws-node and the Pod Identity agent), never a
# pod behind another hop: pods cannot take the node role. What needs AWS gets its own identity (Pod Identity).
NODE_HOP_LIMIT = 1


@dataclass(frozen=True, kw_only=True)
class AcceleratedNodeGroup:
    """One EKS managed node group of NVIDIA GPU or AWS Neuron (Trainium, Inferentia) instances with EFA, in one AZ.

    name: kiln's name for the group (lowercase, digits, '-'); nodes carry it as label kiln.io/node-group.
    instance_type: one EC2 type with GPUs or Neuron devices; its accelerators, architectures and EFA interfaces come
        from kiln's catalog.
    min_count: the fewest nodes the group scales down to; default 0.
    max_count: the most nodes the group scales up to; default 1.
    desired_count: nodes at creation; default min_count.
    capacity: on-demand (default), spot, capacity-block or reservation.
    root_volume_gib: encrypted gp3 root volume; default 200.
    placement_group: a cluster placement group for EFA (ec2.IPlacementGroup); default none: EC2 places the
        nodes where it has capacity.
    ami_type: an EKS-optimized AL2023 accelerated image; default the one for the instance type's accelerators and
        architecture (NVIDIA x86_64 or ARM_64, or Neuron x86_64). One for other accelerators is refused.
    labels: further Kubernetes node labels; default none: kiln's own labels alone.
    """

    name: str
    instance_type: str
    min_count: int = 0
    max_count: int = 1
    desired_count: int | None = None
    capacity: CapacityOption = field(default_factory=CapacityOption)
    root_volume_gib: int = 200
    placement_group: ec2.IPlacementGroup | None = None
    ami_type: AcceleratedAmiType | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(self, is_node_group_name(self.name), "name", self.name, NODE_GROUP_NAME_RULE)
        require(
            self,
            0 <= self.min_count <= self.effective_desired_count <= self.max_count and self.max_count >= 1,
            "min_count/desired_count/max_count",
            (self.min_count, self.desired_count, self.max_count),
            "0 <= min_count <= desired_count <= max_count, max_count >= 1",
        )
        kind = self.accelerator_kind
        require(self, kind in ACCELERATOR_KINDS, "instance_type", self.instance_type, ACCELERATED_TYPE_RULE)
        images = self.fitting_ami_types
        require(self, bool(images), "instance_type", self.instance_type, "a type an EKS accelerated image supports")
        if self.ami_type is not None:
            require_in(self, "ami_type", self.ami_type, ACCELERATED_AMI_TYPES)
            require(
                self,
                self.ami_type in images,
                "ami_type",
                self.ami_type,
                f"an image for {self.instance_type}'s {ACCELERATOR_NAMES[kind]}: {', '.join(images)}",
            )
        require(
            self,
            NODE_GROUP_LABEL not in self.labels,
            "labels",
            dict(self.labels),
            f"no {NODE_GROUP_LABEL} (kiln sets it)",
        )

    @property
    def accelerator_kind(self) -> str:
        """Return the instance type's accelerators as kiln's catalog names them: 'gpu' or 'neuron'; a type with
        neither is refused."""
        try:
            kind = catalog_instance_type(self.instance_type).accelerator_kind
        except UnknownInstanceType as error:
            close = f", such as {' or '.join(error.suggestions)}" if error.suggestions else ""
            raise PropError(
                f"{field_name(self, 'instance_type')}: got {self.instance_type!r}; allowed: a type in kiln's "
                f"catalog{close}"
            ) from error
        if kind is None:
            refuse(self, "instance_type", self.instance_type, ACCELERATED_TYPE_RULE)
        return kind

    @property
    def fitting_ami_types(self) -> list[str]:
        """Return the accelerated images for the instance type's accelerators and architectures, the default first."""
        architectures = catalog_instance_type(self.instance_type).architectures
        return [
            name
            for name, image in ACCELERATED_AMI_TYPES.items()
            if image.accelerator == self.accelerator_kind and image.architecture in architectures
        ]

    @property
    def effective_ami_type(self) -> str:
        return self.ami_type or self.fitting_ami_types[0]

    @property
    def effective_desired_count(self) -> int:
        return self.min_count if self.desired_count is None else self.desired_count


@dataclass(frozen=True, kw_only=True)
class SystemNodeGroup:
    """The CPU node group for cluster services (CoreDNS, the training operator, the FSx CSI controller).

    instance_type: an EC2 type; default m5.xlarge.
    count: fixed number of nodes; default 2 so a node loss leaves the services up.
    root_volume_gib: encrypted gp3 root volume; default 50.
    """

    instance_type: str = EKS_SYSTEM_NODE_TYPE
    count: int = EKS_SYSTEM_NODE_COUNT
    root_volume_gib: int = 50

    def __post_init__(self) -> None:
        require(self, bool(INSTANCE_TYPE.match(self.instance_type)), "instance_type", self.instance_type, "an EC2 type")
        require(self, 1 <= self.count <= 100, "count", self.count, "1 to 100")
        require(
            self, 20 <= self.root_volume_gib <= EBS_GP3_MAX_GIB, "root_volume_gib", self.root_volume_gib, "20 to 16384"
        )


def node_role(scope: Construct, bootstrap: NodeBootstrap | None) -> iam.Role:
    """Return the role of every node group's nodes, in SCOPE: join the cluster, pull images, SSM Agent, and read
    BOOTSTRAP's bundle (None: the nodes run none)."""
    role = iam.Role(
        scope,
        "NodeRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description="kiln EKS nodes: join the cluster, image pulls, SSM Agent, bootstrap bundle",
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_POLICIES],
    )
    for statement in ssm_agent_statements(scope):
        role.add_to_policy(statement)
    acknowledge_wildcards(role, acknowledgements.NODE_SSM_GRANTS)
    if bootstrap is not None:
        bootstrap.grant_read(role)
    return role


def set_node_repair(nodegroup: eks.Nodegroup, enabled: bool) -> None:
    """Switch EKS's node repair of NODEGROUP on or off, written either way (CDK's node groups leave the property out
    when it is off, and a property left out of an update need not turn repair off; platforms.json, eks.node_repair)."""
    cfn = l1_of(nodegroup, eks.CfnNodegroup)
    cfn.node_repair_config = eks.CfnNodegroup.NodeRepairConfigProperty(enabled=enabled)


def add_system_node_group(
    scope: Construct,
    cluster: eks.Cluster,
    system: SystemNodeGroup,
    *,
    subnet: ec2.ISubnet,
    node_role: iam.IRole,
    security_groups: Sequence[ec2.ISecurityGroup],
    node_tags: Mapping[str, str],
    node_repair: bool,
) -> eks.Nodegroup:
    """Add SYSTEM to CLUSTER in SUBNET: its launch template in SCOPE (IMDSv2, the encrypted root volume,
    SECURITY_GROUPS, and NODE_TAGS with kiln's own on each instance, volume and network interface), its managed node
    group in CLUSTER, labelled as the system group, which EKS repairs when NODE_REPAIR (replaces or reboots a node
    whose health conditions fail; platforms.json, eks.node_repair)."""
    template = ec2.CfnLaunchTemplate(
        scope,
        "SystemLaunchTemplate",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            security_group_ids=[g.security_group_id for g in security_groups],
            # `kiln ci run` finds a system node by kiln's two and reaches the private endpoint through it.
            tag_specifications=launch_tag_specifications(
                {**node_tags, TAG_EKS_CLUSTER: cluster.cluster_name, TAG_NODE_GROUP: EKS_SYSTEM_NODE_GROUP}
            ),
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=NODE_HOP_LIMIT
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name=EKS_ROOT_DEVICE,
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=system.root_volume_gib,
                        volume_type="gp3",
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
        ),
    )
    nodegroup = cluster.add_nodegroup_capacity(
        "SystemNodeGroup",
        instance_types=[ec2.InstanceType(system.instance_type)],
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
        min_size=system.count,
        max_size=system.count,
        desired_size=system.count,
        subnets=ec2.SubnetSelection(subnets=[subnet]),
        node_role=node_role,
        launch_template_spec=eks.LaunchTemplateSpec(id=template.ref, version=template.attr_latest_version_number),
        labels={NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP},
        # Drained within the services' own disruption budgets, never forced (CDK's default is to force).
        force_update=False,
    )
    # Its nodes run what a job needs to restart (the training operator, Kueue, the autoscaler, CoreDNS).
    set_node_repair(nodegroup, node_repair)
    return nodegroup


def add_accelerated_node_group(
    scope: Construct,
    cluster: eks.Cluster,
    group: AcceleratedNodeGroup,
    *,
    subnet: ec2.ISubnet,
    node_role: iam.IRole,
    security_groups: Sequence[ec2.ISecurityGroup],
    efa_security_group: ec2.ISecurityGroup,
    user_data_parts: Sequence[str],
    autoscaled: bool,
    node_tags: Mapping[str, str],
    node_repair: bool,
) -> tuple[EfaLaunchTemplate, eks.Nodegroup]:
    """Add GROUP to CLUSTER in SUBNET: its EFA launch template in SCOPE (every interface in EFA_SECURITY_GROUP, the
    primary one in SECURITY_GROUPS too, USER_DATA_PARTS at boot, NODE_TAGS on each instance, volume and network
    interface) and its managed node group in CLUSTER, which carries the tags the cluster-autoscaler reads when
    AUTOSCALED and which EKS repairs when NODE_REPAIR (platforms.json, eks.node_repair). Return both."""
    template = EfaLaunchTemplate(
        scope,
        hashed_id("LaunchTemplate", group.name),
        EfaLaunchTemplateProps(
            instance_type=group.instance_type,
            efa_security_group=efa_security_group,
            security_groups=security_groups,
            root_volume_gib=group.root_volume_gib,
            root_device_name=EKS_ROOT_DEVICE,
            capacity=CapacityOption() if group.capacity.type == "spot" else group.capacity,
            user_data_parts=user_data_parts,
            placement_group=group.placement_group,
            hop_limit=NODE_HOP_LIMIT,
            tags=node_tags,
        ),
    )
    # The template names the instance type, so the node group must name none.
    nodegroup = cluster.add_nodegroup_capacity(
        hashed_id("NodeGroup", group.name),
        ami_type=ACCELERATED_AMI_TYPES[group.effective_ami_type].ami_type,
        capacity_type=NODEGROUP_CAPACITY[group.capacity.purchase_option],
        min_size=group.min_count,
        max_size=group.max_count,
        desired_size=group.effective_desired_count,
        subnets=ec2.SubnetSelection(subnets=[subnet]),
        node_role=node_role,
        launch_template_spec=eks.LaunchTemplateSpec(id=template.launch_template_id, version=template.latest_version),
        labels={**ACCELERATOR_LABELS[group.accelerator_kind], **group.labels, NODE_GROUP_LABEL: group.name},
        # A version update (a new launch template version) drains every node through the eviction API, which the
        # cluster's training disruption budget refuses for a running training pod (kiln.constructs.eks_disruption):
        # after 15 minutes EKS fails the update and CloudFormation rolls the deploy back, rather than evicting the
        # job. Unforced is CloudFormation's default, which CDK's node groups turn around (AWS::EKS::Nodegroup
        # ForceUpdateEnabled); platforms.json, eks.node_group_rolls.
        force_update=False,
        # What a node offers before one exists: the autoscaler reads these from the node group (scale from zero).
        tags=node_template_tags(group.instance_type) if autoscaled else None,
    )
    # A node whose GPUs, Neuron devices, network, kernel or runtime fail their conditions is replaced (or rebooted)
    # with a fresh instance, and the group keeps its size.
    set_node_repair(nodegroup, node_repair)
    # The roll replaces nodes one at a time and launches no instance beyond the group (no surge): a capacity block or
    # reservation has none to spare, and on-demand or spot ones would exceed max_count (platforms.json,
    # eks.node_group_update_strategy). CDK's node group takes MaxUnavailable but not UpdateStrategy.
    cfn = l1_of(nodegroup, eks.CfnNodegroup)
    for key, value in accelerated_update_config(group.capacity.type).items():
        cfn.add_property_override(f"UpdateConfig.{key}", value)
    return template, nodegroup
