"""What a backend builder is, and what it hands the compute stack: one interface, whichever platform the spec names.

A builder is a function of the compute stack, the ComputeContext and the node bootstrap that adds the platform's
constructs to the stack and returns a BackendBuild: the construct, the role every node shares (where one does), the
node groups that launch into kiln's placement groups, the stack outputs only this platform has, and the EKS cluster
observability runs on (where Kubernetes schedules). ComputeStack reads nothing else of a backend; kiln.stacks.backends
maps each platform record of the backend table to its builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.constructs import DataBucket, DataBucketProps, EksTrainingCluster, NodeBootstrap
from kiln.contracts.outputs import ComputeOutput
from kiln.stacks.compute_context import ComputeContext

if TYPE_CHECKING:
    from kiln.stacks.compute import ComputeStack

BackendConstruct = TypeVar("BackendConstruct", bound=Construct, covariant=True)


@dataclass(frozen=True, kw_only=True)
class BackendBuild(Generic[BackendConstruct]):
    """What a builder made, as the compute stack needs it.

    construct: the backend's construct (PcsCluster, ParallelCluster, HyperPodCluster, EksTrainingCluster).
    outputs: the stack outputs of this platform alone, in the order they are written (the stack writes the backend,
        orchestrator and cluster name before them).
    node_role: the one role all nodes share, which the Prometheus agent and Session Manager's logging are granted to;
        None where nodes get them otherwise (ParallelCluster: managed policies in its configuration; EKS: none).
    node_groups: the node groups by spec group name, each made DependsOn its placement group (kiln's launch template).
    eks: the EKS cluster the exporters install on (observability), where Kubernetes schedules; else None.
    """

    construct: BackendConstruct
    outputs: Mapping[ComputeOutput, str]
    node_role: iam.IRole | None = None
    node_groups: Mapping[str, Construct] = field(default_factory=dict)
    eks: EksTrainingCluster | None = None


class BackendBuilder(Protocol):
    """Add a platform's constructs to STACK, built from CONTEXT with NODES (the rendered bootstrap), and return them."""

    def __call__(
        self, stack: ComputeStack, context: ComputeContext, nodes: NodeBootstrap
    ) -> BackendBuild[Construct]: ...


def ci_lifecycle_bucket(stack: ComputeStack) -> s3.IBucket | None:
    """The bucket of the node scripts the stack deploys (HyperPod's lifecycle scripts, ParallelCluster's
    OnNodeConfigured script) in a CI environment; elsewhere none, and the construct makes its own."""
    # A short-lived environment names its buckets, so its reaper may empty them (kiln.stacks.ci_mode).
    if stack.ci is None:
        return None
    props = DataBucketProps(
        bucket_name=stack.ci.bucket_name("lifecycle"),
        access_log_bucket_name=stack.ci.bucket_name("lifecycle-logs"),
        retain=False,
        access_log_prefix="lifecycle-bucket/",
    )
    return DataBucket(stack, "LifecycleBucket", props).bucket
