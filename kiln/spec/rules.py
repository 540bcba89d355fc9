"""Cross-field rules: what types alone cannot say about a cluster spec."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from posixpath import isabs

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.capacity import CAPACITY, is_reservation_id
from kiln.catalog.nccl import forbidden_variable
from kiln.spec.models import ENV_NAME_PATTERN, SHA256_PATTERN, ClusterSpec, Lustre
from kiln.spec.problems import Problem, shown

Rule = Callable[[ClusterSpec], Iterator[Problem]]

PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)
VPC_PREFIX_RANGE = (16, 22)
MIN_ROOT_VOLUME_GIB = 40
HYPERPOD_RESERVED_GROUPS = ("controller", "login")
MAX_TTL_HOURS = 24 * 30
BUCKET_NAME = re.compile(r"^(?!xn--)(?!sthree-)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
BACKEND = ("compute", "backend")
ORCHESTRATOR = ("compute", "orchestrator")


def _p(path: tuple[str | int, ...], message: str, *related: tuple[str | int, ...]) -> Problem:
    return Problem(path=path, message=message, related=related)


def placement(spec: ClusterSpec) -> Iterator[Problem]:
    """The AZ lies in the region, and an AZ needs a region."""
    az, region = spec.availability_zone, spec.region
    if az and not region:
        yield _p(("availability_zone",), f"needs region to be set too (got {az!r} with no region)", ("region",))
    elif az and region and az[:-1] != region:
        yield _p(
            ("availability_zone",),
            f"must lie in region {region} (got {az!r}; allowed: {region}a, {region}b, ...)",
            ("region",),
        )


def network(spec: ClusterSpec) -> Iterator[Problem]:
    """A new VPC needs a sane CIDR; an existing VPC needs its private subnet and AZ."""
    net = spec.network
    if net.vpc_id:
        if not net.private_subnet_id:
            yield _p(
                ("network", "private_subnet_id"),
                f"is required with vpc_id (got vpc_id {net.vpc_id!r} alone)",
                ("network", "vpc_id"),
            )
        if not spec.availability_zone:
            yield _p(
                ("availability_zone",),
                "is required with an existing vpc_id (the AZ of private_subnet_id)",
                ("network", "vpc_id"),
            )
        if "vpc_cidr" in net.model_fields_set:
            yield _p(
                ("network", "vpc_cidr"),
                "cannot be set with vpc_id (choose a new VPC or an existing one)",
                ("network", "vpc_id"),
            )
        return
    if net.private_subnet_id:
        yield _p(("network", "private_subnet_id"), "needs vpc_id (the subnet's VPC)", ("network", "vpc_id"))
    try:
        cidr = ipaddress.IPv4Network(net.vpc_cidr, strict=True)
    except ValueError as exc:
        yield _p(("network", "vpc_cidr"), f"is not an IPv4 network (got {net.vpc_cidr!r}: {exc})")
        return
    low, high = VPC_PREFIX_RANGE
    if not low <= cidr.prefixlen <= high:
        yield _p(("network", "vpc_cidr"), f"prefix must be /{low} to /{high} (got /{cidr.prefixlen})")
    if not cidr.is_private:
        yield _p(("network", "vpc_cidr"), f"must be a private range such as 10.0.0.0/16 (got {net.vpc_cidr!r})")


def _lustre_size(lustre: Lustre) -> Iterator[Problem]:
    size = lustre.storage_gib
    path = ("storage", "lustre", "storage_gib")
    if size <= 0:
        yield _p(path, f"must be positive (got {size})")
    elif size != 1200 and size % 2400:
        yield _p(
            path,
            f"must be 1200 or a multiple of 2400 for {lustre.deployment} (got {size})",
            ("storage", "lustre", "deployment"),
        )


def lustre(spec: ClusterSpec) -> Iterator[Problem]:
    """Lustre sizes, throughput and EFA fit the deployment type."""
    fs = spec.storage.lustre
    if fs is None:
        return
    base = ("storage", "lustre")
    deployment = (*base, "deployment")
    yield from _lustre_size(fs)
    if fs.deployment == "PERSISTENT_2":
        if fs.throughput_per_tib is not None and fs.throughput_per_tib not in PERSISTENT_2_THROUGHPUTS:
            allowed = ", ".join(map(str, PERSISTENT_2_THROUGHPUTS))
            yield _p(
                (*base, "throughput_per_tib"), f"must be one of {allowed} (got {fs.throughput_per_tib})", deployment
            )
    else:
        if fs.throughput_per_tib is not None:
            yield _p(
                (*base, "throughput_per_tib"),
                f"applies to PERSISTENT_2 only (got {fs.throughput_per_tib} with {fs.deployment})",
                deployment,
            )
        if fs.efa:
            yield _p(
                (*base, "efa"), f"EFA-enabled FSx needs deployment PERSISTENT_2 (got {fs.deployment})", deployment
            )
    path = fs.data_repository.import_path
    if path is not None and not S3_URI.match(path):
        yield _p((*base, "data_repository", "import_path"), f"must be an s3://bucket/prefix URI (got {path!r})")


def bucket(spec: ClusterSpec) -> Iterator[Problem]:
    """A named bucket follows S3's naming rules."""
    name = spec.storage.bucket.name
    if name is not None and (not BUCKET_NAME.match(name) or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)):
        yield _p(
            ("storage", "bucket", "name"), f"is not a valid S3 bucket name: 3-63 of a-z, 0-9, '.', '-' (got {name!r})"
        )


def _instance(path: tuple[str | int, ...], name: str) -> Iterator[Problem]:
    try:
        instance_type(name)
    except UnknownInstanceType as exc:
        yield _p(path, f"{exc} (see `kiln catalog list`)")


def compute(spec: ClusterSpec) -> Iterator[Problem]:
    """Orchestrator fits the backend; nodes and groups are sound and known to the catalog."""
    comp = spec.compute
    if comp.orchestrator is not None and comp.backend != "hyperpod":
        yield _p(
            ("compute", "orchestrator"),
            f"applies to backend hyperpod only (got {comp.orchestrator!r} with {comp.backend!r})",
            BACKEND,
        )
    yield from _instance(("compute", "head_node", "instance_type"), comp.head_node.instance_type)
    yield from _instance(("compute", "login_nodes", "instance_type"), comp.login_nodes.instance_type)
    if comp.login_nodes.count < 0:
        yield _p(("compute", "login_nodes", "count"), f"must be 0 or more (got {comp.login_nodes.count})")
    if not comp.groups:
        yield _p(("compute", "groups"), "needs at least one group (got an empty list)")
    seen: dict[str, int] = {}
    for index, group in enumerate(comp.groups):
        yield from _group(spec, index)
        if group.name in seen:
            yield _p(
                ("compute", "groups", index, "name"),
                f"duplicates groups[{seen[group.name]}] (got {group.name!r}); group names must be unique",
                ("compute", "groups", seen[group.name], "name"),
            )
        seen.setdefault(group.name, index)


def _group(spec: ClusterSpec, index: int) -> Iterator[Problem]:
    group = spec.compute.groups[index]
    path = ("compute", "groups", index)
    if group.min_count < 0:
        yield _p((*path, "min_count"), f"must be 0 or more (got {group.min_count})")
    if group.max_count < 1:
        yield _p((*path, "max_count"), f"must be 1 or more (got {group.max_count})")
    elif group.max_count < group.min_count:
        yield _p(
            (*path, "max_count"),
            f"must be >= min_count (got {group.max_count} < {group.min_count})",
            (*path, "min_count"),
        )
    if group.root_volume_gib < MIN_ROOT_VOLUME_GIB:
        yield _p((*path, "root_volume_gib"), f"must be at least {MIN_ROOT_VOLUME_GIB} (got {group.root_volume_gib})")
    yield from _capacity(group.capacity.type, group.capacity.reservation_id, (*path, "capacity"))
    kind = (*path, "instance_type")
    try:
        facts = instance_type(group.instance_type)
    except UnknownInstanceType as exc:
        yield _p(kind, f"{exc} (see `kiln catalog list`)")
        return
    if group.placement_group and not facts.efa_supported:
        yield _p(
            (*path, "placement_group"),
            f"needs an EFA instance type (got {group.instance_type}, which has no EFA)",
            kind,
        )
    static_block = group.min_count == group.max_count > 0
    counts = ((*path, "max_count"), BACKEND)
    if spec.compute.backend == "parallelcluster" and group.capacity.type == "capacity-block" and not static_block:
        yield _p(
            (*path, "min_count"),
            f"must equal max_count and be above 0 for a capacity block on parallelcluster "
            f"(got {group.min_count} and {group.max_count}); ParallelCluster runs them as static nodes",
            *counts,
            (*path, "capacity", "type"),
        )
    if spec.compute.backend == "hyperpod" and group.min_count != group.max_count:
        yield _p(
            (*path, "min_count"),
            f"must equal max_count on hyperpod, whose instance groups have a fixed size "
            f"(got {group.min_count} and {group.max_count})",
            *counts,
        )
    if spec.compute.backend == "hyperpod" and group.name in HYPERPOD_RESERVED_GROUPS:
        yield _p(
            (*path, "name"), f"is reserved on hyperpod for the Slurm {group.name} group (got {group.name!r})", BACKEND
        )
    if spec.compute.backend == "hyperpod" and not facts.hyperpod:
        yield _p(kind, f"SageMaker HyperPod does not offer ml.{group.instance_type}", BACKEND)


def _capacity(kind: str, reservation: str | None, path: tuple[str | int, ...]) -> Iterator[Problem]:
    needs_reservation = CAPACITY[kind].reserved
    field, depends = (*path, "reservation_id"), (*path, "type")
    if needs_reservation and reservation is None:
        yield _p(field, f"is required for capacity type {kind} (a cr-... id)", depends)
    elif needs_reservation and not is_reservation_id(reservation):
        yield _p(field, f"must look like cr- and 17 hex digits (got {shown(reservation)})")
    elif not needs_reservation and reservation is not None:
        yield _p(field, f"applies to capacity-block and reservation only (got it with {kind})", depends)


def hyperpod_nodes(spec: ClusterSpec) -> Iterator[Problem]:
    """HyperPod must offer the controller and login types too."""
    if spec.compute.backend != "hyperpod":
        return
    for role in ("head_node", "login_nodes"):
        name = getattr(spec.compute, role).instance_type
        try:
            offered = instance_type(name).hyperpod
        except UnknownInstanceType:
            continue
        if not offered:
            yield _p(("compute", role, "instance_type"), f"SageMaker HyperPod does not offer ml.{name}", BACKEND)


def kubernetes(spec: ClusterSpec) -> Iterator[Problem]:
    """EKS nodes run Amazon Linux 2023, and its control plane needs subnets in two AZs."""
    if spec.compute.backend != "eks" and spec.effective_orchestrator != "eks":
        return
    image = spec.compute.image
    if "os" in image.model_fields_set and image.os != "al2023":
        yield _p(
            ("compute", "image", "os"),
            f"must be al2023 with EKS, whose GPU nodes run Amazon Linux 2023 (got {image.os!r})",
            BACKEND,
            ORCHESTRATOR,
        )
    if spec.network.vpc_id:
        yield _p(
            ("network", "vpc_id"),
            "EKS needs control-plane subnets in two AZs: leave vpc_id unset so kiln builds the VPC",
            BACKEND,
            ORCHESTRATOR,
        )


def software(spec: ClusterSpec) -> Iterator[Problem]:
    """Checksum overrides are sha256 hex digests."""
    for artifact, digest in spec.software.checksums.items():
        if not re.match(SHA256_PATTERN, digest):
            yield _p(
                ("software", "checksums", artifact), f"must be 64 lowercase hex digits of sha256 (got {shown(digest)})"
            )


def launcher(spec: ClusterSpec) -> Iterator[Problem]:
    """Checkpoints go to an absolute path; NCCL overrides are valid and safe variable names."""
    if not isabs(spec.launcher.checkpoint_dir):
        yield _p(("launcher", "checkpoint_dir"), f"must be an absolute path (got {spec.launcher.checkpoint_dir!r})")
    for name in spec.launcher.nccl_env:
        path = ("launcher", "nccl_env", name)
        if not re.match(ENV_NAME_PATTERN, name):
            yield _p(path, "is not a valid environment variable name")
        elif prefix := forbidden_variable(name):
            yield _p(path, f"must not be set: {prefix}* variables break EFA")


def ci(spec: ClusterSpec) -> Iterator[Problem]:
    """A TTL is positive and at most 30 days."""
    ttl = spec.ci.ttl_hours
    if ttl is not None and not 0 < ttl <= MAX_TTL_HOURS:
        yield _p(("ci", "ttl_hours"), f"must be more than 0 and at most {MAX_TTL_HOURS} (got {ttl})")


def tags(spec: ClusterSpec) -> Iterator[Problem]:
    """Tags follow AWS limits and stay out of the aws: namespace."""
    for key, value in spec.tags.items():
        path = ("tags", key)
        if key.lower().startswith("aws:"):
            yield _p(path, "tag keys must not start with 'aws:' (reserved by AWS)")
        if not 1 <= len(key) <= 128:
            yield _p(path, f"tag keys are 1-128 characters (got {len(key)})")
        if len(value) > 256:
            yield _p(path, f"tag values are at most 256 characters (got {len(value)})")


RULES: tuple[Rule, ...] = (
    placement,
    network,
    lustre,
    bucket,
    compute,
    hyperpod_nodes,
    kubernetes,
    software,
    launcher,
    ci,
    tags,
)


def check(spec: ClusterSpec) -> list[Problem]:
    """Return every cross-field problem of SPEC."""
    return [problem for rule in RULES for problem in rule(spec)]
