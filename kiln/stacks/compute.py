"""ComputeStack: the scheduler backend the spec names, with nodes booting kiln's bootstrap."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.constructs import (
    BootstrapAssets,
    BootstrapAssetsProps,
    EksTrainingCluster,
    HyperPodCluster,
    NodeBootstrap,
    ParallelCluster,
    PcsCluster,
)
from kiln.spec import ClusterSpec
from kiln.stacks.bootstrap_config import config_from_spec
from kiln.stacks.compute_context import ComputeContext
from kiln.stacks.eks import eks_props
from kiln.stacks.hyperpod import hyperpod_props
from kiln.stacks.network import NetworkStack
from kiln.stacks.parallelcluster import parallelcluster_props
from kiln.stacks.pcs import pcs_ami, pcs_cluster_props
from kiln.stacks.storage import StorageStack

BACKENDS_WITH_COMPUTE = ("pcs", "parallelcluster", "hyperpod", "eks")


def has_compute(spec: ClusterSpec) -> bool:
    """Return whether kiln builds a compute stack for SPEC."""
    return spec.compute.backend in BACKENDS_WITH_COMPUTE


class ComputeStack(cdk.Stack):
    """The spec's compute backend: AWS PCS, ParallelCluster, SageMaker HyperPod (Slurm or EKS) or EKS."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: ClusterSpec,
        network: NetworkStack,
        storage: StorageStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope, construct_id, description=f"kiln {spec.name}: compute ({spec.compute.backend})", **kwargs
        )
        if not has_compute(spec):
            raise ValueError(
                f"compute.backend: got {spec.compute.backend!r}; allowed here: {', '.join(BACKENDS_WITH_COMPUTE)}"
            )
        context = ComputeContext(spec=spec, network=network, storage=storage)
        self.spec = spec
        self.pcs: PcsCluster | None = None
        self.parallelcluster: ParallelCluster | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.eks: EksTrainingCluster | None = None
        # The one rendered bundle of this spec's nodes (HyperPod's lifecycle scripts included).
        self.bootstrap = BootstrapAssets(self, "Bootstrap", BootstrapAssetsProps(config=config_from_spec(spec)))
        nodes: NodeBootstrap = self.bootstrap.node_bootstrap
        backend = spec.compute.backend
        if backend == "pcs":
            props = pcs_cluster_props(context, bootstrap=nodes, ami_id=pcs_ami(self, context))
            self.pcs = PcsCluster(self, "Pcs", props)
        elif backend == "parallelcluster":
            self.parallelcluster = ParallelCluster(
                self, "ParallelCluster", parallelcluster_props(context, bootstrap=nodes)
            )
        elif backend == "eks":
            self.eks = EksTrainingCluster(self, "Eks", eks_props(context, bootstrap=nodes))
        else:
            if spec.effective_orchestrator == "eks":
                self.eks = EksTrainingCluster(self, "Eks", eks_props(context, bootstrap=None))
            eks_cluster = self.eks.cluster if self.eks else None
            self.hyperpod = HyperPodCluster(
                self, "HyperPod", hyperpod_props(context, lifecycle=nodes, eks_cluster=eks_cluster)
            )
            if self.eks is not None:
                # HyperPod's nodes join as EKS workers: the CNI's identity must exist before the first one.
                self.hyperpod.cluster.node.add_dependency(self.eks.cni_identity, self.eks.pod_identity_agent)
