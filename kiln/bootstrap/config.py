"""The renderer's only input: what a node bootstrap bundle must do. Standard library only."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from kiln.catalog import UnknownInstanceType, instance_type

TARGETS = ("pcs", "parallelcluster", "hyperpod", "eks", "local")
OPERATING_SYSTEMS = ("ubuntu2204", "ubuntu2404", "al2023", "debian12")
ARCHITECTURES = ("x86_64", "arm64")
CONTAINER_RUNTIMES = ("docker", "containerd")

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_~-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _choice(what: str, got: object, allowed: tuple[str, ...]) -> None:
    if got not in allowed:
        raise ValueError(f"{what}: got {got!r}, allowed: {', '.join(allowed)}")


def _positive(what: str, got: int) -> None:
    if not isinstance(got, int) or got < 1:
        raise ValueError(f"{what}: got {got!r}, allowed: an integer >= 1")


def _absolute(what: str, got: str) -> None:
    if not got.startswith("/") or "'" in got or "\n" in got or " " in got:
        raise ValueError(f"{what}: got {got!r}, allowed: an absolute path without spaces or quotes")


@dataclass(frozen=True, kw_only=True)
class SoftwarePins:
    """Versions the install steps pin; None means the step keeps what the image has."""

    nvidia_driver: str | None = None
    efa_installer: str | None = None
    nccl: str | None = None
    nccl_cuda: str | None = None
    aws_ofi_nccl: str | None = None
    libfabric: str | None = None
    slurm: str | None = None
    enroot: str | None = None
    pyxis: str | None = None
    nvidia_container_toolkit: str | None = None
    torch: str | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value is not None and not _VERSION.match(value):
                raise ValueError(f"software.{name}: got {value!r}, allowed: a version like 1.2.3")


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """A group of compute nodes: one instance type, one Slurm partition."""

    name: str
    instance_type: str
    max_count: int = 1

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"node group name: got {self.name!r}, allowed: ^[a-z][a-z0-9-]{{0,62}}$")
        _positive(f"node group {self.name} max_count", self.max_count)


@dataclass(frozen=True, kw_only=True)
class ClusterUser:
    """A login user that must have the same uid and gid on every node."""

    name: str
    uid: int
    gid: int | None = None
    shell: str = "/bin/bash"

    def __post_init__(self) -> None:
        if not _USER.match(self.name):
            raise ValueError(f"user name: got {self.name!r}, allowed: ^[a-z_][a-z0-9_-]{{0,31}}$")
        if not isinstance(self.uid, int) or not 1000 <= self.uid < 60000:
            raise ValueError(f"user {self.name} uid: got {self.uid!r}, allowed: 1000..59999")
        _absolute(f"user {self.name} shell", self.shell)

    @property
    def group_id(self) -> int:
        return self.uid if self.gid is None else self.gid


@dataclass(frozen=True, kw_only=True)
class LocalNode:
    """One node of the local cluster: a network namespace running `slurmd -N name`."""

    name: str
    address: str
    cpus: int = 1
    real_memory_mib: int = 1024

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"local node name: got {self.name!r}, allowed: ^[a-z][a-z0-9-]{{0,62}}$")
        try:
            ipaddress.ip_address(self.address)
        except ValueError:
            raise ValueError(f"local node {self.name} address: got {self.address!r}, allowed: an IP address") from None
        _positive(f"local node {self.name} cpus", self.cpus)
        _positive(f"local node {self.name} real_memory_mib", self.real_memory_mib)


@dataclass(frozen=True, kw_only=True)
class LocalCluster:
    """The local cluster: one slurmctld and munged plus N slurmd nodes, all state under PREFIX."""

    prefix: str
    nodes: tuple[LocalNode, ...]
    # The address slurmd reaches slurmctld at (e.g. the bridge address of the namespaces).
    controller_address: str
    # slurmctld only starts on the host its SlurmctldHost names; None: the machine's short host name at boot.
    controller_host: str | None = None
    cluster_name: str = "kiln-local"
    partition: str = "local"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818

    def __post_init__(self) -> None:
        _absolute("local.prefix", self.prefix)
        if self.prefix.rstrip("/") == "":
            raise ValueError(
                "local.prefix: got '/', allowed: a private directory (the host's /etc must stay untouched)"
            )
        if not self.nodes:
            raise ValueError("local.nodes: got none, allowed: at least one LocalNode")
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names) or (self.controller_host and self.controller_host in names):
            raise ValueError(f"local node names must be unique and differ from the controller's: got {names}")
        LocalNode(name=self.controller_host or "controller", address=self.controller_address)
        if not _NAME.match(self.cluster_name):
            raise ValueError(f"local.cluster_name: got {self.cluster_name!r}, allowed: ^[a-z][a-z0-9-]{{0,62}}$")
        if not _NAME.match(self.partition):
            raise ValueError(f"local.partition: got {self.partition!r}, allowed: ^[a-z][a-z0-9-]{{0,62}}$")
        for what, port in (("slurmctld_port", self.slurmctld_port), ("slurmd_port", self.slurmd_port)):
            if not isinstance(port, int) or not 1024 <= port <= 65535:
                raise ValueError(f"local.{what}: got {port!r}, allowed: 1024..65535")
        if self.slurmctld_port == self.slurmd_port:
            raise ValueError(f"local ports: slurmctld_port and slurmd_port must differ (got {self.slurmd_port} twice)")


@dataclass(frozen=True, kw_only=True)
class BootstrapConfig:
    """Everything that decides what a node of one target runs; deploy-time values live in cluster.env."""

    target: str
    os: str = "ubuntu2204"
    architecture: str = "x86_64"
    # Instance types of controller and login nodes: they get facts and an NCCL profile but no partition.
    service_instance_types: tuple[str, ...] = ()
    groups: tuple[NodeGroup, ...] = ()
    software: SoftwarePins = field(default_factory=SoftwarePins)
    # Artifact name -> sha256; wins over artifacts.json. Downloads without a sha256 are refused.
    checksums: dict[str, str] = field(default_factory=dict)
    # enroot/pyxis and a container runtime on cloud targets; the local target never installs them.
    containers: bool = True
    # Docker for Slurm targets; EKS nodes run containerd from the EKS image.
    container_runtime: str = "docker"
    lustre: bool = False
    nccl_env: dict[str, str] = field(default_factory=dict)
    # Only where DataLoader workers hit fork() ENOMEM with EFA: EFA stops using huge pages.
    fork_enomem: bool = False
    # 2 MiB huge pages reserved for EFA buffers; None leaves the kernel default.
    hugepages_2m: int | None = None
    users: tuple[ClusterUser, ...] = ()
    checkpoint_dir: str = "/fsx/checkpoints"
    launcher_torch: bool = False
    # HyperPod instance groups whose nodes become the Slurm controller and login nodes.
    hyperpod_controller_group: str = "controller"
    hyperpod_login_group: str = "login"
    local: LocalCluster | None = None

    def __post_init__(self) -> None:
        _choice("target", self.target, TARGETS)
        _choice("os", self.os, OPERATING_SYSTEMS)
        _choice("architecture", self.architecture, ARCHITECTURES)
        _choice("container_runtime", self.container_runtime, CONTAINER_RUNTIMES)
        if (self.target == "local") != (self.local is not None):
            raise ValueError(f"local: required exactly when target is 'local' (target {self.target!r})")
        if self.target == "local" and self.os != "debian12":
            raise ValueError(f"os: got {self.os!r} for target 'local', allowed: debian12")
        if self.target != "local" and self.os == "debian12":
            raise ValueError(f"os: got 'debian12' for target {self.target!r}, allowed: ubuntu2204, ubuntu2404, al2023")
        if self.target == "local" and (self.groups or self.service_instance_types or self.lustre):
            raise ValueError(
                "local: groups, service_instance_types and lustre are cloud-only (the local nodes are given)"
            )
        if self.target != "local" and not self.groups:
            raise ValueError(f"groups: got none for target {self.target!r}, allowed: at least one NodeGroup")
        names = [group.name for group in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"groups: names must be unique, got {names}")
        for name in self.instance_types:
            try:
                facts = instance_type(name)
            except UnknownInstanceType as error:
                raise ValueError(str(error)) from None
            if self.architecture not in facts.architectures:
                raise ValueError(
                    f"{name}: architecture {self.architecture!r} not offered (it has {', '.join(facts.architectures)})"
                )
        for artifact, digest in self.checksums.items():
            if not _SHA256.match(digest):
                raise ValueError(f"checksums.{artifact}: got {digest!r}, allowed: 64 lowercase hex digits (sha256)")
        for name in self.nccl_env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"nccl_env: got variable name {name!r}, allowed: ^[A-Z_][A-Z0-9_]*$")
        if self.hugepages_2m is not None and (not isinstance(self.hugepages_2m, int) or self.hugepages_2m < 0):
            raise ValueError(f"hugepages_2m: got {self.hugepages_2m!r}, allowed: an integer >= 0 or None")
        if self.fork_enomem and self.hugepages_2m:
            raise ValueError("hugepages_2m: must be unset with fork_enomem (EFA then stops using huge pages)")
        if self.launcher_torch and not self.software.torch:
            raise ValueError("launcher_torch: needs software.torch (a pinned torch version)")
        _absolute("checkpoint_dir", self.checkpoint_dir)
        uids = [user.uid for user in self.users]
        if len(set(uids)) != len(uids):
            raise ValueError(f"users: uids must be unique, got {uids}")

    @property
    def instance_types(self) -> tuple[str, ...]:
        """Every instance type a node of this bundle may run on, without duplicates, in spec order."""
        names = (*self.service_instance_types, *(group.instance_type for group in self.groups))
        return tuple(dict.fromkeys(name.removeprefix("ml.") for name in names))

    @property
    def runs_slurm(self) -> bool:
        return self.target != "eks"


def _architecture(instance_types: tuple[str, ...]) -> str:
    offered = [set(instance_type(name).architectures) for name in instance_types]
    for arch in ARCHITECTURES:
        if all(arch in archs for archs in offered):
            return arch
    raise ValueError(f"instance types {', '.join(instance_types)}: no one architecture all of them offer")


def config_from_spec(spec, target: str | None = None, *, local: LocalCluster | None = None) -> BootstrapConfig:
    """Translate a kiln.spec ClusterSpec into the BootstrapConfig of TARGET (default: its backend)."""
    compute = spec.compute
    # HyperPod nodes orchestrated by EKS are EKS workers: they run the eks target's steps.
    hyperpod_on_eks = compute.backend == "hyperpod" and compute.orchestrator == "eks"
    target = target or ("eks" if hyperpod_on_eks else compute.backend)
    _choice("target", target, TARGETS)
    software = spec.software
    common = {
        "checksums": dict(software.checksums),
        "nccl_env": dict(spec.launcher.nccl_env),
        "checkpoint_dir": spec.launcher.checkpoint_dir,
    }
    if target == "local":
        if local is None:
            raise ValueError("target 'local': needs local=LocalCluster(...) (the nodes are not in the spec)")
        return BootstrapConfig(target="local", os="debian12", local=local, **common)
    allowed = ("eks",) if hyperpod_on_eks else (compute.backend,)
    if target not in allowed:
        choices = ", ".join(allowed)
        raise ValueError(f"target: got {target!r} for this {compute.backend!r} spec, allowed: {choices}, local")
    service: tuple[str, ...] = ()
    if target != "eks":
        service = (compute.head_node.instance_type,)
        if compute.login_nodes.count:
            service += (compute.login_nodes.instance_type,)
    groups = tuple(
        NodeGroup(name=group.name, instance_type=group.instance_type, max_count=max(group.max_count, 1))
        for group in compute.groups
    )
    types = tuple(dict.fromkeys(name.removeprefix("ml.") for name in (*service, *(g.instance_type for g in groups))))
    return BootstrapConfig(
        target=target,
        # EKS nodes (and HyperPod's EKS nodes) boot the EKS-optimized Amazon Linux 2023 image.
        os="al2023" if target == "eks" else compute.image.os,
        architecture=_architecture(types),
        service_instance_types=service,
        groups=groups,
        software=SoftwarePins(
            nvidia_driver=software.nvidia_driver,
            efa_installer=software.efa_installer,
            slurm=software.slurm,
            enroot=software.enroot,
            pyxis=software.pyxis,
        ),
        containers=software.containers,
        container_runtime="containerd" if target == "eks" else "docker",
        lustre=spec.storage.lustre is not None,
        **common,
    )
