"""Render the node bootstrap bundle of one target: what a node of that target runs."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from kiln.bootstrap.artifacts import bundle_artifacts, bundle_repositories, npm_version, python_package
from kiln.bootstrap.checks import BootstrapInputError, check_pattern, check_quotable
from kiln.bootstrap.cluster_env import CLUSTER_ENV_PATH, cluster_env_text
from kiln.bootstrap.config import BootstrapConfig
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.readiness import BootReadiness, boot_readiness
from kiln.bootstrap.steps import declared_steps
from kiln.bootstrap.wheel import WHEEL_NAME, wheel_bytes
from kiln.catalog import InstanceType, SoftwareVersions, instance_type, preset_environment
from kiln.catalog.code_server import CODE_SERVER_CONFIG, CODE_SERVER_HOST, CODE_SERVER_PORT, root_equivalent_groups
from kiln.catalog.exporters import EXPORTERS, PROMETHEUS_PORT
from kiln.catalog.names import (
    ENV_NAME,
    ENV_NAME_RULE,
    ENV_VALUE,
    ENV_VALUE_RULE,
    GPU_GRES,
    NEURON_GRES,
    SCRATCH_DIR,
    neuron_device_files,
)
from kiln.catalog.nccl import efa_software
from kiln.catalog.neuron import neuron_packages
from kiln.catalog.platforms import COMPONENTS, lustre_efa_interfaces, service_fact
from kiln.contracts.bundle import HEALTH_CHECK_PROGRAM
from kiln.host.safe_output import replaced_directory

PACKAGE_DIR = Path(__file__).parent
SCRIPTS_DIR = PACKAGE_DIR / "scripts"
TEMPLATES_DIR = PACKAGE_DIR / "templates"

# A bundle's rendered files (entry point, bundle.env, each instance type's facts.env, nccl.env, profile.sh and
# gres.conf, Slurm's configuration) come to 7-12 KB for the examples; kiln's own scripts and node wheel, copied as
# they are, add about 200 KB. 4 MiB of rendered text is over three hundred times the examples' and still a small S3
# object and lifecycle-script zip; a bundle past it was rendered from inputs no cluster needs (one value expanded
# into every instance type's files) and is refused before a byte of it is written.
MAX_RENDERED_BYTES = 4 * 1024 * 1024

PYXIS_PREFIX = "/usr/local"
# Where install_code_server puts Node 24 (node/), npm (node/lib/node_modules/npm) and code-server (npm's global layout:
# lib/node_modules/code-server, bin/code-server); under the local cluster's prefix there.
CODE_SERVER_PREFIX = "/opt/kiln/code-server"

# Where Debian's Slurm lives for the local target (its paths are under the cluster's prefix at run time); the cloud
# images' Slurm prefixes are platform facts (kiln.catalog.platforms).
LOCAL_SLURM_PREFIX = "/usr"
# The local cluster's AuthInfo cred_expire: how long a requeued job waits before it starts again (slurm.conf(5)).
LOCAL_CRED_EXPIRE_S = 30


@dataclass(frozen=True, kw_only=True)
class SlurmLayout:
    """Paths, ports and users that slurm.conf and the Slurm steps share."""

    prefix: str
    conf_dir: str
    state_dir: str
    spool_dir: str
    run_dir: str
    log_dir: str
    per_node_suffix: str
    slurmctld_port: int
    slurmd_port: int
    user: str
    munge_socket: str
    # Slurm GRES kinds of the cluster's nodes: gpu, neuron.
    gres_types: tuple[str, ...]
    plugstack: bool
    # Where pyxis's SPANK configuration goes, and the plugstack.conf that must include that directory ('' where
    # the platform reads the directory itself, as PCS does).
    plugstack_dir: str = ""
    plugstack_conf: str = ""

    @property
    def directories(self) -> tuple[str, ...]:
        spool = self.spool_dir.replace("/%n", "")
        paths = (self.conf_dir, self.state_dir, spool, self.run_dir, self.log_dir)
        # The steps put every path under KILN_ROOT themselves.
        return tuple(path.replace("@KILN_ROOT@", "") for path in paths)


@dataclass(frozen=True, kw_only=True)
class RenderedBundle:
    """What render_bundle wrote: the directory, its entry script, and whether its nodes would boot."""

    directory: Path
    entry_point: str
    readiness: BootReadiness

    @property
    def unverified_artifacts(self) -> tuple[str, ...]:
        """Return the downloads the nodes would refuse for want of a sha256."""
        return tuple(artifact.name for artifact in self.readiness.unverifiable)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        # Bash's ${#array[@]} would open a jinja2 comment with the default delimiters.
        comment_start_string="<%#",
        comment_end_string="#%>",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - output is bash and Slurm config, not HTML
    )


def slurm_layout(config: BootstrapConfig) -> SlurmLayout | None:
    """Return the Slurm paths and ports of CONFIG's target, or None where nodes run no Slurm."""
    profile = config.profile
    if not profile.target.runs_slurm:
        return None
    facts = [instance_type(name) for name in config.instance_types]
    gres_types = tuple(kind for kind in ("gpu", "neuron") if any(getattr(f, f"{kind}_count") for f in facts))
    plugstack = config.containers and profile.containers and (bool(config.software.pyxis) or config.adopts("pyxis"))
    if profile.slurm_paths == "prefix":
        local = config.local
        root = "@KILN_ROOT@"
        return SlurmLayout(
            prefix=LOCAL_SLURM_PREFIX,
            conf_dir="/etc/slurm",
            state_dir=f"{root}/var/spool/slurmctld",
            spool_dir=f"{root}/var/spool/slurmd/%n",
            run_dir=f"{root}/run/slurm",
            log_dir=f"{root}/var/log/slurm",
            per_node_suffix="-%n",
            slurmctld_port=local.slurmctld_port,
            slurmd_port=local.slurmd_port,
            user="root",
            munge_socket=f"{root}/run/munge/munge.socket.2",
            gres_types=(),
            plugstack=False,
        )
    plugstack_dir, plugstack_conf = _spank_paths(config)
    if profile.slurm_paths == "service":
        if not config.software.slurm:
            raise BootstrapInputError(
                "software.slurm: required for target 'pcs' (PCS installs Slurm under its version)"
            )
        prefix = service_fact("pcs", "slurm_prefix").value.format(version=config.software.slurm)
    else:
        prefix = config.image_profile.fact("slurm_prefix").value
    return SlurmLayout(
        prefix=prefix,
        conf_dir=f"{prefix}/etc",
        state_dir="/var/spool/slurmctld",
        spool_dir="/var/spool/slurmd",
        run_dir="/run/slurm",
        log_dir="/var/log/slurm",
        per_node_suffix="",
        slurmctld_port=6817,
        slurmd_port=6818,
        user="slurm",
        munge_socket="",
        gres_types=gres_types,
        plugstack=plugstack,
        plugstack_dir=plugstack_dir if plugstack else "",
        plugstack_conf=plugstack_conf if plugstack else "",
    )


def _spank_paths(config: BootstrapConfig) -> tuple[str, str]:
    """Return where pyxis's SPANK configuration goes on CONFIG's nodes and the plugstack.conf that must include it."""
    if config.profile.slurm_paths == "service":
        # PCS reads SPANK configuration from its own directory per Slurm version, and nothing else.
        template = service_fact("pcs", "plugstack_dir").value
        return template.format(version=config.software.slurm), ""
    # ParallelCluster's and HyperPod's images: the directory, and the plugstack.conf that must include its file.
    image = config.image_profile
    return image.fact("plugstack_dir").value, image.fact("plugstack_conf").value


def pyxis_plugin(config: BootstrapConfig) -> str:
    """Return the path of pyxis's SPANK plugin: where the image has it, else where kiln builds it."""
    if config.adopts("pyxis"):
        return config.image_profile.fact("pyxis_plugin").value
    return f"{PYXIS_PREFIX}/lib/slurm/spank_pyxis.so"


def required_cluster_env(config: BootstrapConfig) -> tuple[str, ...]:
    """Return the cluster.env variables a node of CONFIG's bundle cannot boot without."""
    if config.profile.local_cluster:
        return ("KILN_CLUSTER_NAME",)
    required = ["KILN_CLUSTER_NAME", "KILN_REGION"]
    if config.lustre and config.profile.target.mounts_fsx:
        required += ["KILN_FSX_DNS", "KILN_FSX_MOUNT_NAME", "KILN_MOUNT_POINT"]
    if config.prometheus_agent:
        required.append("KILN_PROMETHEUS_REMOTE_WRITE_URL")
    return tuple(required)


def _bundle_env(config: BootstrapConfig, layout: SlurmLayout | None, wheel: tuple[str, str]) -> list[tuple[str, str]]:
    profile = config.profile
    pins = config.software
    slurm_target = config.runs_slurm
    env = {
        "KILN_TARGET": config.target,
        "KILN_ENTRY_POINT": profile.entry_point,
        "KILN_DEFAULT_ROLE": profile.default_role,
        "KILN_IMAGE_OS": config.os,
        "KILN_ARCHITECTURE": config.architecture,
        "KILN_REPO_ARCH": "sbsa" if config.architecture == "arm64" else "x86_64",
        "KILN_PACKAGE_FORMAT": "rpm" if config.os == "al2023" else "deb",
        "KILN_INSTANCE_TYPES": " ".join(config.instance_types),
        # Independent of the order and number of types: only a change in what the image must serve rebakes it.
        "KILN_IMAGE_DEVICES": image_devices(config),
        "KILN_REQUIRED_CLUSTER_ENV": " ".join(required_cluster_env(config)),
        # The user's steps (user_NAME) run after kiln's of their phase.
        "KILN_INSTALL_STEPS": " ".join((*profile.install_steps, *(s.step for s in config.user_steps_of("install")))),
        "KILN_CONFIGURE_STEPS": " ".join(
            (*profile.configure_steps, *(s.step for s in config.user_steps_of("configure")))
        ),
        "KILN_CONTAINERS": "1" if config.containers and profile.containers else "0",
        "KILN_CONTAINER_RUNTIME": config.container_runtime,
        "KILN_LUSTRE": "1" if config.lustre else "0",
        **_lustre_efa_env(config),
        **_pcs_env(config),
        "KILN_NVIDIA_DRIVER_VERSION": pins.nvidia_driver or "",
        # The least loaded driver a node adopts on any image (NVIDIA's table for the CUDA kiln's stack runs).
        "KILN_NVIDIA_DRIVER_MINIMUM": service_fact("nvidia", "cuda_driver_minimum").value["linux_driver"],
        "KILN_EFA_INSTALLER_VERSION": pins.efa_installer or "",
        "KILN_NCCL_VERSION": pins.nccl or "",
        "KILN_HOST_NCCL": "1" if profile.host_nccl else "0",
        "KILN_OFI_NCCL_DIRS": " ".join(efa_software().plugin_dirs),
        "KILN_OFI_NCCL_NAMES": " ".join(efa_software().plugin_names),
        "KILN_NEURON_VERSION": pins.neuron or "",
        "KILN_NEURON_PACKAGES": _neuron_packages(config),
        "KILN_KERNEL_PACKAGES": kernel_packages(config.os),
        "KILN_ENROOT_VERSION": (pins.enroot or "") if slurm_target else "",
        "KILN_PYXIS_VERSION": (pins.pyxis or "") if slurm_target else "",
        "KILN_PYXIS_PREFIX": PYXIS_PREFIX,
        "KILN_PYXIS_PLUGIN": pyxis_plugin(config),
        "KILN_SLURM_PLUGSTACK_DIR": layout.plugstack_dir if layout else "",
        "KILN_SLURM_PLUGSTACK_CONF": layout.plugstack_conf if layout else "",
        **_image_env(config),
        "KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION": pins.nvidia_container_toolkit or "",
        "KILN_TORCH_VERSION": pins.torch if config.launcher_torch else "",
        "KILN_TRAINING_IMAGE": config.training_image,
        "KILN_SLURM_SOURCE": "distro" if profile.distro_software else "backend",
        "KILN_SLURM_PREFIX": layout.prefix if layout else "",
        "KILN_SLURM_CONF_DIR": layout.conf_dir if layout else "",
        "KILN_SLURM_DIRS": " ".join(layout.directories) if layout and profile.slurm_config == "kiln" else "",
        "KILN_SLURM_OWNS_CONFIG": "1" if profile.slurm_config == "kiln" else "0",
        "KILN_SLURM_DAEMONS": profile.slurm_daemons,
        **_platform_paths(config),
        "KILN_MUNGE_KEY_SOURCE": profile.munge_key,
        "KILN_HYPERPOD_CONTROLLER_GROUP": config.hyperpod_controller_group,
        "KILN_HYPERPOD_LOGIN_GROUP": config.hyperpod_login_group,
        "KILN_SCRATCH_DIR": SCRATCH_DIR,
        "KILN_CHECKPOINT_DIR": config.checkpoint_dir,
        **resilience_env(config),
        "KILN_USERS": " ".join(f"{u.name}:{u.uid}:{u.group_id}:{u.shell}" for u in config.users),
        "KILN_IMDS_GUARD_ROLES": " ".join(imds_guard_roles(config.target)),
        "KILN_HUGEPAGES_2M": "" if config.hugepages_2m is None else str(config.hugepages_2m),
        "KILN_MEMLOCK_SCOPE": memlock_scope(config),
        "KILN_FORK_ENOMEM": "1" if config.fork_enomem else "0",
        "KILN_LAUNCHER_WHEEL": wheel[0],
        "KILN_LAUNCHER_WHEEL_SHA256": wheel[1],
        **_exporters_env(config),
        **_code_server_env(config),
    }
    for step in declared_steps("install", profile.install_steps):
        env[step.pins_variable] = " ".join(step.pins)
    env.update(user_steps_env(config))
    for repository in bundle_repositories(config):
        env.update(repository.bundle_env())
    for artifact in bundle_artifacts(config):
        env.update(artifact.bundle_env())
    for name, value in env.items():
        check_quotable(name, value)
    return sorted(env.items())


NODE_ROLES = ("controller", "login", "worker")


def resilience_env(config: BootstrapConfig) -> dict[str, str]:
    """Return what configure_health and configure_training_env read of the spec's resilience: who runs the node
    health check (the profile's health_runner; '' with the check off), its program and interval, sbatch's default
    requeue, the launcher's hang bounds and TCP opt-out, and who replaces a node kiln drained. All '' where no Slurm
    runs (EKS's pods read none of it)."""
    if not config.runs_slurm:
        return dict.fromkeys(
            (
                "KILN_HEALTH_CHECK",
                "KILN_HEALTH_CHECK_PROGRAM",
                "KILN_HEALTH_CHECK_INTERVAL_S",
                "KILN_JOB_REQUEUE",
                "KILN_HANG_FACTOR",
                "KILN_HANG_MIN_S",
                "KILN_ALLOW_TCP",
                "KILN_NODE_REPLACEMENT",
            ),
            "",
        )
    checks = config.health_checks
    return {
        "KILN_HEALTH_CHECK": config.profile.health_runner if checks else "",
        "KILN_HEALTH_CHECK_PROGRAM": HEALTH_CHECK_PROGRAM,
        "KILN_HEALTH_CHECK_INTERVAL_S": str(config.health_check_interval_s) if checks else "",
        "KILN_JOB_REQUEUE": "1" if config.job_requeue else "0",
        "KILN_HANG_FACTOR": str(config.hang_factor),
        "KILN_HANG_MIN_S": str(config.hang_min_s),
        "KILN_ALLOW_TCP": "1" if config.allow_tcp else "0",
        # The health check's runs hand a node kiln drained to the platform's replacement (kiln.launcher.replacement).
        "KILN_NODE_REPLACEMENT": config.profile.node_handover if checks and config.node_recovery else "",
    }


def health_check_context(config: BootstrapConfig) -> dict[str, str | int] | None:
    """Return the health check a slurm.conf kiln writes names (the local cluster's: HealthCheckProgram under the
    cluster's prefix, HealthCheckInterval), or None where Slurm does not run it (the check off, or a timer runs it)."""
    if not config.health_checks or config.profile.health_runner != "slurm":
        return None
    root = "@KILN_ROOT@" if config.profile.local_cluster else ""
    return {"program": f"{root}{HEALTH_CHECK_PROGRAM}", "interval": config.health_check_interval_s}


def user_steps_env(config: BootstrapConfig) -> dict[str, str]:
    """Return the bundle.env manifest of CONFIG's user steps: each one's sha256, phase and node roles, and an install
    step's pins (its sha256 variable: a changed script is a new pin, so a baked image without it is refused)."""
    env = {}
    for step in config.user_steps:
        prefix = step.variable_prefix
        env[f"{prefix}SHA256"] = step.sha256
        env[f"{prefix}PHASE"] = step.phase
        env[f"{prefix}ROLES"] = " ".join(step.roles)
        if step.phase == "install":
            env[f"KILN_PINS_{step.step.upper()}"] = f"{prefix}SHA256"
    return env


def imds_guard_roles(target: str) -> tuple[str, ...]:
    """Return the node roles of TARGET on which configure_imds lets only root and kiln's services reach IMDS.

    PCS and HyperPod leave their nodes' IMDS open to every user; HyperPod's agents do root's work (platforms.json,
    hyperpod.imds_guard_roles: what is documented and what is not). ParallelCluster restricts it on head and login
    nodes itself (parallelcluster.imds_secured_roles), so kiln takes only the rest. EKS nodes keep the token on the
    host (hop limit 1) and give pods their own identities; the local cluster has no IMDS.
    """
    guard = PROFILES[target].imds_guard
    if guard == "all":
        return NODE_ROLES
    if guard == "unsecured":
        secured = service_fact(target, "imds_secured_roles").value
        return tuple(role for role in NODE_ROLES if role not in secured)
    return ()


def _platform_paths(config: BootstrapConfig) -> dict[str, str]:
    """Return the image's own paths the steps read: the slurm.conf its agent writes (waited for, never written),
    where it mounts local NVMe or a volume for data (container storage goes there, over no disk it claimed), where
    HyperPod describes the cluster to the node, and the pod sandbox image it caches for containerd."""
    image = config.image_profile
    scratch = [image.fact(key).value for key in ("local_nvme", "secondary_volume") if key in image.facts]
    sandbox = image.fact("sandbox_image").value if "sandbox_image" in image.facts else None
    return {
        "KILN_SLURM_PLATFORM_CONF": image.fact("slurm_conf").value if "slurm_conf" in image.facts else "",
        "KILN_PLATFORM_SCRATCH_DIRS": " ".join(scratch),
        # The pod sandbox image the image caches in containerd's store (its metadata database): still there once
        # configure_container_storage has moved the store to local NVMe.
        "KILN_IMAGE_SANDBOX_IMAGE": sandbox["image"] if sandbox else "",
        "KILN_IMAGE_SANDBOX_STORE": sandbox["metadata"] if sandbox else "",
        "KILN_HYPERPOD_RESOURCE_CONFIG": (
            image.fact("resource_config").value if "resource_config" in image.facts else ""
        ),
    }


def _pcs_env(config: BootstrapConfig) -> dict[str, str]:
    """Return what the PCS agent and Slurm steps read: their pins, where the installers unpack and record versions."""
    if not config.profile.runs_pcs_agent:
        return {}
    installers = service_fact("pcs", "installers").value
    major = config.software.slurm
    return {
        "KILN_PCS_AGENT_VERSION": config.software.pcs_agent or "",
        "KILN_PCS_SLURM_VERSION": config.software.pcs_slurm or "",
        "KILN_PCS_AGENT_DIRECTORY": installers["agent_directory"],
        "KILN_PCS_AGENT_VERSION_FILE": installers["agent_version_file"],
        "KILN_PCS_SLURM_DIRECTORY": installers["slurm_directory"].format(major=major),
        "KILN_PCS_SLURM_VERSION_FILE": installers["slurm_version_file"].format(major=major),
    }


def _lustre_efa_env(config: BootstrapConfig) -> dict[str, str]:
    """Return how configure_fsx sets up LNet over EFA (FSx's client guide), or KILN_LUSTRE_EFA=0."""
    if not config.lustre_efa:
        return {"KILN_LUSTRE_EFA": "0"}
    lnet = service_fact("fsx_lustre", "efa_lnet").value
    least_kernel = service_fact("fsx_lustre", "efa_client_os").value
    if config.os not in least_kernel:
        raise BootstrapInputError(f"lustre_efa: FSx for Lustre takes no EFA clients on {config.os}")
    return {
        "KILN_LUSTRE_EFA": "1",
        "KILN_LUSTRE_EFA_PEER_CREDITS": str(lnet["peer_credits"]),
        "KILN_LUSTRE_EFA_DISCOVERY": str(lnet["discovery"]),
        "KILN_LUSTRE_EFA_UDSP_PRIORITY": str(lnet["udsp_priority"]),
        "KILN_LUSTRE_EFA_MIN_KERNEL": least_kernel[config.os] or "",
    }


def _image_env(config: BootstrapConfig) -> dict[str, str]:
    """Return what install steps adopt from the image: KILN_IMAGE_<COMPONENT> is '' where kiln installs it."""
    profile = config.image_profile
    env = {
        "KILN_IMAGE_PROFILE": profile.name,
        "KILN_IMAGE_TITLE": profile.title,
        "KILN_REPLACE": " ".join(config.replace),
    }
    owned = profile.owned_on(config.os)
    for component in COMPONENTS:
        env[f"KILN_IMAGE_{component.upper()}"] = owned[component].bundle_value if config.adopts(component) else ""
    return env


def _exporters_env(config: BootstrapConfig) -> dict[str, str]:
    """Return what install_exporters and configure_exporters read: which exporters, their pins and ports."""
    pins = config.software
    dcgm = pins.dcgm if "dcgm" in config.exporters else None
    # kiln-metrics serves the Slurm and EFA exporters and, for the agent, finds the nodes and writes its config.
    kiln_metrics = config.prometheus_agent or any(name in config.exporters for name in ("slurm", "efa"))
    agent_release = config.prometheus_agent and not config.profile.distro_software
    env = {
        "KILN_EXPORTERS": " ".join(config.exporters),
        "KILN_PROMETHEUS_AGENT": "1" if config.prometheus_agent else "0",
        "KILN_PROMETHEUS_VERSION": (pins.prometheus or "") if agent_release else "",
        "KILN_NODE_EXPORTER_VERSION": (pins.node_exporter or "") if "node" in config.exporters else "",
        "KILN_DCGM_VERSION": dcgm[0] if dcgm else "",
        "KILN_DCGM_EXPORTER_VERSION": dcgm[1] if dcgm else "",
        "KILN_PROMETHEUS_CLIENT_REQUIREMENT": python_package("prometheus-client").requirement if kiln_metrics else "",
        # Where the daemons come from: systemd units on cloud nodes; the local cluster starts its own.
        "KILN_EXPORTER_DAEMONS": config.profile.daemons,
        # The Slurm exporter (and the agent) runs beside the controller; PCS runs the controller itself, so on its
        # login nodes.
        "KILN_SLURM_EXPORTER_ROLE": config.profile.slurm_exporter_role,
    }
    for exporter in EXPORTERS.values():
        env[f"KILN_{exporter.name.upper()}_EXPORTER_PORT"] = str(exporter.port)
    env["KILN_PROMETHEUS_PORT"] = str(PROMETHEUS_PORT)
    return env


def _code_server_env(config: BootstrapConfig) -> dict[str, str]:
    """Return what install_code_server and configure_code_server read: the versions (empty when code-server is off),
    the role and user it runs as, the groups that user may not be in, where it listens, and who starts it (systemd;
    the local cluster starts its own)."""
    on = bool(config.code_server_role)
    return {
        "KILN_CODE_SERVER_VERSION": npm_version("code-server") if on else "",
        "KILN_CODE_SERVER_NODE_VERSION": npm_version("node") if on else "",
        "KILN_CODE_SERVER_NPM_VERSION": npm_version("npm") if on else "",
        "KILN_CODE_SERVER_ROLE": config.code_server_role,
        "KILN_CODE_SERVER_USER": config.code_server_user,
        "KILN_CODE_SERVER_PREFIX": CODE_SERVER_PREFIX,
        "KILN_CODE_SERVER_BIND": f"{CODE_SERVER_HOST}:{CODE_SERVER_PORT}",
        "KILN_CODE_SERVER_CONFIG": CODE_SERVER_CONFIG,
        # A user in one of these is root by another name: configure_code_server refuses it.
        "KILN_CODE_SERVER_ROOT_GROUPS": " ".join(root_equivalent_groups()) if on else "",
        "KILN_CODE_SERVER_DAEMONS": config.profile.daemons,
    }


def memlock_scope(config: BootstrapConfig) -> str:
    """Return where configure_kernel lifts the locked-memory limit EFA's registrations count against (platforms.json,
    efa.locked_memory): 'sessions' on every node of a Slurm cluster with EFA (a job gets the limits of the shell that
    submitted it, on a login node too), 'containers' on EKS (containerd's, which pods inherit), '' without EFA."""
    if not any(instance_type(name).efa_supported for name in config.instance_types):
        return ""
    scopes = service_fact("efa", "locked_memory").value
    return scopes.get("slurm" if config.runs_slurm else str(config.target), "")


def kernel_packages(os: str) -> str:
    """Return SERIES=STEM pairs naming the kernel packages of each kernel series on OS, which DKMS modules (NVIDIA,
    Neuron) build against: Amazon Linux 2023 names them per series (platforms.json, amazon_linux_2023.kernel_packages);
    '' on the Debian family, whose linux-headers-$(uname -r) needs no table."""
    if os != "al2023":
        return ""
    stems = service_fact("amazon_linux_2023", "kernel_packages").value
    return " ".join(f"{series}={stem}" for series, stem in stems.items())


def _neuron_packages(config: BootstrapConfig) -> str:
    """Return NAME:VERSION pairs of the pinned Neuron release, where a node of CONFIG has Neuron devices."""
    if not config.software.neuron or not any(instance_type(name).neuron_count for name in config.instance_types):
        return ""
    return " ".join(f"{name}:{version}" for name, version in neuron_packages(config.software.neuron).items())


def _facts_env(facts: InstanceType) -> dict[str, int]:
    """Return the facts.env values of one instance type: what the steps need to know of its hardware."""
    return {
        "KILN_GPU_COUNT": facts.gpu_count,
        "KILN_NEURON_COUNT": facts.neuron_count,
        "KILN_EFA_COUNT": facts.efa_interface_count,
        "KILN_NVSWITCH": int(facts.nvswitch),
        # NVLink 5 NVSwitch baseboards (HGX B200/B300): fabric manager needs the NVLink subnet manager.
        "KILN_NVLSM": int(facts.nvswitch and (facts.nvlink_generation or 0) >= 5),
        "KILN_INSTANCE_STORAGE_GB": facts.instance_storage_gb,
        # EFA interfaces LNet gives FSx for Lustre (used only with an EFA-enabled file system).
        "KILN_LUSTRE_EFA_INTERFACES": lustre_efa_interfaces(facts.name, facts.network_cards, facts.efa_supported),
    }


def image_facts(config: BootstrapConfig) -> dict[str, int]:
    """Return the facts an image build installs for: each the largest over CONFIG's instance types.

    A bake runs on a build instance of another type, and its image must serve any node of the cluster: a GPU, an
    NVSwitch or an EFA interface on one type is enough for the image to need its software.
    """
    union: dict[str, int] = {}
    for name in config.instance_types:
        for fact, value in _facts_env(instance_type(name)).items():
            union[fact] = max(union.get(fact, 0), value)
    return union


def image_devices(config: BootstrapConfig) -> str:
    """Return the device kinds an image of CONFIG serves (KILN_IMAGE_DEVICES): the facts install steps branch on."""
    facts = image_facts(config)
    kinds = {
        "gpu": "KILN_GPU_COUNT",
        "nvswitch": "KILN_NVSWITCH",
        "nvlsm": "KILN_NVLSM",
        "neuron": "KILN_NEURON_COUNT",
        "efa": "KILN_EFA_COUNT",
    }
    return " ".join(kind for kind, fact in kinds.items() if facts.get(fact, 0))


def _nccl_environment(config: BootstrapConfig, name: str) -> list[tuple[str, str]]:
    versions = SoftwareVersions(aws_ofi_nccl=config.software.aws_ofi_nccl, libfabric=config.software.libfabric)
    # With Lustre, a Neuron type gets the compile cache's root on it (kiln.catalog.nccl; kiln-launch picks each
    # job's and node's directory under it); without, Neuron's node-local default.
    environment = preset_environment(
        name, versions=versions, fork_enomem=config.fork_enomem, overrides=config.nccl_env, shared_cache=config.lustre
    )
    for key, value in environment.items():
        # nccl.env is read unquoted (docker --env-file, enroot) and profile.sh by login shells: both sides must
        # mean the same to a shell as to docker, so they are plain (matched whole: no trailing newline either).
        check_pattern("nccl_env variable name", key, ENV_NAME, ENV_NAME_RULE)
        check_pattern(f"nccl_env {key}", value, ENV_VALUE, ENV_VALUE_RULE)
    return sorted(environment.items())


class BundleTooLarge(BootstrapInputError):
    """A bundle whose rendered files would pass MAX_RENDERED_BYTES; nothing of it was written."""


class _Rendered:
    """A bundle's rendered files, held in memory until every one is rendered and their total is known to be sane."""

    def __init__(self) -> None:
        # The user's scripts are bytes, as the spec's directory holds them (their sha256 is of those bytes).
        self.files: dict[str, tuple[str | bytes, bool]] = {}
        # Directories the bundle has even when empty (slurm/: configure_slurm lists it).
        self.directories: list[str] = []
        self.size = 0

    def add(self, relative: str, text: str | bytes, executable: bool = False) -> None:
        self.size += len(text) if isinstance(text, bytes) else len(text.encode())
        if self.size > MAX_RENDERED_BYTES:
            raise BundleTooLarge(
                f"bootstrap bundle: its rendered files pass {MAX_RENDERED_BYTES} bytes at {relative} (the examples' "
                "come to about 12 KB); nothing was written: look for an outsized value in the spec (launcher.nccl_env, "
                "a YAML alias used many times, the scripts of bootstrap.steps)"
            )
        self.files[relative] = (text, executable)

    def write(self, out: Path) -> None:
        for relative in self.directories:
            (out / relative).mkdir(parents=True, exist_ok=True)
        for relative, (text, executable) in self.files.items():
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text)
            path.chmod(0o755 if executable else 0o644)


def _render_slurm(config: BootstrapConfig, layout: SlurmLayout, out: _Rendered, env: jinja2.Environment) -> None:
    profile = config.profile
    out.directories.append("slurm")
    context = {
        "target": config.target,
        "slurm": layout,
        "groups": config.groups,
        "local": config.local,
        "local_cred_expire_s": LOCAL_CRED_EXPIRE_S,
        # Slurm's HealthCheckProgram and HealthCheckInterval where kiln writes slurm.conf (None: no such lines).
        "health": health_check_context(config),
    }
    if profile.slurm_config == "kiln":
        fragments = ("base", f"plugins-{profile.slurm_plugins}", f"nodes-{profile.slurm_nodes}")
        text = "".join(env.get_template(f"slurm/{name}.conf.j2").render(context) for name in fragments)
        out.add("slurm/slurm.conf", text)
        if profile.slurm_plugins == "cgroup":
            out.add("slurm/cgroup.conf", env.get_template("slurm/cgroup.conf.j2").render(context))
        if layout.plugstack:
            out.add("slurm/plugstack.conf", env.get_template("slurm/plugstack.conf.j2").render(context))
    if layout.plugstack:
        # Copied into KILN_SLURM_PLUGSTACK_DIR, which only the backend decides.
        out.add("spank/pyxis.conf", env.get_template("slurm/pyxis.conf.j2").render(pyxis_plugin=pyxis_plugin(config)))


def local_cluster_env(config: BootstrapConfig) -> dict[str, str]:
    """Return the cluster.env values the local cluster knows at render time."""
    local = config.local
    values = {"KILN_CLUSTER_NAME": local.cluster_name, "KILN_SLURM_CONTROLLER_ADDR": local.controller_address}
    if local.controller_host:
        values["KILN_SLURM_CONTROLLER_HOST"] = local.controller_host
    return values


def library_files() -> tuple[str, ...]:
    """Return kiln's scripts that every bundle carries as they are, relative to SCRIPTS_DIR (and to the bundle):
    kiln-step, the library's loader lib.sh and its parts lib/*.sh (the entry point's and kiln-step's preamble too)."""
    parts = sorted(path.relative_to(SCRIPTS_DIR).as_posix() for path in (SCRIPTS_DIR / "lib").glob("*.sh"))
    return ("kiln-step", "lib.sh", *parts)


def render_bundle(config: BootstrapConfig, out_dir: Path | str) -> RenderedBundle:
    """Write the bundle a node of CONFIG's target runs into OUT_DIR.

    OUT_DIR may be missing, empty or an earlier bundle; anything else is refused (UnsafeOutput) untouched. Every file
    is rendered before OUT_DIR is touched: a bundle past MAX_RENDERED_BYTES raises BundleTooLarge, nothing written.
    """
    profile = config.profile
    layout = slurm_layout(config)
    wheel = wheel_bytes()
    rendered = _render(config, layout, (WHEEL_NAME, hashlib.sha256(wheel).hexdigest()))
    with replaced_directory(out_dir, what="bootstrap bundle") as staging:
        for relative in library_files():
            (staging / relative).parent.mkdir(exist_ok=True)
            shutil.copy2(SCRIPTS_DIR / relative, staging / relative)
        (staging / "steps").mkdir()
        for step in profile.steps:
            shutil.copy2(SCRIPTS_DIR / step.file, staging / step.file)
        (staging / "launcher").mkdir()
        (staging / "launcher" / WHEEL_NAME).write_bytes(wheel)
        rendered.write(staging)
    return RenderedBundle(
        directory=Path(os.path.abspath(out_dir)),
        entry_point=profile.entry_point,
        readiness=boot_readiness(config),
    )


def _render(config: BootstrapConfig, layout: SlurmLayout | None, wheel: tuple[str, str]) -> _Rendered:
    """Return the bundle's rendered files (WHEEL: the node wheel's file name and sha256), refusing past the cap."""
    profile = config.profile
    env = _environment()
    out = _Rendered()
    context = {
        "target": config.target,
        "profile": profile,
        "local": config.local,
        "cluster_env_path": CLUSTER_ENV_PATH,
        "bundle_env": _bundle_env(config, layout, wheel),
    }
    out.add(profile.entry_point, env.get_template("entry.sh.j2").render(context), executable=True)
    out.add("bundle.env", env.get_template("bundle.env.j2").render(context))
    facts_template = env.get_template("facts.env.j2")
    # An image build (--phase bake) runs with these in place of one type's facts.
    union = f"Image build facts: the largest of each over {' '.join(config.instance_types) or 'no instance types'}."
    out.add("image-facts.env", facts_template.render(title=union, facts=image_facts(config)))
    for name in config.instance_types:
        facts = instance_type(name)
        folder = f"instances/{name}"
        environment = _nccl_environment(config, name)
        out.add(
            f"{folder}/facts.env", facts_template.render(title=f"Catalog facts for {name}.", facts=_facts_env(facts))
        )
        out.add(f"{folder}/nccl.env", env.get_template("nccl.env.j2").render(environment=environment, instance=name))
        out.add(
            f"{folder}/profile.sh", env.get_template("profile.sh.j2").render(environment=environment, instance=name)
        )
        if facts.gpu_count or facts.neuron_count:
            out.add(
                f"{folder}/gres.conf",
                env.get_template("gres.conf.j2").render(
                    facts=facts,
                    gpu_gres=GPU_GRES,
                    neuron_gres=NEURON_GRES,
                    neuron_files=neuron_device_files(facts.neuron_count) if facts.neuron_count else "",
                ),
            )
    if layout is not None:
        _render_slurm(config, layout, out, env)
    if profile.local_cluster:
        out.add("cluster.env", cluster_env_text(local_cluster_env(config)))
    for step in config.user_steps:
        out.add(step.file, step.script, executable=True)
    return out
