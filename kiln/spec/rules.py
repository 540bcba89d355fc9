"""Cross-field rules: what types alone cannot say about a cluster spec.

Every string a node receives is matched whole against a pattern of kiln.catalog.names, and every number
is held to the limits of kiln.catalog.limits that the constructs also check: whatever passes here
synthesizes and renders.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import re
from collections.abc import Callable, Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.capacity import CAPACITY, is_reservation_id
from kiln.catalog.code_server import CODE_SERVER_IMAGE_USER, CODE_SERVER_NODE_USER, code_server_place, refused_user
from kiln.catalog.kubernetes import kubernetes_source, kubernetes_versions
from kiln.catalog.limits import (
    AWS_VPC_PREFIX_MAX,
    AWS_VPC_PREFIX_MIN,
    DOCKER_DEFAULT_BRIDGE,
    HYPERPOD_MAX_INSTANCES_PER_GROUP,
    INT32_MAX,
    KILN_ADDED_TAGS_MAX,
    LUSTRE_MIN_STORAGE_GIB,
    LUSTRE_STORAGE_STEP_GIB,
    MAX_SPEC_TAGS,
    MAX_TAGS_PER_RESOURCE,
    PARALLELCLUSTER_COMPUTE_RESOURCE_SUFFIX,
    PARALLELCLUSTER_MAX_CONFIG_TAGS,
    PARALLELCLUSTER_MAX_QUEUES,
    PARALLELCLUSTER_NAME_MAX,
    PARALLELCLUSTER_QUEUE_NAME_MAX,
    PCS_MAX_NODES,
    PERSISTENT_2_THROUGHPUTS,
    ROOT_VOLUME_MAX_GIB,
    ROOT_VOLUME_MIN_GIB,
    S3_URI_MAX,
    TAG_KEY_MAX,
    TAG_VALUE_MAX,
    USER_STEPS_MAX,
    VPC_PREFIX_MAX,
    VPC_PREFIX_MIN,
    VPC_RANGES_RULE,
    in_range,
    is_lustre_storage,
    is_vpc_range,
    ttl_problem,
)
from kiln.catalog.names import (
    BUCKET_NAME_RULE,
    HYPERPOD_TYPE_PREFIX,
    NODE_PATH,
    NODE_PATH_RULE,
    TAG_RULE,
    ec2_type_name,
    is_bucket_name,
    is_plain_word,
    is_tag_text,
    known_regions,
    matches,
)
from kiln.catalog.nccl import (
    override_count_problem,
    override_name_problem,
    override_value_problem,
    variable_family,
)
from kiln.catalog.neuron import (
    known_neuron_releases,
    neuron_driver_problem,
    neuron_release,
    neuron_support_problem,
    uncatalogued_reason,
)
from kiln.catalog.platforms import (
    PIN_FIELDS,
    image_profile,
    lustre_efa_interfaces,
    newest_pcs_slurm,
    service_fact,
)
from kiln.contracts.backends import (
    EKS,
    HYPERPOD,
    HYPERPOD_EKS,
    ORCHESTRATED_BACKENDS,
    PARALLELCLUSTER,
    PCS,
    NodeLimit,
)
from kiln.contracts.permissions_boundary import boundary_arn
from kiln.contracts.tags import KILN_TAG_PREFIX
from kiln.spec.models import ClusterSpec, Lustre, SpecModel
from kiln.spec.problems import Path, Problem, dotted, shown

Rule = Callable[[ClusterSpec], Iterator[Problem]]

# kiln's EKS node groups boot the EKS-optimized accelerated image of their instance type's accelerators
# (kiln.constructs.AcceleratedNodeGroup): NVIDIA's for GPUs, Neuron's for Trainium and Inferentia; x86_64 here.
EKS_NODE_ARCHITECTURE = "x86_64"
BACKEND = ("compute", "backend")
# The pattern ParallelCluster's policies template holds its PermissionsBoundaryPolicy to.
PCLUSTER_BOUNDARY_PATTERN: str = service_fact("parallelcluster", "provider_custom_role").value["boundary_pattern"]
ORCHESTRATOR = ("compute", "orchestrator")
# The number of each AWS limit the backend table names (kiln.contracts.backends.NodeLimit).
NODE_LIMITS = {NodeLimit.INSTANCE_GROUP: HYPERPOD_MAX_INSTANCES_PER_GROUP, NodeLimit.CLUSTER: PCS_MAX_NODES}


def _p(path: Path, message: str, *related: Path) -> Problem:
    return Problem(path=path, message=message, related=related)


def key_part(key: object) -> str:
    """Return a mapping KEY as a field path part that renders on one line (repr() when it would not)."""
    return key if isinstance(key, str) and is_plain_word(key) else repr(key)


def _counts(path: Path, value: int, low: int, high: int, where: str = "") -> Iterator[Problem]:
    if value < low:
        yield _p(path, f"must be {low} or more (got {shown(value)})")
    elif value > high:
        yield _p(path, f"must be at most {high}{where} (got {shown(value)})")


def _max_count(spec: ClusterSpec) -> tuple[int, str]:
    """Return the most nodes one group (or the login nodes) may have on the spec's platform, and how a line says
    where that limit holds; where the backend table names no AWS limit, AWS's 32-bit counts."""
    limit = spec.platform.node_limit
    if limit is None:
        return INT32_MAX, ""
    return NODE_LIMITS[limit], f" on {spec.compute.backend} ({limit.value})"


def _set_paths(section: SpecModel, path: Path) -> list[Path]:
    """Return the path of each field the spec sets in SECTION, in the model's order; PATH itself when it sets
    SECTION as an empty mapping."""
    return [(*path, name) for name in type(section).model_fields if name in section.model_fields_set] or [path]


# The nodes kiln boots beside the compute groups: a Slurm head node where the platform leaves the controller to kiln
# (ParallelCluster, HyperPod with Slurm), login nodes wherever Slurm runs. Elsewhere the section would change nothing.
SERVICE_NODE_ROLES = {"head_node": "controller", "login_nodes": "login"}


def _boots(spec: ClusterSpec, section: str) -> bool:
    """Return whether kiln boots the service nodes of SECTION (head_node, login_nodes) on the spec's platform."""
    return SERVICE_NODE_ROLES[section] in spec.platform.roles


def service_nodes(spec: ClusterSpec) -> Iterator[Problem]:
    """A head node or login nodes only where kiln boots them: set elsewhere, they would create nothing."""
    comp, platform = spec.compute, spec.platform
    for section, why in (("head_node", platform.why_no_head_node), ("login_nodes", platform.why_no_login_nodes)):
        if why is None or section not in comp.model_fields_set:
            continue
        for path in _set_paths(getattr(comp, section), ("compute", section)):
            yield _p(path, f"has no effect on {platform.label}: {why}; remove compute.{section}", BACKEND, ORCHESTRATOR)


def placement(spec: ClusterSpec) -> Iterator[Problem]:
    """The region is one AWS has, the AZ lies in it, and an AZ needs a region."""
    az, region = spec.availability_zone, spec.region
    if region is not None and region not in known_regions():
        close = difflib.get_close_matches(region, sorted(known_regions()), n=2, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (see kiln/catalog/data/regions.json)"
        yield _p(("region",), f"is not an AWS region (got {shown(region)}){hint}")
    if az and not region:
        yield _p(("availability_zone",), f"needs region to be set too (got {az!r} with no region)", ("region",))
    elif az and region and az[:-1] != region:
        yield _p(
            ("availability_zone",),
            f"must lie in region {region} (got {az!r}; allowed: {region}a, {region}b, ...)",
            ("region",),
        )


def cluster_name(spec: ClusterSpec) -> Iterator[Problem]:
    """The cluster name ends in a letter or digit, as HyperPod's cluster names must (its pattern says the rest)."""
    if spec.name.endswith("-"):
        yield _p(("name",), f"must end in a letter or digit, not '-' (got {spec.name!r})")


def network(spec: ClusterSpec) -> Iterator[Problem]:
    """A new VPC needs a sane CIDR clear of Docker's bridge; an existing VPC needs its private subnet and AZ (and
    on ParallelCluster its CIDR)."""
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
        if net.kept:
            # kiln made the kept VPC from vpc_cidr by a new VPC's rules, and carves the public subnet it builds
            # again from it.
            yield from _vpc_cidr(spec, existing=False)
        elif "vpc_cidr" in net.model_fields_set:
            yield from _vpc_cidr(spec, existing=True)
        elif spec.platform is PARALLELCLUSTER:
            yield _p(
                ("network", "vpc_cidr"),
                "is required with vpc_id on parallelcluster: the existing VPC's CIDR, the only addresses its head "
                "and login nodes admit SSH from (kiln cannot read it offline)",
                ("network", "vpc_id"),
                BACKEND,
            )
        return
    if net.private_subnet_id:
        yield _p(("network", "private_subnet_id"), "needs vpc_id (the subnet's VPC)", ("network", "vpc_id"))
    if net.kept:
        yield _p(
            ("network", "kept"),
            "needs vpc_id and private_subnet_id: the VPC and compute subnet an earlier deploy of this cluster kept "
            "(`kiln leftovers --spec` prints the lines)",
            ("network", "vpc_id"),
        )
    yield from _vpc_cidr(spec, existing=False)


def network_zones(spec: ClusterSpec) -> Iterator[Problem]:
    """A new VPC's second AZ is another AZ of the cluster's region; it and the interface endpoints are for a VPC kiln
    creates (an existing VPC keeps its own subnets and endpoints, which preflight checks)."""
    net = spec.network
    field = ("network", "second_availability_zone")
    if net.vpc_id:
        for name, what in (("second_availability_zone", "subnets"), ("interface_endpoints", "endpoints")):
            if name in net.model_fields_set and getattr(net, name):
                yield _p(
                    ("network", name),
                    f"applies to the VPC kiln creates; existing vpc_id {net.vpc_id} keeps its own {what} "
                    "(`kiln preflight` checks what its nodes need): remove it",
                    ("network", "vpc_id"),
                )
        return
    second, first = net.second_availability_zone, spec.availability_zone
    if second is None:
        return
    if first is None:
        yield _p(
            field,
            f"needs availability_zone, the AZ of compute, FSx and EFA (got {second!r} alone); without either, the VPC "
            "takes the region's first two AZs",
            ("availability_zone",),
        )
    elif second == first:
        yield _p(field, f"must differ from availability_zone (both are {second!r})", ("availability_zone",))
    elif second[:-1] != first[:-1]:
        yield _p(
            field,
            f"must lie in availability_zone's region {first[:-1]} (got {second!r})",
            ("availability_zone",),
            ("region",),
        )


def _vpc_cidr(spec: ClusterSpec, *, existing: bool) -> Iterator[Problem]:
    """A VPC's CIDR is an IPv4 network of a range and size AWS takes for VPCs, clear of Docker's bridge; a new one
    also fits kiln's subnet split."""
    net = spec.network
    field = ("network", "vpc_cidr")
    try:
        cidr = ipaddress.IPv4Network(net.vpc_cidr, strict=True)
    except ValueError as exc:
        yield _p(field, f"is not an IPv4 network (got {shown(net.vpc_cidr)}: {shown(str(exc))})")
        return
    if not existing and not VPC_PREFIX_MIN <= cidr.prefixlen <= VPC_PREFIX_MAX:
        yield _p(field, f"prefix must be /{VPC_PREFIX_MIN} to /{VPC_PREFIX_MAX} (got /{cidr.prefixlen})")
    elif existing and not AWS_VPC_PREFIX_MIN <= cidr.prefixlen <= AWS_VPC_PREFIX_MAX:
        yield _p(
            field,
            f"prefix must be /{AWS_VPC_PREFIX_MIN} to /{AWS_VPC_PREFIX_MAX}, the sizes AWS allows for a VPC "
            f"(got /{cidr.prefixlen})",
        )
    if not is_vpc_range(cidr):
        yield _p(field, f"must be {VPC_RANGES_RULE}, such as 10.0.0.0/16 (got {shown(net.vpc_cidr)})")
    elif spec.platform.runs_slurm and cidr.overlaps(DOCKER_DEFAULT_BRIDGE):
        yield _p(
            field,
            f"overlaps Docker's default bridge {DOCKER_DEFAULT_BRIDGE} (got {net.vpc_cidr!r}): Slurm nodes run "
            "Docker, which would route those VPC addresses to its bridge; choose a range such as 10.0.0.0/16",
            BACKEND,
            ORCHESTRATOR,
        )


def _lustre_size(lustre: Lustre) -> Iterator[Problem]:
    size = lustre.storage_gib
    path = ("storage", "lustre", "storage_gib")
    if size <= 0:
        yield _p(path, f"must be positive (got {shown(size)})")
    elif size > INT32_MAX:
        yield _p(path, f"must be at most {INT32_MAX} (got {shown(size)})")
    elif not is_lustre_storage(size):
        yield _p(
            path,
            f"must be {LUSTRE_MIN_STORAGE_GIB} or a multiple of {LUSTRE_STORAGE_STEP_GIB} for {lustre.deployment} "
            f"(got {size})",
            ("storage", "lustre", "deployment"),
        )


def _s3_uri_problem(uri: str) -> str | None:
    """Return why URI is not an s3://bucket/prefix URI FSx can link, or None when it is one."""
    if not uri.startswith("s3://"):
        return "must start with s3://"
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not is_bucket_name(bucket):
        return f"must name a valid bucket ({BUCKET_NAME_RULE})"
    if prefix.startswith("/") or not prefix.isprintable() or len(uri) > S3_URI_MAX:
        return f"must hold a printable key prefix without a leading '/', {S3_URI_MAX} characters at most in all"
    return None


# What describes a file system kiln creates: an attached one (file_system_id) is as FSx made it.
NEW_FILE_SYSTEM_FIELDS = ("deployment", "storage_gib", "throughput_per_tib", "compression", "efa", "data_repository")
ATTACH_FIELDS = ("mount_name", "security_group_id")


def _attached_lustre(spec: ClusterSpec, fs: Lustre) -> Iterator[Problem]:
    """An attached file system is named whole (id, mount name, client group), in its own VPC, and nothing more."""
    base = ("storage", "lustre")
    fs_id = (*base, "file_system_id")
    if spec.platform.uses_kubernetes:
        yield _p(
            fs_id,
            f"is not offered on {spec.platform.label}: an attached file system lives in network.vpc_id, and EKS's "
            "control plane needs the VPC kiln builds; remove it (kiln creates the file system)",
            BACKEND,
            ORCHESTRATOR,
        )
        return
    for field in NEW_FILE_SYSTEM_FIELDS:
        if field in fs.model_fields_set:
            yield _p(
                (*base, field),
                f"describes a file system kiln creates, but file_system_id attaches {fs.file_system_id} as it is: "
                "remove it",
                fs_id,
            )
    if fs.mount_name is None:
        yield _p(
            (*base, "mount_name"),
            f"is required with file_system_id: `aws fsx describe-file-systems --file-system-ids {fs.file_system_id} "
            "--query FileSystems[0].LustreConfiguration.MountName` prints it",
            fs_id,
        )
    if fs.security_group_id is None:
        yield _p(
            (*base, "security_group_id"),
            "is required with file_system_id: a group the file system admits Lustre clients from (TCP 988 and "
            "1018-1023), which kiln's nodes join (`kiln leftovers` names the one a kept file system admits)",
            fs_id,
        )
    if spec.network.vpc_id is None:
        yield _p(
            fs_id,
            "needs network.vpc_id and network.private_subnet_id, the file system's VPC and a subnet of it: nodes join "
            "security_group_id, and a security group serves its own VPC alone",
            ("network", "vpc_id"),
        )


def lustre(spec: ClusterSpec) -> Iterator[Problem]:
    """Lustre sizes, throughput and EFA fit the deployment type; an attached file system is named whole."""
    fs = spec.storage.lustre
    if fs is None:
        return
    base = ("storage", "lustre")
    if fs.attached:
        yield from _attached_lustre(spec, fs)
        return
    for field in ATTACH_FIELDS:
        if getattr(fs, field) is not None:
            yield _p(
                (*base, field),
                "applies only with file_system_id (a file system kiln creates gets its own): remove it, or set "
                "file_system_id",
                (*base, "file_system_id"),
            )
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
            yield _p((*base, "efa"), f"EFA-enabled FSx needs deployment PERSISTENT_2 (got {fs.deployment})", deployment)
    if fs.efa:
        yield from _lustre_efa_clients(spec)
    path = fs.data_repository.import_path
    if path is not None and (why := _s3_uri_problem(path)):
        yield _p((*base, "data_repository", "import_path"), f"{why}: an s3://bucket/prefix URI (got {shown(path)})")


def _lustre_efa_clients(spec: ClusterSpec) -> Iterator[Problem]:
    """EFA to Lustre only where kiln configures the clients, on an OS FSx takes EFA clients on, within its limit."""
    efa = ("storage", "lustre", "efa")
    if not spec.platform.lustre_efa:
        yield _p(
            efa,
            f"is not offered on {spec.platform.label}: its nodes "
            "mount the file system before kiln could give LNet their EFA interfaces (kiln does so on pcs and "
            "hyperpod with Slurm)",
            BACKEND,
            ORCHESTRATOR,
        )
        return
    least_kernel = service_fact("fsx_lustre", "efa_client_os")
    if spec.image_os not in least_kernel.value:
        yield _p(
            efa, f"FSx takes no EFA clients on {spec.image_os} ({least_kernel.source})", ("compute", "image", "os")
        )
    limit = service_fact("fsx_lustre", "efa_connection_limit")
    connections = 0
    for group in spec.compute.groups:
        try:
            facts = instance_type(group.instance_type)
        except UnknownInstanceType:
            return
        connections += group.max_count * lustre_efa_interfaces(facts.name, facts.network_cards, facts.efa_supported)
    if connections > limit.value:
        yield _p(
            efa,
            f"the groups' nodes would open {connections} EFA connections to the file system, more than the "
            f"{limit.value} FSx allows ({limit.source}): lower max_count, or turn efa off",
            ("compute", "groups"),
        )


def bucket(spec: ClusterSpec) -> Iterator[Problem]:
    """A named bucket follows S3's naming rules; an existing bucket is named, and kiln never deletes it."""
    wanted = spec.storage.bucket
    name = wanted.name
    base = ("storage", "bucket")
    if name is not None and not is_bucket_name(name):
        yield _p((*base, "name"), f"is not a valid S3 bucket name: {BUCKET_NAME_RULE} (got {shown(name)})")
    if not wanted.existing:
        return
    if name is None:
        yield _p(
            (*base, "existing"),
            "got true without storage.bucket.name: name the bucket to attach (`kiln leftovers` lists the ones an "
            "earlier deploy kept)",
            (*base, "name"),
        )
    if "retain" in wanted.model_fields_set:
        yield _p(
            (*base, "retain"),
            "does not apply with existing: true (kiln neither creates nor deletes a bucket it attaches): remove it",
            (*base, "existing"),
        )


def _instance(spec: ClusterSpec, path: Path, name: str) -> Iterator[Problem]:
    try:
        instance_type(name)
    except UnknownInstanceType as exc:
        yield _p(path, f"{_unknown(exc)} (see `kiln catalog list`)")
        return
    if name.startswith(HYPERPOD_TYPE_PREFIX) and spec.compute.backend != HYPERPOD.backend:
        yield _p(
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
        yield _p(
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
        yield _p(("compute", "groups"), "needs at least one group (got an empty list)")
    if spec.platform is PARALLELCLUSTER and len(comp.groups) > PARALLELCLUSTER_MAX_QUEUES:
        yield _p(
            ("compute", "groups"),
            f"ParallelCluster takes at most {PARALLELCLUSTER_MAX_QUEUES} queues (got {len(comp.groups)} groups)",
            BACKEND,
        )
    counted = [group.max_count for group in comp.groups] + [comp.login_nodes.count]
    if spec.platform.node_limit is NodeLimit.CLUSTER and all(0 <= count <= high for count in counted):
        # Each count past the limit has a line of its own; the sum is judged when every count is sound.
        nodes = sum(counted)
        if nodes > high:
            yield _p(
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
            yield _p(
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
        yield _p(
            (*path, "max_count"),
            f"must be >= min_count (got {group.max_count} < {group.min_count})",
            (*path, "min_count"),
        )
    if not in_range(group.root_volume_gib, ROOT_VOLUME_MIN_GIB, ROOT_VOLUME_MAX_GIB):
        yield _p(
            (*path, "root_volume_gib"),
            f"must be at least {ROOT_VOLUME_MIN_GIB} and at most {ROOT_VOLUME_MAX_GIB} GiB, the largest gp3 volume "
            f"(got {shown(group.root_volume_gib)})",
        )
    if why := _reserved_name(spec, group.name):
        yield _p((*path, "name"), why, BACKEND, ("compute", "login_nodes", "count"))
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
        yield _p(
            (*path, "placement_group"),
            "has no effect on hyperpod: HyperPod places its instance groups itself and takes no placement group; "
            "remove it",
            BACKEND,
        )
    elif group.placement_group and not facts.efa_supported:
        yield _p(
            (*path, "placement_group"),
            f"needs an EFA instance type (got {group.instance_type}, which has no EFA)",
            kind,
        )
    static_block = group.min_count == group.max_count > 0
    counts = ((*path, "max_count"), BACKEND)
    if backend == PARALLELCLUSTER.backend and group.capacity.type == "capacity-block" and not static_block:
        yield _p(
            (*path, "min_count"),
            f"must equal max_count and be above 0 for a capacity block on parallelcluster "
            f"(got {group.min_count} and {group.max_count}); ParallelCluster runs them as static nodes",
            *counts,
            (*path, "capacity", "type"),
        )
    if hyperpod and group.min_count != group.max_count:
        yield _p(
            (*path, "min_count"),
            f"must equal max_count on hyperpod, whose instance groups have a fixed size "
            f"(got {group.min_count} and {group.max_count})",
            *counts,
        )
    if hyperpod and group.capacity.type != "on-demand":
        yield _p(
            (*path, "capacity", "type"),
            f"must be on-demand on hyperpod (got {group.capacity.type}): HyperPod buys its instances itself and "
            "takes no EC2 Spot, capacity reservation or capacity block",
            BACKEND,
        )
    if hyperpod and not facts.hyperpod:
        yield _p(kind, f"SageMaker HyperPod does not offer ml.{group.instance_type}", BACKEND)
    if backend == EKS.backend and facts.accelerator_kind is None:
        yield _p(
            kind,
            f"EKS node groups need NVIDIA GPUs or AWS Neuron devices (got {group.instance_type}, which has neither); "
            "cluster services run on kiln's system group",
            BACKEND,
        )
    if backend == EKS.backend and EKS_NODE_ARCHITECTURE not in facts.architectures:
        yield _p(
            kind,
            f"EKS node groups boot x86_64 images (AL2023_x86_64_NVIDIA or AL2023_x86_64_NEURON); "
            f"{group.instance_type} is {', '.join(facts.architectures)} only",
            BACKEND,
        )


def _capacity(kind: str, reservation: str | None, path: Path) -> Iterator[Problem]:
    needs_reservation = CAPACITY[kind].reserved
    field, depends = (*path, "reservation_id"), (*path, "type")
    if needs_reservation and reservation is None:
        yield _p(field, f"is required for capacity type {kind} (a cr-... id)", depends)
    elif needs_reservation and not is_reservation_id(reservation):
        yield _p(field, f"must look like cr- and 17 hex digits (got {shown(reservation)})")
    elif not needs_reservation and reservation is not None:
        yield _p(field, f"applies to capacity-block and reservation only (got it with {kind})", depends)


def architecture(spec: ClusterSpec) -> Iterator[Problem]:
    """Every node of the one bootstrap bundle shares an architecture (the bundle installs for one)."""
    comp = spec.compute
    members = [(("compute", "groups", i, "instance_type"), g.instance_type) for i, g in enumerate(comp.groups)]
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
            yield _p(
                path,
                f"{name} runs {', '.join(sorted(offered))} only, but {dotted(first)} runs {', '.join(sorted(common))}: "
                "every node boots one bootstrap bundle, built for one architecture",
                first,
            )


def hyperpod_nodes(spec: ClusterSpec) -> Iterator[Problem]:
    """HyperPod with Slurm must offer the controller and login types too."""
    if spec.platform is not HYPERPOD:
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
    """EKS's control plane needs subnets in two AZs, and runs a Kubernetes version its platform supports."""
    wanted = spec.compute.kubernetes_version
    if not spec.platform.uses_kubernetes:
        if wanted is not None:
            yield _p(
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
        yield _p(
            ("compute", "kubernetes_version"),
            f"got {shown(wanted)}, allowed on {where}: {', '.join(allowed)} (the versions the platform supports, "
            f"{kubernetes_source(backend)}, that kiln drives)",
            BACKEND,
            ORCHESTRATOR,
        )
    # The OS (Amazon Linux 2023) is image_os's to check, from the image's data.
    if spec.network.vpc_id:
        yield _p(
            ("network", "vpc_id"),
            "EKS needs control-plane subnets in two AZs: leave vpc_id unset so kiln builds the VPC",
            BACKEND,
            ORCHESTRATOR,
        )


NO_BAKE_IN_CI = (
    "is not for a short-lived environment (a bake takes tens of minutes and its AMIs outlive the environment): "
    "bake once from a long-lived spec (its <name>-image stack, `kiln ami build`), then set compute.image.ami_id "
    "to that AMI and bake: false"
)


def image(spec: ClusterSpec) -> Iterator[Problem]:
    """An AMI or a bake only where nodes boot it; a bake starts from the backend's own image and lasts."""
    image = spec.compute.image
    if spec.platform.uses_kubernetes:
        if image.ami_id is not None:
            yield _p(
                ("compute", "image", "ami_id"),
                "has no effect with EKS: its nodes boot the EKS-optimized accelerated AMI of their instance type",
                BACKEND,
                ORCHESTRATOR,
            )
        if image.bake:
            yield _p(
                ("compute", "image", "bake"),
                "is not offered with EKS: EKS's accelerated AMI brings the driver and container toolkit, and kiln "
                "installs only EFA and the Lustre client there",
                BACKEND,
                ORCHESTRATOR,
            )
        return
    if not image.bake:
        return
    if image.ami_id is None:
        yield _p(
            ("compute", "image", "ami_id"),
            f"is required with bake: the image kiln bakes on, {spec.platform.bake_parent}",
            ("compute", "image", "bake"),
            BACKEND,
        )
    if spec.ci.ttl_hours is not None:
        yield _p(("compute", "image", "bake"), NO_BAKE_IN_CI, ("ci", "ttl_hours"))


# What pods bring on EKS, so a host pin there would change nothing.
EKS_POD_SOFTWARE = {
    "nccl": "pods bring their own NCCL",
    "enroot": "pods run in containerd, not enroot",
    "pyxis": "there is no Slurm for pyxis to plug into",
}
# What EKS nodes take from elsewhere than a pin (kiln.constructs.eks_observability pins the charts' releases), and
# the lock file: the EFA installer comes with EKS's image there, the exporters as charts, so no download needs it.
EKS_UNUSED_SOFTWARE = {
    "node_exporter": "the node exporter runs as its Helm chart, at the release kiln pins for it",
    "dcgm_exporter": "DCGM's exporter runs as NVIDIA's Helm chart, at the release kiln pins for it",
    "prometheus": "an AWS managed collector scrapes the exporters; no Prometheus agent runs",
    "lock_file": "they download nothing a lock covers (the image brings the EFA installer, Helm charts the exporters)",
}


def software(spec: ClusterSpec) -> Iterator[Problem]:
    """The Neuron release is one kiln knows, that does every Neuron group's work on the nodes' OS; NCCL on EKS hosts
    has no use."""
    yield from neuron_release_support(spec)
    if spec.platform.uses_kubernetes:
        for field, why in EKS_POD_SOFTWARE.items():
            if getattr(spec.software, field) is not None:
                yield _p(("software", field), f"has no effect on EKS nodes: {why}", BACKEND, ORCHESTRATOR)
        for field, why in EKS_UNUSED_SOFTWARE.items():
            if field in spec.software.model_fields_set:
                yield _p(("software", field), f"has no effect on EKS nodes: {why}; remove it", BACKEND, ORCHESTRATOR)


def neuron_release_support(spec: ClusterSpec) -> Iterator[Problem]:
    """The Neuron release (software.neuron, else kiln's default for the groups' types) is one kiln knows, trains on
    every Trainium group's type and serves inference on every Inferentia one's (kiln.catalog.neuron), and installs on
    the nodes' OS where kiln installs it (the image does not bring its own)."""
    pinned = spec.software.neuron
    if pinned is not None and pinned not in known_neuron_releases():
        why = uncatalogued_reason(pinned)
        yield _p(
            ("software", "neuron"),
            f"is not a Neuron SDK release kiln knows the packages of (got {shown(pinned)}{f': {why}' if why else ''}; "
            f"allowed: {', '.join(known_neuron_releases())})",
        )
        return
    version = spec.neuron_release
    if version is None:
        return
    for index, group in enumerate(spec.compute.groups):
        type_path = ("compute", "groups", index, "instance_type")
        if problem := neuron_support_problem(version, group.instance_type):
            if pinned is not None:
                yield _p(("software", "neuron"), f"got {shown(pinned)}: {problem}", type_path)
            else:
                yield _p(type_path, f"no Neuron release kiln knows fits: {problem}")
    owned = image_profile(spec.node_image).owned_on(spec.image_os)
    release = neuron_release(version)
    if ("neuron" not in owned or "neuron" in spec.software.replace) and spec.image_os not in release.os:
        where = ("software", "neuron") if pinned is not None else ("compute", "image", "os")
        yield _p(
            where,
            f"Neuron {version} installs on {', '.join(release.os)} only ({release.os_source}), and these nodes run "
            f"{spec.image_os}: choose compute.image.os {release.os[0]} or another release",
            ("compute", "image", "os"),
        )


def today() -> datetime.date:
    """Return today's date (the rules' one clock: tests set it)."""
    return datetime.date.today()


def slurm(spec: ClusterSpec) -> Iterator[Problem]:
    """software.slurm only on PCS, at a version PCS still creates clusters with."""
    path = ("software", "slurm")
    pinned = spec.software.slurm
    if pinned is None:
        return
    if spec.platform is not PCS:
        yield _p(path, f"has no effect on {spec.compute.backend}: its image brings its own Slurm (unset it)", BACKEND)
        return
    fact = service_fact("pcs", "slurm_versions")
    versions = fact.value
    if pinned not in versions:
        yield _p(path, f"got {shown(pinned)}; allowed: {', '.join(versions)} (Slurm versions PCS runs, {fact.source})")
    elif versions[pinned] is not None and datetime.date.fromisoformat(versions[pinned]) < today():
        yield Problem(
            path=path,
            message=f"got {shown(pinned)}, which PCS stopped supporting on {versions[pinned]}: no new cluster may run "
            f"it ({fact.source}); use {newest_pcs_slurm()}",
            new_cluster_only=True,
        )


def pcs_image(spec: ClusterSpec) -> Iterator[Problem]:
    """compute.image.base only on PCS, own with its AMI; a PCS sample AMI must exist for the OS."""
    image = spec.compute.image
    base = ("compute", "image", "base")
    if image.base is not None and spec.platform is not PCS:
        yield _p(base, f"is for pcs only: {spec.compute.backend}'s nodes boot its own image (unset it)", BACKEND)
        return
    if image.base == "own" and image.ami_id is None:
        yield _p(("compute", "image", "ami_id"), "is required with base: own (the AMI of your own)", base)
    if image.base == "stock":
        yield from _stock_pcs_image(spec)
    for field in ("pcs_agent", "pcs_slurm"):
        if spec.platform is not PCS and getattr(spec.software, field) is not None:
            yield _p(("software", field), f"has no effect on {spec.compute.backend}: PCS's nodes alone run it", BACKEND)


def _stock_pcs_image(spec: ClusterSpec) -> Iterator[Problem]:
    """A stock AMI becomes PCS-ready only in a bake, from PCS's regional installers at pinned releases."""
    base = ("compute", "image", "base")
    if not spec.compute.image.bake:
        yield _p(
            ("compute", "image", "bake"),
            "must be true with base: stock: PCS's agent must be on the image before a node registers, so kiln bakes "
            "it (and Slurm) into the stock AMI",
            base,
        )
    if spec.region is None:
        yield _p(("region",), "is required with base: stock: PCS publishes its installers per region", base)
    release = spec.software.pcs_slurm
    if release is None:
        yield _p(
            ("software", "pcs_slurm"),
            f"is required with base: stock: the release of PCS's Slurm {spec.slurm_version} installer to bake, such as "
            f"{spec.slurm_version}.2-1 ({service_fact('pcs', 'installers').source})",
            base,
        )
    elif not release.startswith(f"{spec.slurm_version}."):
        yield _p(
            ("software", "pcs_slurm"),
            f"got {shown(release)}, which is no release of the cluster's Slurm {spec.slurm_version}",
            ("software", "slurm"),
        )


def image_os(spec: ClusterSpec) -> Iterator[Problem]:
    """The image nodes boot exists for the OS the spec names."""
    profile = image_profile(spec.node_image)
    if "operating_systems" not in profile.facts:
        return
    offered = profile.fact("operating_systems")
    if spec.image_os in offered.value:
        return
    hint = (
        " or base: own with ami_id (your own AMI with the PCS agent and Slurm)" if profile.name == "pcs-sample" else ""
    )
    yield _p(
        ("compute", "image", "os"),
        f"got {spec.image_os}, but the {profile.title} runs {', '.join(offered.value)} only ({offered.source}): "
        f"set os: {offered.value[0]}{hint}",
        BACKEND,
        ("compute", "image", "base"),
    )


def image_ownership(spec: ClusterSpec) -> Iterator[Problem]:
    """A pin on a component the backend's image owns differs from it only where a bake replaces it."""
    profile = image_profile(spec.node_image)
    owned = profile.owned_on(spec.image_os)
    replace = spec.software.replace
    for component, entry in owned.items():
        field = PIN_FIELDS.get(component)
        pinned = getattr(spec.software, field) if field else None
        if pinned is None or component in replace or pinned == entry.version:
            continue
        if component == "neuron":
            # The pin names a Neuron release, whose runtime the pods or containers bring; the image keeps its driver.
            known = pinned in known_neuron_releases() and entry.version is not None
            if known and (problem := neuron_driver_problem(pinned, entry.version, profile.title)):
                yield _p(("software", field), f"got {shown(pinned)}: {problem}", BACKEND)
            continue
        yield _p(
            ("software", field),
            f"got {shown(pinned)}, but the {profile.title} ships {entry.describe()} and kiln adopts it "
            f"({entry.source}); "
            f"leave it unset, or replace it in a bake (software.replace: [{component}] with compute.image.bake)",
            BACKEND,
        )
    if spec.storage.lustre is not None and spec.platform is PARALLELCLUSTER and "lustre_client" not in owned:
        lustre = profile.owns["lustre_client"]
        yield _p(
            ("compute", "image", "os"),
            f"got {spec.image_os}, where the {profile.title} has no Lustre client ({lustre.source}), and "
            "ParallelCluster "
            f"mounts FSx itself: choose {' or '.join(lustre.operating_systems)}",
            ("storage", "lustre"),
        )
    for index, component in enumerate(replace):
        path = ("software", "replace", index)
        if replace.index(component) != index:
            yield _p(path, f"names {component} twice")
        elif not spec.compute.image.bake:
            yield _p(
                path,
                f"replaces the image's {component} only in a bake: set compute.image.bake (a node cannot swap a "
                "loaded driver or library at boot)",
                ("compute", "image", "bake"),
            )
        elif PIN_FIELDS.get(component) is None:
            yield _p(path, f"names {component}, which kiln has no pin for: it follows the OS's repository")


def launcher(spec: ClusterSpec) -> Iterator[Problem]:
    """Checkpoints go to a plain absolute path; the launcher's environment (launcher.env, or its older name
    nccl_env, not both) is a few plain NAME=value pairs of NCCL's, libfabric's and Neuron's own variables
    (kiln.catalog.nccl), never ones that change what the node's shells run, and each one read by some group's type."""
    checkpoint = spec.launcher.checkpoint_dir
    if not checkpoint.startswith("/"):
        yield _p(("launcher", "checkpoint_dir"), f"must be an absolute path (got {shown(checkpoint)})")
    elif not matches(NODE_PATH, checkpoint):
        yield _p(("launcher", "checkpoint_dir"), f"must be {NODE_PATH_RULE} (got {shown(checkpoint)})")
    field = spec.launcher.env_field
    if spec.launcher.env and spec.launcher.nccl_env:
        yield _p(
            ("launcher", "nccl_env"),
            "is the older name of launcher.env: set one of the two (move these variables into launcher.env)",
            ("launcher", "env"),
        )
    environment = spec.launcher.environment
    if why := override_count_problem(len(environment)):
        yield _p(("launcher", field), why)
    kinds = _group_kinds(spec)
    for name, value in environment.items():
        path = ("launcher", field, key_part(name))
        if why := override_name_problem(name):
            yield _p(path, f"{why} (got {shown(name)})")
        elif why := override_value_problem(value):
            yield _p(path, f"{why} (got {shown(value)})")
        elif kinds and (family := variable_family(name)) is not None and family not in kinds:
            yield _p(path, _unread(name, family), ("compute", "groups"))


def _group_kinds(spec: ClusterSpec) -> set[str]:
    """Return the kinds of the compute groups' types (neuron, not_neuron); empty when one is not in the catalog."""
    kinds = set()
    for group in spec.compute.groups:
        try:
            kinds.add("neuron" if instance_type(group.instance_type).neuron_count else "not_neuron")
        except UnknownInstanceType:
            return set()
    return kinds


def _unread(name: str, family: str) -> str:
    if family == "neuron":
        return (
            f"is a Neuron variable (got {shown(name)}) and no compute group has Neuron devices: only the Neuron "
            "runtime, compiler and collectives read it; remove it"
        )
    return (
        f"is NCCL's own variable (got {shown(name)}) and every compute group has Neuron devices, whose collectives "
        "do not use NCCL (they reach EFA through libfabric: FI_ variables apply); remove it"
    )


def ci(spec: ClusterSpec) -> Iterator[Problem]:
    """A TTL outlasts a deploy and is at most 30 days, and a short-lived environment names its own buckets."""
    ttl = spec.ci.ttl_hours
    if ttl is not None and (why := ttl_problem(ttl)):
        yield _p(("ci", "ttl_hours"), why)
    if ttl is not None and spec.storage.bucket.name is not None:
        yield _p(
            ("storage", "bucket", "name"),
            f"got {spec.storage.bucket.name!r} with ci.ttl_hours: a short-lived environment names its own buckets "
            "(<name>-data-<account>) so its reaper can empty them; remove storage.bucket.name",
            ("ci", "ttl_hours"),
        )


def observability(spec: ClusterSpec) -> Iterator[Problem]:
    """Dashboards need the Prometheus workspace; the Slurm exporter goes only where a kiln node runs beside Slurm's
    controller."""
    wanted = spec.observability
    if wanted is None:
        return
    if wanted.grafana and not wanted.prometheus:
        yield _p(
            ("observability", "grafana"),
            "got true without prometheus: the dashboards read the Prometheus workspace; set prometheus: true",
            ("observability", "prometheus"),
        )
    login_nodes = spec.compute.login_nodes.count
    slurm = spec.platform.runs_slurm
    if not slurm and "slurm_exporter" in wanted.model_fields_set:
        yield _p(
            ("observability", "slurm_exporter"),
            f"got {str(wanted.slurm_exporter).lower()}, but this cluster runs no Slurm (EKS): leave it out",
            BACKEND,
            ORCHESTRATOR,
        )
    for field, value, what in (
        ("slurm_exporter", wanted.slurm_exporter is True, "the exporter"),
        ("prometheus", wanted.prometheus and slurm, "the Prometheus agent"),
    ):
        if not value or not slurm:
            continue
        path = ("observability", field)
        if "controller" not in spec.platform.roles and not login_nodes:
            yield _p(
                path,
                f"got true, but PCS runs the Slurm controller itself and this cluster has no login node to run "
                f"{what} on: set compute.login_nodes.count, or leave {field} out",
                ("compute", "login_nodes", "count"),
            )


def parallelcluster_boundary(spec: ClusterSpec) -> Iterator[Problem]:
    """On ParallelCluster a permissions boundary also goes to ParallelCluster's policies template, whose
    PermissionsBoundaryPolicy parameter takes only a policy at the root path named with letters, digits, _ and -
    (platforms.json, parallelcluster.provider_custom_role boundary_pattern)."""
    boundary = spec.iam.permissions_boundary
    if spec.compute.backend != PARALLELCLUSTER.backend or boundary is None:
        return
    # A name is a policy of the deploy's account: any partition and account show its shape.
    if not re.fullmatch(PCLUSTER_BOUNDARY_PATTERN, boundary_arn(boundary, partition="aws", account="123456789012")):
        yield _p(
            ("iam", "permissions_boundary"),
            f"got {boundary!r}: on parallelcluster the boundary also goes to ParallelCluster's policies template, "
            "which takes only a policy at the root path (arn:PARTITION:iam::ACCOUNT:policy/NAME) whose NAME has "
            "letters, digits, _ and - only",
            BACKEND,
        )


def _reserved_tag_prefix(key: str) -> str | None:
    """Return why KEY may not be a spec tag's key: it begins, white space trimmed and in any case (as AWS compares
    aws:), with a prefix AWS or a platform reserves or kiln's IAM relies on (services.ec2 reserved_tag_prefixes), or
    with kiln's own."""
    folded = key.strip().casefold()
    reserved = {
        **service_fact("ec2", "reserved_tag_prefixes").value,
        KILN_TAG_PREFIX: {"reason": "kiln's own tags, such as kiln:cluster"},
    }
    for prefix, entry in reserved.items():
        if folded.startswith(prefix.casefold()):
            return f"tag keys must not start with {prefix!r} ({entry['reason']}), in any case or after spaces"
    return None


def _tag_problem(key: str, value: str) -> str | None:
    if why := _reserved_tag_prefix(key):
        return why
    if not 1 <= len(key) <= TAG_KEY_MAX:
        return f"tag keys are 1-{TAG_KEY_MAX} characters (got {len(key)})"
    if not is_tag_text(key):
        return f"tag keys may hold {TAG_RULE} only (got {shown(key)})"
    if len(value) > TAG_VALUE_MAX:
        return f"tag values are at most {TAG_VALUE_MAX} characters (got {len(value)})"
    if not is_tag_text(value):
        return f"tag values may hold {TAG_RULE} only (got {shown(value)})"
    return None


def tags(spec: ClusterSpec) -> Iterator[Problem]:
    """Tags follow AWS limits and stay out of the namespaces AWS, the platforms and kiln reserve."""
    if len(spec.tags) > MAX_SPEC_TAGS:
        yield _p(
            ("tags",),
            f"at most {MAX_SPEC_TAGS} tags (got {len(spec.tags)}): every node carries them, EC2 allows "
            f"{MAX_TAGS_PER_RESOURCE} per resource and a ParallelCluster node up to {KILN_ADDED_TAGS_MAX} of "
            f"ParallelCluster's and kiln's own beside them, and ParallelCluster takes at most "
            f"{PARALLELCLUSTER_MAX_CONFIG_TAGS} in its configuration, kiln's and its provider's included",
        )
    for key, value in spec.tags.items():
        if why := _tag_problem(key, value):
            yield _p(("tags", key_part(key)), why)


def bootstrap_steps(spec: ClusterSpec) -> Iterator[Problem]:
    """The user's steps: at most USER_STEPS_MAX, names unique, each role once and only roles the platform's nodes have;
    login only with login nodes. (Their files are read where the bundle is built: kiln.node_config.user_steps.)"""
    steps = spec.bootstrap.steps
    if len(steps) > USER_STEPS_MAX:
        yield _p(("bootstrap", "steps"), f"at most {USER_STEPS_MAX} steps (got {len(steps)})")
    platform = spec.platform
    allowed = platform.roles
    first: dict[str, int] = {}
    for index, step in enumerate(steps):
        path = ("bootstrap", "steps", index)
        if step.name in first:
            yield _p(
                (*path, "name"),
                f"is also the name of bootstrap.steps[{first[step.name]}] (got {step.name!r}): each step's name must "
                "be unique",
                ("bootstrap", "steps", first[step.name], "name"),
            )
        first.setdefault(step.name, index)
        for position, role in enumerate(step.roles):
            where = (*path, "roles", position)
            if role in step.roles[:position]:
                yield _p(where, f"names {role!r} twice: list each role once")
            elif role not in allowed:
                yield _p(
                    where,
                    f"got {role!r}, but {platform.why_fewer_roles}; allowed on {platform.label}: {', '.join(allowed)}",
                    BACKEND,
                    ORCHESTRATOR,
                )
            elif role == "login" and not spec.compute.login_nodes.count:
                yield _p(
                    where,
                    "got 'login', but compute.login_nodes.count is 0, so no node would run the step: set "
                    "compute.login_nodes.count, or remove 'login'",
                    ("compute", "login_nodes", "count"),
                )


def code_server_pod(spec: ClusterSpec) -> Iterator[Problem]:
    """On EKS (and HyperPod with EKS) code-server is a pod with the FSx volume, its home on it, run by its image's own
    user (kiln.constructs.eks_code_server): it needs storage.lustre, and code_server.user would change nothing."""
    wanted = spec.code_server
    if wanted is None or not spec.platform.uses_kubernetes:
        return
    if spec.storage.lustre is None:
        yield _p(
            ("code_server",),
            f"needs storage.lustre on {spec.platform.label}: code-server runs there as a pod with the FSx volume, its "
            "home on it; add storage.lustre, or remove code_server",
            ("storage", "lustre"),
            BACKEND,
            ORCHESTRATOR,
        )
    if "user" in wanted.model_fields_set:
        yield _p(
            ("code_server", "user"),
            f"has no effect on {spec.platform.label}: the pod runs code-server as its image's own user "
            f"({CODE_SERVER_IMAGE_USER}); remove code_server.user",
            BACKEND,
            ORCHESTRATOR,
        )


def code_server_node(spec: ClusterSpec) -> Iterator[Problem]:
    """On the Slurm backends code-server runs on a login node, else on the Slurm controller where kiln boots one
    (kiln.catalog.code_server.code_server_place): PCS without login nodes has no node for it. It runs as a user other
    than root, never a known sudoer or system account (kiln.catalog.code_server.refused_user): its terminals and
    extensions act as that user."""
    wanted = spec.code_server
    if wanted is None or spec.platform.uses_kubernetes:
        return
    platform = spec.platform
    place = code_server_place(
        kubernetes=platform.uses_kubernetes,
        controller="controller" in platform.roles,
        login_nodes=spec.compute.login_nodes.count,
    )
    if place is None:
        yield _p(
            ("code_server",),
            "got code-server, but PCS runs the Slurm controller itself and this cluster has no login node to run it "
            "on: set compute.login_nodes.count, or remove code_server",
            ("compute", "login_nodes", "count"),
            BACKEND,
        )
    if wanted.user == "root":
        yield _p(
            ("code_server", "user"),
            "got 'root', allowed: any other user: code-server's terminals and extensions act as its user; name the "
            f"user you log in as, or leave it out for kiln's own user ({CODE_SERVER_NODE_USER}, without sudo)",
        )
    elif wanted.user is not None and (why := refused_user(wanted.user)):
        yield _p(
            ("code_server", "user"),
            f"got {wanted.user!r}: {why}; name a user without sudo that has a home and a login shell, or leave it "
            f"out for kiln's own user ({CODE_SERVER_NODE_USER})",
        )


def session_logs(spec: ClusterSpec) -> Iterator[Problem]:
    """Session logs take effect where users reach the nodes through a Session Manager shell, which kiln connect opens
    with the cluster's own session document: PCS, ParallelCluster and HyperPod with Slurm
    (kiln.constructs.session_logs). On EKS and HyperPod with EKS users reach the cluster through the Kubernetes API,
    and the one session kiln opens there forwards a port, which Session Manager does not log: refused, not ignored."""
    if spec.session_logs is not None and spec.platform.uses_kubernetes:
        yield _p(
            ("session_logs",),
            f"is not available on {spec.platform.label}: users reach it through the Kubernetes API (kubectl), not a "
            "Session Manager shell, and Session Manager does not log port forwarding; remove session_logs",
            BACKEND,
        )
    elif spec.session_logs is not None and spec.session_logs.destination == "s3" and not spec.storage.bucket.name:
        yield _p(
            ("session_logs", "destination"),
            "got 's3', which needs storage.bucket.name: the nodes may write only under session-logs/ of the bucket "
            "the policy names at synthesis; name the bucket, or use cloudwatch",
            ("storage", "bucket", "name"),
        )


RULES: tuple[Rule, ...] = (
    cluster_name,
    placement,
    network,
    network_zones,
    lustre,
    bucket,
    compute,
    service_nodes,
    architecture,
    hyperpod_nodes,
    kubernetes,
    image,
    software,
    launcher,
    ci,
    observability,
    tags,
    image_ownership,
    slurm,
    pcs_image,
    image_os,
    bootstrap_steps,
    code_server_pod,
    code_server_node,
    session_logs,
    parallelcluster_boundary,
)


def check(spec: ClusterSpec) -> list[Problem]:
    """Return every cross-field problem of SPEC."""
    return [problem for rule in RULES for problem in rule(spec)]
