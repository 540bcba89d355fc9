"""compute.kubernetes_version, and what EKS's control plane needs of the network."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.kubernetes import kubernetes_source, kubernetes_versions
from kiln.contracts.backends import HYPERPOD_EKS
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def kubernetes(spec: ClusterSpec) -> Iterator[Problem]:
    """EKS's control plane needs subnets in two AZs, and runs a Kubernetes version its platform supports."""
    wanted = spec.compute.kubernetes_version
    if not spec.platform.uses_kubernetes:
        if wanted is not None:
            yield problem_at(
                ("compute", "kubernetes_version"),
                f"has no effect on {spec.compute.backend} with Slurm (no Kubernetes): leave it unset",
                BACKEND,
                ORCHESTRATOR,
            )
        return
    backend = spec.compute.backend
    allowed = kubernetes_versions(backend)
    if wanted is not None and wanted not in allowed:
        where = "HyperPod orchestrated by EKS" if spec.platform is HYPERPOD_EKS else "EKS"
        yield problem_at(
            ("compute", "kubernetes_version"),
            f"got {shown(wanted)}, allowed on {where}: {', '.join(allowed)} (the versions the platform supports, "
            f"{kubernetes_source(backend)}, that kiln drives)",
            BACKEND,
            ORCHESTRATOR,
        )
    # The OS (Amazon Linux 2023) is image_os's to check, from the image's data.
    if spec.network.vpc_id:
        yield problem_at(
            ("network", "vpc_id"),
            "EKS needs control-plane subnets in two AZs: leave vpc_id unset so kiln builds the VPC",
            BACKEND,
            ORCHESTRATOR,
        )
