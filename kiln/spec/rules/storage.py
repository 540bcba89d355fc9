"""storage: the Lustre file system (created or attached) and the S3 bucket."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.limits import (
    INT32_MAX,
    LUSTRE_MIN_STORAGE_GIB,
    LUSTRE_STORAGE_STEP_GIB,
    PERSISTENT_2_THROUGHPUTS,
    S3_URI_MAX,
    is_lustre_storage,
)
from kiln.catalog.names import BUCKET_NAME_RULE, is_bucket_name
from kiln.catalog.platforms import lustre_efa_interfaces, service_fact
from kiln.spec.models import ClusterSpec, Lustre
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def _lustre_size(lustre: Lustre) -> Iterator[Problem]:
    size = lustre.storage_gib
    path = ("storage", "lustre", "storage_gib")
    if size <= 0:
        yield problem_at(path, f"must be positive (got {shown(size)})")
    elif size > INT32_MAX:
        yield problem_at(path, f"must be at most {INT32_MAX} (got {shown(size)})")
    elif not is_lustre_storage(size):
        yield problem_at(
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
        yield problem_at(
            fs_id,
            f"is not offered on {spec.platform.label}: an attached file system lives in network.vpc_id, and EKS's "
            "control plane needs the VPC kiln builds; remove it (kiln creates the file system)",
            BACKEND,
            ORCHESTRATOR,
        )
        return
    for field in NEW_FILE_SYSTEM_FIELDS:
        if field in fs.model_fields_set:
            yield problem_at(
                (*base, field),
                f"describes a file system kiln creates, but file_system_id attaches {fs.file_system_id} as it is: "
                "remove it",
                fs_id,
            )
    if fs.mount_name is None:
        yield problem_at(
            (*base, "mount_name"),
            f"is required with file_system_id: `aws fsx describe-file-systems --file-system-ids {fs.file_system_id} "
            "--query FileSystems[0].LustreConfiguration.MountName` prints it",
            fs_id,
        )
    if fs.security_group_id is None:
        yield problem_at(
            (*base, "security_group_id"),
            "is required with file_system_id: a group the file system admits Lustre clients from (TCP 988 and "
            "1018-1023), which kiln's nodes join (`kiln leftovers` names the one a kept file system admits)",
            fs_id,
        )
    if spec.network.vpc_id is None:
        yield problem_at(
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
            yield problem_at(
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
            yield problem_at(
                (*base, "throughput_per_tib"), f"must be one of {allowed} (got {fs.throughput_per_tib})", deployment
            )
    else:
        if fs.throughput_per_tib is not None:
            yield problem_at(
                (*base, "throughput_per_tib"),
                f"applies to PERSISTENT_2 only (got {fs.throughput_per_tib} with {fs.deployment})",
                deployment,
            )
        if fs.efa:
            yield problem_at(
                (*base, "efa"), f"EFA-enabled FSx needs deployment PERSISTENT_2 (got {fs.deployment})", deployment
            )
    if fs.efa:
        yield from _lustre_efa_clients(spec)
    path = fs.data_repository.import_path
    if path is not None and (why := _s3_uri_problem(path)):
        yield problem_at(
            (*base, "data_repository", "import_path"), f"{why}: an s3://bucket/prefix URI (got {shown(path)})"
        )


def _lustre_efa_clients(spec: ClusterSpec) -> Iterator[Problem]:
    """EFA to Lustre only where kiln configures the clients, on an OS FSx takes EFA clients on, within its limit."""
    efa = ("storage", "lustre", "efa")
    if not spec.platform.lustre_efa:
        yield problem_at(
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
        yield problem_at(
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
        yield problem_at(
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
        yield problem_at((*base, "name"), f"is not a valid S3 bucket name: {BUCKET_NAME_RULE} (got {shown(name)})")
    if not wanted.existing:
        return
    if name is None:
        yield problem_at(
            (*base, "existing"),
            "got true without storage.bucket.name: name the bucket to attach (`kiln leftovers` lists the ones an "
            "earlier deploy kept)",
            (*base, "name"),
        )
    if "retain" in wanted.model_fields_set:
        yield problem_at(
            (*base, "retain"),
            "does not apply with existing: true (kiln neither creates nor deletes a bucket it attaches): remove it",
            (*base, "existing"),
        )
