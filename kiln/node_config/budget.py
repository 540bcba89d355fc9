"""spec -> its boot budget: each kind of node's setup against its platform's deadline, and the timeouts kiln sets."""

from __future__ import annotations

from kiln.bootstrap.budget import (
    boot_work,
    bootstrap_timeout,
    budget_line,
    deadline,
    over_budget,
    parallelcluster_deadline,
    tight_budget,
)
from kiln.bootstrap.config import BootstrapConfig
from kiln.catalog.names import ec2_type_name
from kiln.contracts.backends import PARALLELCLUSTER
from kiln.node_config.nodes import KIND_ROLES, node_kinds
from kiln.spec import ClusterSpec


def boot_budget(spec: ClusterSpec, config: BootstrapConfig) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Return SPEC's boot budget (kiln.bootstrap.budget): one line per kind of node, one refusal per compute group
    that scales from zero and whose setup cannot fit its platform's fixed deadline, and one warning per other compute
    group whose setup leaves less than the boot margin of its deadline (PCS gives every node it launches, static or
    not, about 30 minutes to join Slurm)."""
    baked = spec.compute.image.bake
    from_zero = {group.name for group in spec.compute.groups if group.min_count == 0}
    lines, refusals, warnings = [], [], []
    for kind, name in node_kinds(spec).items():
        role = KIND_ROLES.get(kind, "worker")
        limit = deadline(config.target, role)
        # ParallelCluster's head and login nodes boot ami_id, not the bake (an update never changes their image).
        work = boot_work(
            config, name, baked=baked and (role == "worker" or spec.platform is not PARALLELCLUSTER), role=role
        )
        lines.append(budget_line(kind, work, limit))
        if role != "worker":
            continue
        on_bake = boot_work(config, name, baked=True, role=role)
        refusal = over_budget(kind, work, limit, baked=on_bake) if kind in from_zero else None
        warning = None if refusal else tight_budget(kind, work, limit, baked=on_bake)
        refusals.extend([refusal] if refusal else [])
        warnings.extend([warning] if warning else [])
    return tuple(lines), tuple(refusals), tuple(warnings)


def eks_node_provision_seconds(spec: ClusterSpec, config: BootstrapConfig, default_seconds: int) -> int:
    """Return how long the autoscaler lets a new EKS node take to become ready: DEFAULT_SECONDS (its own), or kiln's
    estimate of the slowest group's setup with headroom where that is longer."""
    baked = spec.compute.image.bake
    slowest = max(
        (boot_work(config, ec2_type_name(g.instance_type), baked=baked) for g in spec.compute.groups),
        key=lambda work: work.seconds,
    )
    return bootstrap_timeout(slowest, default_seconds)


def parallelcluster_timeouts(spec: ClusterSpec, config: BootstrapConfig) -> dict[str, int]:
    """Return ParallelCluster's DevSettings/Timeouts for SPEC: each the platform's default, or kiln's estimate of
    the head node's (or the slowest compute group's) setup with headroom where that is longer."""
    baked = spec.compute.image.bake
    head = parallelcluster_deadline("controller")
    compute = parallelcluster_deadline("worker")
    slowest = max(
        (boot_work(config, ec2_type_name(g.instance_type), baked=baked) for g in spec.compute.groups),
        key=lambda work: work.seconds,
    )
    # The head node boots compute.image.ami_id, never the bake (kiln.stacks.backends.parallelcluster): it installs
    # at boot.
    head_work = boot_work(config, ec2_type_name(spec.compute.head_node.instance_type), baked=False, role="controller")
    return {
        head.name: bootstrap_timeout(head_work, head.seconds),
        compute.name: bootstrap_timeout(slowest, compute.seconds),
    }
