"""SageMaker HyperPod, orchestrated by Slurm or EKS: spec -> HyperPodClusterProps (instance groups by role, the Slurm
layout HyperPod's scripts read), and the HyperPodCluster the compute stack gets, with its EKS cluster under EKS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3

from kiln.constructs import (
    EksTrainingCluster,
    HyperPodCluster,
    HyperPodClusterProps,
    HyperPodInstanceGroup,
    NodeBootstrap,
)
from kiln.contracts.outputs import ComputeOutput
from kiln.spec import ClusterSpec
from kiln.stacks.backends.base import BackendBuild, ci_lifecycle_bucket
from kiln.stacks.backends.eks import ci_admin, eks_props
from kiln.stacks.compute_context import ComputeContext

if TYPE_CHECKING:
    from kiln.stacks.compute import ComputeStack


def hyperpod_groups(spec: ClusterSpec) -> list[HyperPodInstanceGroup]:
    """Return the instance groups: controller and login (Slurm only), then one fixed-size group per spec group."""
    compute, platform = spec.compute, spec.platform
    groups = []
    if platform.controller_group is not None:
        groups.append(
            HyperPodInstanceGroup(
                name=platform.controller_group,
                instance_type=compute.head_node.instance_type,
                count=1,
                role="controller",
            )
        )
    if platform.login_group is not None and compute.login_nodes.count:
        groups.append(
            HyperPodInstanceGroup(
                name=platform.login_group,
                instance_type=compute.login_nodes.instance_type,
                count=compute.login_nodes.count,
                role="login",
            )
        )
    groups += [
        HyperPodInstanceGroup(
            name=g.name, instance_type=g.instance_type, count=g.max_count, storage_gib=g.root_volume_gib
        )
        for g in compute.groups
    ]
    return groups


def provisioning_parameters(context: ComputeContext, groups: list[HyperPodInstanceGroup]) -> dict[str, Any]:
    """Return the Slurm layout in HyperPod's provisioning_parameters.json form."""
    named = {g.role: g.name for g in groups if g.role != "worker"}
    parameters: dict[str, Any] = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": named["controller"],
        "worker_groups": [
            {"instance_group_name": g.name, "partition_name": g.name} for g in groups if g.role == "worker"
        ],
    }
    if "login" in named:
        parameters["login_group"] = named["login"]
    lustre = context.storage.lustre
    if lustre is not None:
        parameters |= {"fsx_dns_name": lustre.dns_name, "fsx_mountname": lustre.mount_name}
    return parameters


def hyperpod_props(
    context: ComputeContext,
    *,
    lifecycle: NodeBootstrap,
    eks_cluster: eks.ICluster | None,
    lifecycle_bucket: s3.IBucket | None = None,
) -> HyperPodClusterProps:
    """Translate the spec into HyperPod props; EKS_CLUSTER orchestrates when the spec says eks.

    LIFECYCLE_BUCKET: where the lifecycle scripts go; default: a bucket of the cluster's own.
    """
    spec, network = context.spec, context.network
    groups = hyperpod_groups(spec)
    slurm = spec.platform.runs_slurm
    return HyperPodClusterProps(
        cluster_name=spec.name,
        vpc=network.training_vpc.vpc,
        subnet=network.training_vpc.compute_subnet,
        security_groups=[network.efa.security_group, *context.client_groups()],
        instance_groups=groups,
        lifecycle=lifecycle,
        cluster_env=context.cluster_env(mounts_fsx=True),
        provisioning_parameters=provisioning_parameters(context, groups) if slurm else {},
        orchestrator=spec.effective_orchestrator,
        eks_cluster=eks_cluster,
        lifecycle_bucket=lifecycle_bucket,
        image_id=context.image_id,
        # What replaces a faulty node, and the deep health checks of accelerated nodes (the spec's resilience).
        node_recovery=spec.resilience.node_recovery,
        deep_health_checks=spec.resilience.deep_health_checks,
    )


def build(stack: ComputeStack, context: ComputeContext, nodes: NodeBootstrap) -> BackendBuild[HyperPodCluster]:
    """Add the HyperPod cluster, with the lifecycle scripts NODES holds; under EKS first the EKS cluster its nodes join
    (bare: HyperPod brings the nodes). All its nodes share one role."""
    eks = None
    if context.spec.platform.uses_kubernetes:
        eks = EksTrainingCluster(stack, "Eks", eks_props(context, bootstrap=None, admin_role=ci_admin(stack)))
    props = hyperpod_props(
        context,
        lifecycle=nodes,
        eks_cluster=eks.cluster if eks is not None else None,
        lifecycle_bucket=ci_lifecycle_bucket(stack),
    )
    hyperpod = HyperPodCluster(stack, "HyperPod", props)
    outputs = {ComputeOutput.HYPERPOD_CLUSTER_ARN: hyperpod.cluster.attr_cluster_arn}
    if eks is not None:
        # HyperPod's nodes join as EKS workers: the CNI's identity must exist before the first one, and HyperPod's
        # dependencies must be installed before the cluster is created.
        hyperpod.cluster.node.add_dependency(eks.cni_identity, eks.pod_identity_agent)
        if eks.hyperpod_dependencies_ready is not None:
            hyperpod.cluster.node.add_dependency(eks.hyperpod_dependencies_ready)
        outputs[ComputeOutput.EKS_CLUSTER_NAME] = eks.cluster.cluster_name
    return BackendBuild(construct=hyperpod, outputs=outputs, node_role=hyperpod.role, eks=eks)
