"""The renderer's only input: what a node bootstrap bundle must do. Standard library only."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from kiln.bootstrap.checks import BootstrapInputError, check_choice, check_node_path, check_pattern, check_positive
from kiln.bootstrap.local_target import LocalCluster
from kiln.bootstrap.profiles import NODE_ROLE_NAMES, PROFILES, TargetProfile
from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.exporters import EXPORTERS
from kiln.catalog.limits import (
    HANG_FACTOR,
    HANG_MIN_S,
    HEALTH_CHECK_INTERVAL_S,
    USER_STEP_MAX_BYTES,
    USER_STEPS_MAX,
    in_range,
)
from kiln.catalog.names import (
    DCGM_EXPORTER_VERSION,
    DCGM_EXPORTER_VERSION_RULE,
    ENV_NAME,
    ENV_NAME_RULE,
    ENV_VALUE,
    ENV_VALUE_RULE,
    NODE_GROUP_NAME,
    NODE_GROUP_NAME_RULE,
    SHA256,
    SHA256_RULE,
    USER_STEP_NAME,
    USER_STEP_NAME_RULE,
    ec2_type_name,
)
from kiln.catalog.nccl import override_count_problem, override_name_problem, override_value_problem
from kiln.catalog.neuron import neuron_release
from kiln.catalog.platforms import PIN_FIELDS, ImageProfile, image_profile, image_profile_for, known_image_profiles
from kiln.contracts.backends import HYPERPOD_CONTROLLER_GROUP, HYPERPOD_LOGIN_GROUP
from kiln.contracts.bundle import USER_STEP_PREFIX

TARGETS = tuple(PROFILES)
OPERATING_SYSTEMS = ("ubuntu2204", "ubuntu2404", "al2023", "debian12")
ARCHITECTURES = ("x86_64", "arm64")
CONTAINER_RUNTIMES = ("docker", "containerd")

# Every string below reaches a node's files; each is matched whole (fullmatch), ASCII only.
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_~-]*")
_HTTPS_URL = re.compile(r"https://[!#-&(-~]+")


@dataclass(frozen=True, kw_only=True)
class SoftwarePins:
    """Versions kiln installs; None means kiln installs none (the image's own copy is adopted, or none is needed).

    A component the node's image owns (kiln.catalog.platforms) takes no pin unless BootstrapConfig.replace names
    it: kiln adopts the image's copy and never installs a second one at boot.
    """

    nvidia_driver: str | None = None
    efa_installer: str | None = None
    # NCCL from NVIDIA's CUDA repository, as its package version: 2.27.3-1+cuda12.9.
    nccl: str | None = None
    # The AWS Neuron SDK release whose driver, runtime, collectives and tools Neuron nodes install.
    neuron: str | None = None
    aws_ofi_nccl: str | None = None
    libfabric: str | None = None
    slurm: str | None = None
    enroot: str | None = None
    pyxis: str | None = None
    nvidia_container_toolkit: str | None = None
    torch: str | None = None
    # Prometheus's node exporter release (its published sha256 per architecture is in artifacts.json).
    node_exporter: str | None = None
    # The Prometheus release the agent of Slurm backends runs (sha256 per architecture in artifacts.json).
    prometheus: str | None = None
    # NVIDIA's DCGM and DCGM exporter as the pair its releases name: 4.6.0-4.8.3.
    dcgm_exporter: str | None = None
    # PCS's agent and Slurm installer releases, baked into a stock image: 1.3.1-1, 25.11.2-1.
    pcs_agent: str | None = None
    pcs_slurm: str | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value is not None:
                check_pattern(f"software.{name}", value, _VERSION, "a version like 1.2.3")
        if self.dcgm_exporter is not None:
            check_pattern(
                "software.dcgm_exporter", self.dcgm_exporter, DCGM_EXPORTER_VERSION, DCGM_EXPORTER_VERSION_RULE
            )

    @property
    def dcgm(self) -> tuple[str, str] | None:
        """Return (DCGM version, DCGM exporter version) of the pinned pair, or None."""
        if self.dcgm_exporter is None:
            return None
        match = DCGM_EXPORTER_VERSION.fullmatch(self.dcgm_exporter)
        return match.group(1), match.group(2)


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """A group of compute nodes: one instance type, one Slurm partition."""

    name: str
    instance_type: str
    max_count: int = 1

    def __post_init__(self) -> None:
        check_pattern("node group name", self.name, NODE_GROUP_NAME, NODE_GROUP_NAME_RULE)
        check_positive(f"node group {self.name} max_count", self.max_count)


@dataclass(frozen=True, kw_only=True)
class ClusterUser:
    """A login user that must have the same uid and gid on every node."""

    name: str
    uid: int
    gid: int | None = None
    shell: str = "/bin/bash"

    def __post_init__(self) -> None:
        check_pattern("user name", self.name, _USER, "a lowercase letter or '_', then up to 31 of a-z, 0-9, '_', '-'")
        if not isinstance(self.uid, int) or not 1000 <= self.uid < 60000:
            raise BootstrapInputError(f"user {self.name} uid: got {self.uid!r}, allowed: 1000..59999")
        check_node_path(f"user {self.name} shell", self.shell)

    @property
    def group_id(self) -> int:
        return self.uid if self.gid is None else self.gid


# Where a bundle carries the user's scripts, each under its step's name.
USER_STEPS_DIR = "user-steps"


@dataclass(frozen=True, kw_only=True)
class UserStep:
    """One of the user's own scripts, run by the bootstrap under its steps' contract (log, marker, failure line).

    script is the file's bytes as the spec's directory holds it and sha256 their digest: the bundle carries both, and
    a node refuses a script whose digest differs. roles are node roles (controller, login, worker).
    """

    name: str
    phase: str
    roles: tuple[str, ...]
    script: bytes
    sha256: str

    def __post_init__(self) -> None:
        check_pattern("user step name", self.name, USER_STEP_NAME, USER_STEP_NAME_RULE)
        what = f"user step {self.name}"
        check_choice(f"{what} phase", self.phase, ("install", "configure"))
        if not isinstance(self.roles, tuple) or not self.roles:
            raise BootstrapInputError(f"{what} roles: got {self.roles!r}, allowed: a tuple of at least one role")
        for role in self.roles:
            check_choice(f"{what} roles", role, tuple(NODE_ROLE_NAMES.values()))
        if len(set(self.roles)) != len(self.roles):
            raise BootstrapInputError(f"{what} roles: got {', '.join(self.roles)}, allowed: each role once")
        if not isinstance(self.script, bytes) or not self.script.startswith(b"#!"):
            raise BootstrapInputError(f"{what} script: allowed: bytes starting with '#!' (the interpreter line)")
        if len(self.script) > USER_STEP_MAX_BYTES:
            raise BootstrapInputError(
                f"{what} script: got {len(self.script)} bytes, allowed: at most {USER_STEP_MAX_BYTES}"
            )
        check_pattern(f"{what} sha256", self.sha256, SHA256, SHA256_RULE)
        if hashlib.sha256(self.script).hexdigest() != self.sha256:
            raise BootstrapInputError(f"{what} sha256: got {self.sha256}, allowed: the sha256 of its script")

    @property
    def step(self) -> str:
        """Return the step's id in the bundle: user_NAME."""
        return f"{USER_STEP_PREFIX}{self.name}"

    @property
    def file(self) -> str:
        """Return the script's path in a rendered bundle."""
        return f"{USER_STEPS_DIR}/{self.name}"

    @property
    def variable_prefix(self) -> str:
        """Return the prefix of its bundle.env variables: KILN_USER_STEP_<NAME>_ (lib.sh's bundle_value USER_STEP)."""
        return f"KILN_USER_STEP_{self.name.upper()}_"


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
    # Download URL -> sha256 from the spec's lock file, for files whose publisher gives no digest. A download
    # with no digest (published or locked) is refused on the node.
    locked: dict[str, str] = field(default_factory=dict)
    # enroot/pyxis and a container runtime on cloud targets; the local target never installs them.
    containers: bool = True
    # Docker for Slurm targets; EKS nodes run containerd from the EKS image.
    container_runtime: str = "docker"
    lustre: bool = False
    # LNet over EFA to an EFA-enabled FSx for Lustre file system (kiln mounts it: configure_fsx).
    lustre_efa: bool = False
    nccl_env: dict[str, str] = field(default_factory=dict)
    # Only where DataLoader workers hit fork() ENOMEM with EFA: EFA stops using huge pages.
    fork_enomem: bool = False
    # 2 MiB huge pages reserved for EFA buffers; None leaves the kernel default.
    hugepages_2m: int | None = None
    users: tuple[ClusterUser, ...] = ()
    checkpoint_dir: str = "/fsx/checkpoints"
    launcher_torch: bool = False
    # The spec's resilience: kiln's node health check (kiln-launch health --drain) on the nodes that run slurmd, every
    # health_check_interval_s seconds, run the way the target's profile says (health_runner: configure_health); whether
    # sbatch submits requeueable jobs by default (job_requeue); the launcher's hang bounds and its TCP opt-out
    # (launcher.env, configure_training_env). Slurm targets only: EKS's pods read none of it from the host.
    health_checks: bool = True
    health_check_interval_s: int = 300
    job_requeue: bool = True
    hang_factor: int = 10
    hang_min_s: int = 300
    allow_tcp: bool = False
    # resilience.node_recovery automatic: a node kiln drained is handed to the platform that replaces it, where the
    # target's profile says the platform must be told (node_handover).
    node_recovery: bool = True
    # HyperPod instance groups whose nodes become the Slurm controller and login nodes.
    hyperpod_controller_group: str = HYPERPOD_CONTROLLER_GROUP
    hyperpod_login_group: str = HYPERPOD_LOGIN_GROUP
    # The exporters (kiln.catalog.exporters names) the nodes run; each runs only on the nodes it is for.
    exporters: tuple[str, ...] = ()
    # A Prometheus agent on the Slurm exporter's node that scrapes every node's exporters (found through sinfo) and
    # remote-writes to cluster.env's KILN_PROMETHEUS_REMOTE_WRITE_URL; on the local target, Debian's Prometheus.
    prometheus_agent: bool = False
    local: LocalCluster | None = None
    # The image profile nodes boot (kiln.catalog.platforms): the components it ships are adopted, not installed.
    # Default: the image the target's backend publishes (image_profile_for).
    image: str = ""
    # Image-owned components kiln installs its pinned version of all the same: only in a bake, never at boot.
    replace: tuple[str, ...] = ()
    # The cluster's region, for regional downloads (PCS's installers); None where none is needed.
    region: str | None = None
    # The user's own steps (spec bootstrap.steps), in order: each runs after kiln's steps of its phase.
    user_steps: tuple[UserStep, ...] = ()
    # code-server (spec code_server): the node role it runs on (kiln.catalog.code_server.code_server_place: login, or
    # controller where there is no login node), '' when off; and the user it runs as. EKS runs it as a pod instead.
    code_server_role: str = ""
    code_server_user: str = ""

    def __post_init__(self) -> None:
        check_choice("target", self.target, TARGETS)
        if not self.image:
            object.__setattr__(self, "image", image_profile_for(self.target))
        check_choice("image", self.image, known_image_profiles())
        if self.target not in image_profile(self.image).targets:
            raise BootstrapInputError(
                f"image: got {self.image!r} for target {self.target!r}, allowed: "
                f"{', '.join(name for name in known_image_profiles() if self.target in image_profile(name).targets)}"
            )
        check_choice("os", self.os, OPERATING_SYSTEMS)
        check_choice("architecture", self.architecture, ARCHITECTURES)
        check_choice("container_runtime", self.container_runtime, CONTAINER_RUNTIMES)
        profile = self.profile
        if profile.local_cluster != (self.local is not None):
            raise BootstrapInputError(f"local: required exactly when target is 'local' (target {self.target!r})")
        if self.os not in profile.operating_systems:
            raise BootstrapInputError(
                f"os: got {self.os!r} for target {self.target!r}, allowed: {', '.join(profile.operating_systems)}"
            )
        if profile.local_cluster and (self.groups or self.service_instance_types or self.lustre):
            raise BootstrapInputError(
                "local: groups, service_instance_types and lustre are cloud-only (the local nodes are given)"
            )
        if self.lustre_efa and not (self.lustre and profile.target.mounts_fsx):
            mounting = (name for name, other in PROFILES.items() if other.target.mounts_fsx)
            raise BootstrapInputError(
                f"lustre_efa: got True for target {self.target!r}, allowed: with lustre, on targets whose nodes kiln "
                f"mounts it on ({', '.join(mounting)})"
            )
        if not profile.local_cluster and not self.groups:
            raise BootstrapInputError(f"groups: got none for target {self.target!r}, allowed: at least one NodeGroup")
        names = [group.name for group in self.groups]
        if len(set(names)) != len(names):
            raise BootstrapInputError(f"groups: names must be unique, got {names}")
        for name in self.instance_types:
            try:
                facts = instance_type(name)
            except UnknownInstanceType as error:
                raise BootstrapInputError(str(error)) from None
            if self.architecture not in facts.architectures:
                raise BootstrapInputError(
                    f"{name}: architecture {self.architecture!r} not offered (it has {', '.join(facts.architectures)})"
                )
        for url, digest in self.locked.items():
            check_pattern("locked URL", url, _HTTPS_URL, "an https:// URL of printable ASCII without quotes")
            check_pattern(f"locked {url}", digest, SHA256, SHA256_RULE)
        if why := override_count_problem(len(self.nccl_env)):
            raise BootstrapInputError(f"nccl_env: {why}")
        for name, value in self.nccl_env.items():
            check_pattern("nccl_env variable name", name, ENV_NAME, ENV_NAME_RULE)
            check_pattern(f"nccl_env {name}", value, ENV_VALUE, ENV_VALUE_RULE)
            # nccl.env and profile.sh carry it into /etc/profile.d: only NCCL's and libfabric's variables, short.
            if why := override_name_problem(name) or override_value_problem(value):
                raise BootstrapInputError(f"nccl_env {name}: {why}")
        for what in ("hyperpod_controller_group", "hyperpod_login_group"):
            check_pattern(what, getattr(self, what), NODE_GROUP_NAME, NODE_GROUP_NAME_RULE)
        if self.hugepages_2m is not None and (not isinstance(self.hugepages_2m, int) or self.hugepages_2m < 0):
            raise BootstrapInputError(f"hugepages_2m: got {self.hugepages_2m!r}, allowed: an integer >= 0 or None")
        if self.fork_enomem and self.hugepages_2m:
            raise BootstrapInputError("hugepages_2m: must be unset with fork_enomem (EFA then stops using huge pages)")
        if self.software.pcs_slurm and not self.software.pcs_slurm.startswith(f"{self.software.slurm}."):
            raise BootstrapInputError(
                f"software.pcs_slurm: got {self.software.pcs_slurm!r}, allowed: a release of Slurm "
                f"{self.software.slurm} such as {self.software.slurm}.2-1"
            )
        if not profile.host_nccl and self.software.nccl:
            raise BootstrapInputError(
                f"software.nccl: got {self.software.nccl!r} for target {self.target!r}, allowed: none (pods bring NCCL)"
            )
        if self.launcher_torch and not self.software.torch:
            raise BootstrapInputError("launcher_torch: needs software.torch (a pinned torch version)")
        if self.training_image and not (self.containers and profile.containers):
            raise BootstrapInputError(
                f"software.containers: got false, but kiln-launch on the Neuron nodes runs in the training container "
                f"{self.training_image} with enroot (no Neuron PyTorch on the host); leave it on"
            )
        check_node_path("checkpoint_dir", self.checkpoint_dir)
        self._check_resilience()
        self._check_exporters()
        self._check_ownership()
        self._check_user_steps()
        self._check_code_server()
        uids = [user.uid for user in self.users]
        if len(set(uids)) != len(uids):
            raise BootstrapInputError(f"users: uids must be unique, got {uids}")

    def _check_resilience(self) -> None:
        bounds = {
            "health_check_interval_s": HEALTH_CHECK_INTERVAL_S,
            "hang_factor": HANG_FACTOR,
            "hang_min_s": HANG_MIN_S,
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not in_range(value, low, high):
                raise BootstrapInputError(f"{name}: got {value!r}, allowed: an integer from {low} to {high}")
        for name in ("health_checks", "job_requeue", "allow_tcp", "node_recovery"):
            if not isinstance(getattr(self, name), bool):
                raise BootstrapInputError(f"{name}: got {getattr(self, name)!r}, allowed: True or False")

    def _check_exporters(self) -> None:
        for name in self.exporters:
            check_choice("exporters", name, tuple(EXPORTERS))
        if len(set(self.exporters)) != len(self.exporters):
            raise BootstrapInputError(f"exporters: got {', '.join(self.exporters)}, allowed: each exporter once")
        if "slurm" in self.exporters and not self.runs_slurm:
            raise BootstrapInputError(f"exporters: got 'slurm' for target {self.target!r}, which runs no Slurm")
        if "node" in self.exporters and not self.profile.distro_software and not self.software.node_exporter:
            raise BootstrapInputError("exporters: 'node' needs software.node_exporter (a pinned release)")
        for name in ("node", "dcgm"):
            if name in self.exporters and self.profile.target.uses_kubernetes:
                raise BootstrapInputError(
                    f"exporters: got {name!r} for target {self.target!r}, which runs it as a Helm chart"
                )
        for name in ("dcgm", "efa"):
            if name in self.exporters and not self.profile.accelerators:
                raise BootstrapInputError(
                    f"exporters: got {name!r} for target {self.target!r}, which has no GPUs and no EFA"
                )
        if self.prometheus_agent and not self.runs_slurm:
            raise BootstrapInputError(
                f"prometheus_agent: got True for target {self.target!r}, which runs no Slurm to find nodes"
            )
        if self.prometheus_agent and not self.profile.distro_software and not self.software.prometheus:
            raise BootstrapInputError("prometheus_agent: needs software.prometheus (a pinned release)")
        if self.prometheus_agent and not self.exporters:
            raise BootstrapInputError("prometheus_agent: got True without exporters to scrape")
        if "dcgm" in self.exporters and not self.software.dcgm_exporter:
            raise BootstrapInputError("exporters: 'dcgm' needs software.dcgm_exporter (a pinned DCGM-exporter pair)")

    def _check_user_steps(self) -> None:
        """Refuse more than USER_STEPS_MAX user steps, a name twice, or a role the target's nodes do not have."""
        if not isinstance(self.user_steps, tuple) or not all(isinstance(s, UserStep) for s in self.user_steps):
            raise BootstrapInputError(f"user_steps: got {self.user_steps!r}, allowed: a tuple of UserStep")
        if len(self.user_steps) > USER_STEPS_MAX:
            raise BootstrapInputError(f"user_steps: got {len(self.user_steps)}, allowed: at most {USER_STEPS_MAX}")
        names = [step.name for step in self.user_steps]
        if len(set(names)) != len(names):
            raise BootstrapInputError(f"user_steps: got names {', '.join(names)}, allowed: each name once")
        allowed = self.profile.node_roles
        for step in self.user_steps:
            for role in step.roles:
                if role not in allowed:
                    raise BootstrapInputError(
                        f"user step {step.name} roles: got {role!r} for target {self.target!r}, allowed: "
                        f"{', '.join(allowed)}"
                    )

    def user_steps_of(self, phase: str) -> tuple[UserStep, ...]:
        """Return the user steps of PHASE (install or configure), in order."""
        return tuple(step for step in self.user_steps if step.phase == phase)

    def _check_code_server(self) -> None:
        """code-server runs on one role of a Slurm target, as a user other than root (locally: who ran kiln)."""
        if not self.code_server_role:
            if self.code_server_user:
                raise BootstrapInputError("code_server_user: got a user without code_server_role, allowed: none")
            return
        allowed = self.profile.code_server_roles
        check_choice(f"code_server_role for target {self.target!r}", self.code_server_role, allowed)
        check_pattern("code_server_user", self.code_server_user, _USER, "a Linux user name")
        if self.code_server_user == "root" and not self.profile.local_cluster:
            raise BootstrapInputError(
                "code_server_user: got 'root', allowed: any other user (code-server's terminals run as it)"
            )

    def _check_ownership(self) -> None:
        """Refuse a pin on a component the image owns, unless the config replaces it (in a bake)."""
        profile = image_profile(self.image)
        for component in self.replace:
            check_choice("replace", component, tuple(PIN_FIELDS))
            if not getattr(self.software, PIN_FIELDS[component], None):
                raise BootstrapInputError(
                    f"replace: {component} needs software.{PIN_FIELDS[component]} (what kiln installs instead)"
                )
        if len(set(self.replace)) != len(self.replace):
            raise BootstrapInputError(f"replace: got {', '.join(self.replace)}, allowed: each component once")
        for component, owned in profile.owned_on(self.os).items():
            pin = PIN_FIELDS.get(component)
            if component in self.replace or pin is None or getattr(self.software, pin) is None:
                continue
            raise BootstrapInputError(
                f"software.{pin}: got {getattr(self.software, pin)!r}, but the {profile.title} ships "
                f"{owned.describe()} and kiln adopts it; leave it unpinned, or replace it in a bake"
            )

    @property
    def image_profile(self) -> ImageProfile:
        """Return the image nodes boot: what it ships and owns."""
        return image_profile(self.image)

    def adopts(self, component: str) -> bool:
        """Return whether nodes adopt COMPONENT from their image instead of installing it."""
        return component in self.image_profile.owned_on(self.os) and component not in self.replace

    @property
    def instance_types(self) -> tuple[str, ...]:
        """Every instance type a node of this bundle may run on, without duplicates, in spec order."""
        names = (*self.service_instance_types, *(group.instance_type for group in self.groups))
        return tuple(dict.fromkeys(ec2_type_name(name) for name in names))

    @property
    def profile(self) -> TargetProfile:
        """Return how this config's target runs the bundle."""
        return PROFILES[self.target]

    @property
    def runs_slurm(self) -> bool:
        return self.profile.target.runs_slurm

    @property
    def training_image(self) -> str:
        """Return the container kiln-launch trains in on this bundle's Neuron Slurm nodes (KILN_TRAINING_IMAGE), or ''.

        No image a Slurm backend boots ships Neuron's PyTorch (platforms.json images: the PCS sample AMIs',
        ParallelCluster's and HyperPod's list none), and Neuron offers none for Amazon Linux 2023, the PCS sample AMIs'
        only OS (kiln.launcher.container). So kiln-launch on a Neuron node of a Slurm target runs in the PyTorch
        training container of the cluster's Neuron release, with enroot: '' where nodes run no Slurm or have no Neuron
        devices, or where the release publishes no training container (kiln.catalog.neuron).
        """
        neuron_nodes = any(instance_type(group.instance_type).neuron_count for group in self.groups)
        if not (self.runs_slurm and neuron_nodes and self.software.neuron):
            return ""
        return neuron_release(self.software.neuron).training_image or ""
