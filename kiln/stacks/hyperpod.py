"""spec -> HyperPodClusterProps: instance groups by role, the Slurm layout HyperPod's scripts read."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3

from kiln.constructs import HyperPodClusterProps, HyperPodInstanceGroup, NodeBootstrap
from kiln.spec import ClusterSpec
from kiln.stacks.compute_context import ComputeContext


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
    )
