"""ParallelCluster: spec -> ParallelClusterProps (one Slurm queue per spec group, head and login nodes, FSx), and the
ParallelCluster the compute stack gets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from kiln.constructs import NodeBootstrap, ParallelCluster, ParallelClusterProps, SlurmQueue, attachable_policy
from kiln.node_config.budget import parallelcluster_timeouts
from kiln.stacks.backends.base import BackendBuild, ci_lifecycle_bucket
from kiln.stacks.compute_context import MOUNT_POINT, ComputeContext, capacity_option, wants_placement_group
from kiln.stacks.permissions_boundary import boundary_name, boundary_policy_arn

if TYPE_CHECKING:
    from kiln.stacks.compute import ComputeStack


def parallelcluster_props(
    context: ComputeContext,
    *,
    bootstrap: NodeBootstrap,
    bootstrap_timeouts: Mapping[str, int],
    head_node_policies: Sequence[iam.IManagedPolicy] = (),
    node_policies: Sequence[iam.IManagedPolicy] = (),
    bootstrap_bucket: s3.IBucket | None = None,
) -> ParallelClusterProps:
    """Translate the spec into ParallelCluster props (ParallelCluster makes its own placement groups); the
    OnNodeConfigured script goes to BOOTSTRAP_BUCKET (default: a bucket of the cluster's own)."""
    spec = context.spec
    compute = spec.compute
    queues = [
        SlurmQueue(
            name=g.name,
            instance_type=g.instance_type,
            min_count=g.min_count,
            max_count=g.max_count,
            capacity=capacity_option(g),
            placement_group=wants_placement_group(g),
            root_volume_gib=g.root_volume_gib,
        )
        for g in compute.groups
    ]
    return ParallelClusterProps(
        cluster_name=spec.name,
        subnet=context.network.training_vpc.compute_subnet,
        queues=queues,
        bootstrap=bootstrap,
        # ParallelCluster mounts FSx itself (SharedStorage); the bootstrap does not.
        cluster_env=context.cluster_env(mounts_fsx=False),
        head_node_instance_type=compute.head_node.instance_type,
        login_instance_type=compute.login_nodes.instance_type,
        login_count=compute.login_nodes.count,
        os=spec.image_os,
        # The head and login nodes boot ami_id (or ParallelCluster's official AMI), which no deploy changes; with a
        # bake, the queues boot the newest baked image, read at each deploy (an update drains and replaces them).
        custom_ami=compute.image.ami_id,
        compute_ami=context.image_id if compute.image.bake else None,
        file_system=context.storage.lustre,
        fsx_mount_dir=MOUNT_POINT,
        security_groups=context.client_groups(),
        head_node_policies=tuple(head_node_policies),
        node_policies=tuple(node_policies),
        ssh_allowed_ips=context.network.training_vpc.vpc.vpc_cidr_block,
        # The spec's resilience: Slurm runs kiln's health check, and ParallelCluster its GPU check on GPU queues.
        health_check_interval_s=spec.resilience.health_check_interval_s if spec.resilience.health_checks else None,
        gpu_health_checks=spec.resilience.health_checks,
        bootstrap_timeouts=bootstrap_timeouts,
        bootstrap_bucket=bootstrap_bucket,
        permissions_boundary=boundary_policy_arn(boundary) if (boundary := boundary_name(spec, context.ci)) else None,
        # Its custom resource is no taggable resource: ParallelCluster tags what it launches from the config's Tags.
        tags=context.node_tags,
    )


def agent_policies(stack: ComputeStack, context: ComputeContext) -> list[iam.IManagedPolicy]:
    """ParallelCluster's head node runs the agent: a managed policy letting it write to the workspace."""
    workspace = context.agent_workspace
    if workspace is None:
        return []
    policy = attachable_policy(
        stack,
        "MetricsWriter",
        description=f"kiln {context.spec.name}: the head node's Prometheus agent writes to the metrics workspace",
        statements=workspace.remote_write_statements(),
    )
    return [policy]


def build(stack: ComputeStack, context: ComputeContext, nodes: NodeBootstrap) -> BackendBuild[ParallelCluster]:
    """Add the ParallelCluster: its head node gets the agent's grant, and every node the session logging policy, as
    managed policies in its configuration (it makes the nodes' roles itself)."""
    session_logs = stack.session_logs
    cluster = ParallelCluster(
        stack,
        "ParallelCluster",
        parallelcluster_props(
            context,
            bootstrap=nodes,
            bootstrap_timeouts=parallelcluster_timeouts(context.spec, stack.config),
            head_node_policies=agent_policies(stack, context),
            node_policies=[session_logs.attachable_node_policy()] if session_logs else [],
            bootstrap_bucket=ci_lifecycle_bucket(stack),
        ),
    )
    return BackendBuild(construct=cluster, outputs={})
