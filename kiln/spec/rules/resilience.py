"""resilience: the health check interval, the launcher's hang bounds, and settings a platform cannot honour.

On the Kubernetes platforms (EKS, HyperPod with EKS) the nodes' health is the platform's own agent's (EKS's node
monitoring agent on kiln's node groups, HyperPod's health monitoring agent on HyperPod's nodes), which takes no
interval; HyperPod keeps its agent under EKS whatever the spec says (platforms.json, hyperpod.health_monitoring_agent).
kiln's jobs (`kiln job submit`, where auto_resume, the hang bounds and the TCP opt-out take effect) run on the eks
backend only.
"""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.limits import HANG_FACTOR, HANG_MIN_S, HEALTH_CHECK_INTERVAL_S, in_range
from kiln.catalog.platforms import service_fact
from kiln.contracts.backends import HYPERPOD, HYPERPOD_EKS, PARALLELCLUSTER, PCS
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at

SECTION = "resilience"
# Bounds of each number of the section (kiln.catalog.limits), with the unit a line names.
_RANGES = {
    "health_check_interval_s": (HEALTH_CHECK_INTERVAL_S, " seconds"),
    "hang_factor": (HANG_FACTOR, " median step times"),
    "hang_min_s": (HANG_MIN_S, " seconds"),
}
# Where HyperPod's deep health checks run: its instance groups, under either orchestrator.
_DEEP_HEALTH_CHECKS = (HYPERPOD.name, HYPERPOD_EKS.name)
# Why resilience.node_recovery none cannot be honoured, by platform, while platforms.json says so: ParallelCluster's
# drained_node_replacement names no switch, PCS's instance_health_checks are not in CloudFormation.
_RECOVERY_FIXED = {
    PARALLELCLUSTER.name: (
        service_fact("parallelcluster", "drained_node_replacement").value["switch"] is None,
        "ParallelCluster's clustermgtd replaces every drained node and its cluster configuration has no switch for it",
    ),
    PCS.name: (
        not service_fact("pcs", "instance_health_checks").value["in_cloudformation"],
        "PCS's instance health checks, which decide its replacement of instances, cannot be set from CloudFormation "
        "yet",
    ),
}


def resilience(spec: ClusterSpec) -> Iterator[Problem]:
    """The numbers stay within kiln's bounds; each setting is one the spec's platform acts on: deep health checks
    only on HyperPod, node_recovery none only where a switch turns replacement off, an interval only with the
    check on, allow_tcp only with a group that has EFA. (The Kubernetes platforms' own: resilience_kubernetes.)"""
    section = spec.resilience
    for name, ((low, high), unit) in _RANGES.items():
        value = getattr(section, name)
        if not in_range(value, low, high):
            yield problem_at((SECTION, name), f"must be from {low} to {high}{unit} (got {shown(value)})")
    platform = spec.platform
    # The Kubernetes platforms take no interval at all (resilience_kubernetes).
    if platform.runs_slurm and "health_check_interval_s" in section.model_fields_set and not section.health_checks:
        yield problem_at(
            (SECTION, "health_check_interval_s"),
            "has no effect with resilience.health_checks false (no health check runs); remove it or turn the check on",
            (SECTION, "health_checks"),
        )
    if "deep_health_checks" in section.model_fields_set and platform.name not in _DEEP_HEALTH_CHECKS:
        yield problem_at(
            (SECTION, "deep_health_checks"),
            f"has no effect on {platform.label}: deep health checks are HyperPod's (OnStartDeepHealthChecks); "
            "remove it",
        )
    fixed, why = _RECOVERY_FIXED.get(platform.name, (False, ""))
    if section.node_recovery == "none" and fixed:
        yield problem_at(
            (SECTION, "node_recovery"),
            f"got 'none' for {platform.label}, allowed: automatic ({why}, so kiln cannot leave drained nodes in place)",
        )
    # HyperPod with EKS refuses allow_tcp whatever the types (resilience_kubernetes): one line is enough.
    if section.allow_tcp and platform.name != HYPERPOD_EKS.name and not _any_efa(spec):
        yield problem_at(
            (SECTION, "allow_tcp"),
            "has no effect: no compute group's instance type has EFA, so NCCL's transport is never checked; remove it",
            ("compute", "groups"),
        )


def _any_efa(spec: ClusterSpec) -> bool:
    """Return whether a compute group's type has EFA (True when a type is not in the catalog: compute says so)."""
    for group in spec.compute.groups:
        try:
            if instance_type(group.instance_type).efa_supported:
                return True
        except UnknownInstanceType:
            return True
    return False


# The fields only kiln's PyTorchJobs carry (kiln.jobs.pytorchjob): the operator's restart policy, kiln-launch's
# variables.
_JOB_FIELDS = ("auto_resume", "hang_factor", "hang_min_s", "allow_tcp")


def resilience_kubernetes(spec: ClusterSpec) -> Iterator[Problem]:
    """No health check interval on EKS or HyperPod with EKS; under HyperPod with EKS, health checks stay on and the
    job fields, which only `kiln job submit`'s jobs carry, are not set."""
    platform = spec.platform
    if not platform.uses_kubernetes:
        return
    section = spec.resilience
    if "health_check_interval_s" in section.model_fields_set:
        yield problem_at(
            (SECTION, "health_check_interval_s"),
            f"has no effect on {platform.label}: the nodes' health agent (EKS's node monitoring agent, HyperPod's "
            "health monitoring agent) watches them all the time and takes no interval; remove it",
            BACKEND,
        )
    if platform.name != HYPERPOD_EKS.name:
        return
    if not section.health_checks:
        yield problem_at(
            (SECTION, "health_checks"),
            f"got false for {platform.label}, allowed: true (HyperPod's health monitoring agent comes with the "
            "dependencies HyperPod requires on its EKS cluster and cannot be turned off)",
            BACKEND,
            ORCHESTRATOR,
        )
    for name in _JOB_FIELDS:
        if name in section.model_fields_set:
            yield problem_at(
                (SECTION, name),
                f"has no effect on {platform.label}: only jobs of `kiln job submit` carry it, and it writes jobs for "
                "the eks backend (HyperPod's own job auto-resume is the job's annotations); remove it",
                BACKEND,
                ORCHESTRATOR,
            )
