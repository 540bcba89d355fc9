"""AWS PCS: spec -> PcsClusterProps (node groups, login group and image), and the PcsCluster the compute stack gets."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from constructs import Construct

from kiln.catalog.limits import PCS_CLUSTER_SIZES
from kiln.catalog.platforms import image_profile, root_device_name
from kiln.constructs import NodeBootstrap, PcsCluster, PcsClusterProps, PcsNodeGroup
from kiln.contracts.backends import PCS_LOGIN_NODE_GROUP
from kiln.contracts.outputs import ComputeOutput
from kiln.node_config.nodes import node_architecture
from kiln.spec import ClusterSpec
from kiln.stacks.backends.base import BackendBuild
from kiln.stacks.compute_context import ComputeContext
from kiln.stacks.errors import UnbuildableSpec

if TYPE_CHECKING:
    from kiln.stacks.compute import ComputeStack


def sample_ami_name(spec: ClusterSpec) -> str:
    """Return the name pattern of the PCS sample AMIs nodes boot without an ami_id (the newest by date is current)."""
    pattern = image_profile("pcs-sample").fact("name_pattern").value
    return pattern.format(os=spec.image_os, architecture=node_architecture(spec), version=spec.slurm_version)


def pcs_ami(scope: Construct, context: ComputeContext) -> str:
    """Return the AMI nodes boot (baked or the spec's), or a stack parameter asking for the PCS sample AMI at deploy."""
    if context.image_id:
        return context.image_id
    parameter = cdk.CfnParameter(
        scope,
        "PcsAmiId",
        type="AWS::EC2::Image::Id",
        description=f"The newest AWS PCS sample AMI named {sample_ami_name(context.spec)} in this region (aws ec2 "
        "describe-images --owners amazon --filters Name=name,Values=NAME), or set compute.image.ami_id in the spec",
    )
    return parameter.value_as_string


def pcs_size(spec: ClusterSpec) -> str:
    """Return the smallest PCS controller size that manages every node the spec can run at once."""
    nodes = sum(g.max_count for g in spec.compute.groups) + spec.compute.login_nodes.count
    fitting = [size for size, most in sorted(PCS_CLUSTER_SIZES.items(), key=lambda item: item[1]) if nodes <= most]
    if not fitting:
        raise UnbuildableSpec(f"compute: {nodes} nodes, allowed: at most {max(PCS_CLUSTER_SIZES.values())} on AWS PCS")
    return fitting[0]


def pcs_cluster_props(context: ComputeContext, *, bootstrap: NodeBootstrap, ami_id: str) -> PcsClusterProps:
    """Translate the spec into PCS props: one node group and queue per spec group, a static login group."""
    spec, network = context.spec, context.network
    login = spec.compute.login_nodes
    return PcsClusterProps(
        vpc=network.training_vpc.vpc,
        subnet=network.training_vpc.compute_subnet,
        efa_security_group=network.efa.security_group,
        ami_id=ami_id,
        # The spec's OS names the root device: the sample AMI is named only at deploy, and kiln preflight holds an
        # ami_id's RootDeviceName to the same name.
        root_device_name=root_device_name(spec.image_os),
        compute_groups=[PcsNodeGroup(**context.node_group_fields(g)) for g in spec.compute.groups],
        login=PcsNodeGroup(
            name=PCS_LOGIN_NODE_GROUP, instance_type=login.instance_type, min_count=login.count, max_count=login.count
        )
        if login.count
        else None,
        bootstrap=bootstrap,
        cluster_env=context.cluster_env(mounts_fsx=True),
        slurm_version=spec.slurm_version,
        size=pcs_size(spec),
        security_groups=context.client_groups(),
        node_tags=context.node_tags,
    )


def build(stack: ComputeStack, context: ComputeContext, nodes: NodeBootstrap) -> BackendBuild[PcsCluster]:
    """Add the PCS cluster; all its nodes share one role."""
    pcs = PcsCluster(stack, "Pcs", pcs_cluster_props(context, bootstrap=nodes, ami_id=pcs_ami(stack, context)))
    outputs = {ComputeOutput.PCS_CLUSTER_ID: pcs.cluster.attr_id}
    if pcs.login_group is not None:
        outputs[ComputeOutput.PCS_LOGIN_NODE_GROUP_ID] = pcs.login_group.attr_id
    return BackendBuild(construct=pcs, outputs=outputs, node_role=pcs.role, node_groups=pcs.node_groups)
