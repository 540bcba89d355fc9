"""compute: backend and orchestrator, node counts, the groups, their types, capacity and architecture."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.capacity import CAPACITY, is_reservation_id
from kiln.catalog.limits import (
    HYPERPOD_MAX_INSTANCES_PER_GROUP,
    INT32_MAX,
    PARALLELCLUSTER_COMPUTE_RESOURCE_SUFFIX,
    PARALLELCLUSTER_MAX_QUEUES,
    PARALLELCLUSTER_NAME_MAX,
    PARALLELCLUSTER_QUEUE_NAME_MAX,
    PCS_MAX_NODES,
    ROOT_VOLUME_MAX_GIB,
    ROOT_VOLUME_MIN_GIB,
    in_range,
)
from kiln.catalog.names import HYPERPOD_TYPE_PREFIX, ec2_type_name
from kiln.catalog.platforms import service_fact
from kiln.contracts.backends import EKS, HYPERPOD, ORCHESTRATED_BACKENDS, PARALLELCLUSTER, PCS, NodeLimit
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Path, Problem, dotted, shown
from kiln.spec.rules.common import BACKEND, problem_at

# kiln's EKS node groups boot the EKS-optimized accelerated image of their instance type's accelerators
# (kiln.constructs.AcceleratedNodeGroup): NVIDIA's for GPUs, Neuron's for Trainium and Inferentia; x86_64 here.
EKS_NODE_ARCHITECTURE = "x86_64"
# The number of each AWS limit the backend table names (kiln.contracts.backends.NodeLimit).
NODE_LIMITS = {NodeLimit.INSTANCE_GROUP: HYPERPOD_MAX_INSTANCES_PER_GROUP, NodeLimit.CLUSTER: PCS_MAX_NODES}


def _counts(path: Path, value: int, low: int, high: int, where: str = "") -> Iterator[Problem]:
    if value < low:
        yield problem_at(path, f"must be {low} or more (got {shown(value)})")
    elif value > high:
        yield problem_at(path, f"must be at most {high}{where} (got {shown(value)})")


def _max_count(spec: ClusterSpec) -> tuple[int, str]:
    """Return the most nodes one group (or the login nodes) may have on the spec's platform, and how a line says
    where that limit holds; where the backend table names no AWS limit, AWS's 32-bit counts."""
    limit = spec.platform.node_limit
    if limit is None:
        return INT32_MAX, ""
    return NODE_LIMITS[limit], f" on {spec.compute.backend} ({limit.value})"


# The nodes kiln boots beside the compute groups: a Slurm head node where the platform leaves the controller to kiln
# (ParallelCluster, HyperPod with Slurm), login nodes wherever Slurm runs. Elsewhere the section would change nothing.
SERVICE_NODE_ROLES = {"head_node": "controller", "login_nodes": "login"}


def _boots(spec: ClusterSpec, section: str) -> bool:
    """Return whether kiln boots the service nodes of SECTION (head_node, login_nodes) on the spec's platform."""
    return SERVICE_NODE_ROLES[section] in spec.platform.roles


def _instance(spec: ClusterSpec, path: Path, name: str) -> Iterator[Problem]:
    try:
        instance_type(name)
    except UnknownInstanceType as exc:
        yield problem_at(path, f"{_unknown(exc)} (see `kiln catalog list`)")
        return
    if name.startswith(HYPERPOD_TYPE_PREFIX) and spec.compute.backend != HYPERPOD.backend:
        yield problem_at(
            path,
            f"is SageMaker's name for {ec2_type_name(name)} (got {name!r}); {spec.compute.backend} takes EC2 names",
            BACKEND,
        )


def _unknown(exc: UnknownInstanceType) -> str:
    """Return the catalog's refusal, briefly and on one line, whatever the name held."""
    hint = f"; did you mean {' or '.join(repr(s) for s in exc.suggestions)}?" if exc.suggestions else ""
    return f"unknown instance type {shown(exc.name)}{hint}"


def compute(spec: ClusterSpec) -> Iterator[Problem]:
    """Orchestrator fits the backend; nodes and groups are sound, known to the catalog and within AWS's counts."""
    comp = spec.compute
    if comp.orchestrator is not None and comp.backend not in ORCHESTRATED_BACKENDS:
        yield problem_at(
            ("compute", "orchestrator"),
            f"applies to backend {' or '.join(ORCHESTRATED_BACKENDS)} only (got {comp.orchestrator!r} with "
            f"{comp.backend!r})",
            BACKEND,
        )
    # Where kiln boots no head or login node, service_nodes refuses the section instead.
    if _boots(spec, "head_node"):
        yield from _instance(spec, ("compute", "head_node", "instance_type"), comp.head_node.instance_type)
    login = ("compute", "login_nodes", "count")
    high, where = _max_count(spec)
    if _boots(spec, "login_nodes"):
        yield from _instance(spec, ("compute", "login_nodes", "instance_type"), comp.login_nodes.instance_type)
        yield from _counts(login, comp.login_nodes.count, 0, high, where)
    if not comp.groups:
        yield problem_at(("compute", "groups"), "needs at least one group (got an empty list)")
    if spec.platform is PARALLELCLUSTER and len(comp.groups) > PARALLELCLUSTER_MAX_QUEUES:
        yield problem_at(
            ("compute", "groups"),
            f"ParallelCluster takes at most {PARALLELCLUSTER_MAX_QUEUES} queues (got {len(comp.groups)} groups)",
            BACKEND,
        )
    counted = [group.max_count for group in comp.groups] + [comp.login_nodes.count]
    if spec.platform.node_limit is NodeLimit.CLUSTER and all(0 <= count <= high for count in counted):
        # Each count past the limit has a line of its own; the sum is judged when every count is sound.
        nodes = sum(counted)
        if nodes > high:
            yield problem_at(
                ("compute", "groups"),
                f"AWS PCS clusters serve at most {high} nodes (got {nodes}: every group's max_count "
                "plus the login nodes)",
                BACKEND,
                login,
            )
    seen: dict[str, int] = {}
    for index, group in enumerate(comp.groups):
        yield from _group(spec, index)
        if group.name in seen:
            yield problem_at(
                ("compute", "groups", index, "name"),
                f"duplicates groups[{seen[group.name]}] (got {group.name!r}); group names must be unique",
                ("compute", "groups", seen[group.name], "name"),
            )
        seen.setdefault(group.name, index)


def _reserved_name(spec: ClusterSpec, name: str) -> str | None:
    """Return why NAME cannot be a group name of SPEC's backend, or None."""
    platform = spec.platform
    if name in platform.reserved_groups:
        return f"is reserved on {platform.backend} for the Slurm {name} group (got {name!r})"
    if name == platform.login_group and spec.compute.login_nodes.count:
        return (
            f"is the name of the {platform.title} login node group (got {name!r}); choose another or set "
            "login_nodes.count 0"
        )
    if platform is PCS and len(name) < (shortest := service_fact("pcs", "name_rules").value["queue"]["min"]):
        return f"must be at least {shortest} characters on pcs, whose queue (Slurm partition) takes it (got {name!r})"
    if name == platform.system_group:
        return f"is the name of the {platform.title} node group for cluster services (got {name!r})"
    if platform is PARALLELCLUSTER and len(name) > PARALLELCLUSTER_QUEUE_NAME_MAX:
        resource = f"{name}{PARALLELCLUSTER_COMPUTE_RESOURCE_SUFFIX}"
        return (
            f"must be at most {PARALLELCLUSTER_QUEUE_NAME_MAX} characters on parallelcluster, whose compute "
            f"resource {resource!r} must fit in {PARALLELCLUSTER_NAME_MAX} (got {len(name)})"
        )
    return None


def _group(spec: ClusterSpec, index: int) -> Iterator[Problem]:
    group = spec.compute.groups[index]
    path = ("compute", "groups", index)
    backend = spec.compute.backend
    hyperpod = backend == HYPERPOD.backend
    yield from _counts((*path, "min_count"), group.min_count, 0, INT32_MAX)
    high, where = _max_count(spec)
    yield from _counts((*path, "max_count"), group.max_count, 1, high, where)
    if group.max_count >= 1 and group.min_count >= 0 and group.max_count < group.min_count:
        yield problem_at(
            (*path, "max_count"),
            f"must be >= min_count (got {group.max_count} < {group.min_count})",
            (*path, "min_count"),
        )
    if not in_range(group.root_volume_gib, ROOT_VOLUME_MIN_GIB, ROOT_VOLUME_MAX_GIB):
        yield problem_at(
            (*path, "root_volume_gib"),
            f"must be at least {ROOT_VOLUME_MIN_GIB} and at most {ROOT_VOLUME_MAX_GIB} GiB, the largest gp3 volume "
            f"(got {shown(group.root_volume_gib)})",
        )
    if why := _reserved_name(spec, group.name):
        yield problem_at((*path, "name"), why, BACKEND, ("compute", "login_nodes", "count"))
    yield from _capacity(group.capacity.type, group.capacity.reservation_id, (*path, "capacity"))
    kind = (*path, "instance_type")
    try:
        facts = instance_type(group.instance_type)
    except UnknownInstanceType:
        yield from _instance(spec, kind, group.instance_type)
        return
    yield from _instance(spec, kind, group.instance_type)
    if hyperpod and group.placement_group is not None:
        # AWS::SageMaker::Cluster's ClusterInstanceGroup has no placement setting (CloudFormation's template
        # reference, aws-properties-sagemaker-cluster-clusterinstancegroup), so kiln makes none there.
        yield problem_at(
            (*path, "placement_group"),
            "has no effect on hyperpod: HyperPod places its instance groups itself and takes no placement group; "
            "remove it",
            BACKEND,
        )
    elif group.placement_group and not facts.efa_supported:
        yield problem_at(
            (*path, "placement_group"),
            f"needs an EFA instance type (got {group.instance_type}, which has no EFA)",
            kind,
        )
    static_block = group.min_count == group.max_count > 0
    counts = ((*path, "max_count"), BACKEND)
    if backend == PARALLELCLUSTER.backend and group.capacity.type == "capacity-block" and not static_block:
        yield problem_at(
            (*path, "min_count"),
            f"must equal max_count and be above 0 for a capacity block on parallelcluster "
            f"(got {group.min_count} and {group.max_count}); ParallelCluster runs them as static nodes",
            *counts,
            (*path, "capacity", "type"),
        )
    if hyperpod and group.min_count != group.max_count:
        yield problem_at(
            (*path, "min_count"),
            f"must equal max_count on hyperpod, whose instance groups have a fixed size "
            f"(got {group.min_count} and {group.max_count})",
            *counts,
        )
    if hyperpod and group.capacity.type != "on-demand":
        yield problem_at(
            (*path, "capacity", "type"),
            f"must be on-demand on hyperpod (got {group.capacity.type}): HyperPod buys its instances itself and "
            "takes no EC2 Spot, capacity reservation or capacity block",
            BACKEND,
        )
    if hyperpod and not facts.hyperpod:
        yield problem_at(kind, f"SageMaker HyperPod does not offer ml.{group.instance_type}", BACKEND)
    if backend == EKS.backend and facts.accelerator_kind is None:
        yield problem_at(
            kind,
            f"EKS node groups need NVIDIA GPUs or AWS Neuron devices (got {group.instance_type}, which has neither); "
            "cluster services run on kiln's system group",
            BACKEND,
        )
    if backend == EKS.backend and EKS_NODE_ARCHITECTURE not in facts.architectures:
        yield problem_at(
            kind,
            f"EKS node groups boot x86_64 images (AL2023_x86_64_NVIDIA or AL2023_x86_64_NEURON); "
            f"{group.instance_type} is {', '.join(facts.architectures)} only",
            BACKEND,
        )


def _capacity(kind: str, reservation: str | None, path: Path) -> Iterator[Problem]:
    needs_reservation = CAPACITY[kind].reserved
    field, depends = (*path, "reservation_id"), (*path, "type")
    if needs_reservation and reservation is None:
        yield problem_at(field, f"is required for capacity type {kind} (a cr-... id)", depends)
    elif needs_reservation and not is_reservation_id(reservation):
        yield problem_at(field, f"must look like cr- and 17 hex digits (got {shown(reservation)})")
    elif not needs_reservation and reservation is not None:
        yield problem_at(field, f"applies to capacity-block and reservation only (got it with {kind})", depends)


def architecture(spec: ClusterSpec) -> Iterator[Problem]:
    """Every node of the one bootstrap bundle shares an architecture (the bundle installs for one)."""
    comp = spec.compute
    members: list[tuple[Path, str]] = [
        (("compute", "groups", i, "instance_type"), g.instance_type) for i, g in enumerate(comp.groups)
    ]
    if _boots(spec, "head_node"):
        members.append((("compute", "head_node", "instance_type"), comp.head_node.instance_type))
    if _boots(spec, "login_nodes") and comp.login_nodes.count:
        members.append((("compute", "login_nodes", "instance_type"), comp.login_nodes.instance_type))
    common: set[str] = set()
    first: Path = ()
    for path, name in members:
        try:
            offered = set(instance_type(name).architectures)
        except UnknownInstanceType:
            continue
        if not first:
            common, first = offered, path
        elif common & offered:
            common &= offered
        else:
            yield problem_at(
                path,
                f"{name} runs {', '.join(sorted(offered))} only, but {dotted(first)} runs {', '.join(sorted(common))}: "
                "every node boots one bootstrap bundle, built for one architecture",
                first,
            )
