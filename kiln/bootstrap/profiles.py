"""How each target runs the node bootstrap: its entry point, its steps, and every decision that differs by target.

The renderer, the config's checks, the download plan and the boot budget ask a target's TargetProfile, never the
target's name. What the target's nodes are (Slurm or Kubernetes, their roles, whether kiln mounts Lustre) a profile
reads from its BootstrapTarget, the record kiln.contracts.backends's platforms hold too; the local cluster, which no
platform boots, declares its own here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from kiln.bootstrap.steps import NODE_CONTEXT, Step, declared_steps
from kiln.contracts.backends import (
    EKS_TARGET,
    HYPERPOD_TARGET,
    PARALLELCLUSTER_TARGET,
    PCS_TARGET,
    BootstrapTarget,
)

_ACCELERATOR_STEPS = ("install_nvidia_driver", "install_neuron", "install_efa", "install_nccl")
# Containers and kiln's own software, after whatever Slurm the node has (pyxis builds against its headers).
_ON_SLURM_INSTALL = (
    "install_enroot",
    "install_pyxis",
    "install_container_runtime",
    "install_launcher",
    "install_exporters",
    # Where code-server runs (a login node, else the controller), or in a bake.
    "install_code_server",
)
_CLOUD_INSTALL = (*_ACCELERATOR_STEPS, "install_lustre_client", *_ON_SLURM_INSTALL)
_CLOUD_CONFIGURE = (
    "configure_users",
    # Before the exporters: the Prometheus agent's user must be a fixed one the IMDS rules can name.
    "configure_imds",
    "configure_kernel",
    "configure_accelerators",
    "configure_fsx",
    "configure_container_storage",
    "configure_training_env",
    "configure_exporters",
    "configure_code_server",
)


def _cloud_configure(target: BootstrapTarget) -> tuple[str, ...]:
    """Return the configure steps of a Slurm cloud TARGET: configure_fsx where kiln mounts Lustre itself
    (ParallelCluster mounts it through SharedStorage before kiln's bootstrap runs), then configure_slurm, and
    configure_health once slurmd runs."""
    steps = (step for step in _CLOUD_CONFIGURE if step != "configure_fsx" or target.mounts_fsx)
    return (*steps, "configure_slurm", "configure_health")


# The operating systems of the cloud targets' images; the local cluster runs on Debian 12 only.
_CLOUD_OPERATING_SYSTEMS = ("ubuntu2204", "ubuntu2404", "al2023")

# The bootstrap's name for each node role a platform boots (kiln.contracts.backends.ROLES): compute nodes are workers.
NODE_ROLE_NAMES = {"controller": "controller", "login": "login", "compute": "worker"}
# The node roles code-server may run on, in the order kiln prefers them (kiln.catalog.code_server.code_server_place):
# a login node, else the Slurm controller.
_CODE_SERVER_ROLES = ("login", "controller")

# kiln's local cluster, which no platform boots: Slurm, on a controller host (where jobs are submitted from, so it
# stands in for a login node) and compute nodes, all namespaces of one machine with no Lustre.
LOCAL_TARGET = BootstrapTarget(name="local", runs_slurm=True, uses_kubernetes=False, roles=("controller", "compute"))

SlurmConfig = Literal["kiln", "backend"]
SlurmNodes = Literal["backend", "static"]
MungeKey = Literal["backend", "local"]
Daemons = Literal["systemd", "none"]
SlurmDaemons = Literal["systemd", "lifecycle", "none"]
SlurmPaths = Literal["image", "service", "prefix"]
SlurmPlugins = Literal["cgroup", "namespaces"]
ImdsGuard = Literal["all", "unsecured", "none"]
BootDeadline = Literal["resume_timeout", "bootstrap_timeout"]
HealthRunner = Literal["slurm", "timer", "none"]
NodeHandover = Literal["", "hyperpod"]
# What each choice field of a profile allows (None: it may be unset): a typo fails at import, not on a node.
_CHOICES: dict[str, tuple[str | None, ...]] = {
    "slurm_config": (*get_args(SlurmConfig), None),
    "slurm_nodes": get_args(SlurmNodes),
    "munge_key": get_args(MungeKey),
    "daemons": get_args(Daemons),
    "slurm_daemons": get_args(SlurmDaemons),
    "slurm_paths": get_args(SlurmPaths),
    "slurm_plugins": get_args(SlurmPlugins),
    "imds_guard": get_args(ImdsGuard),
    "boot_deadline": (*get_args(BootDeadline), None),
    "health_runner": get_args(HealthRunner),
    "node_handover": get_args(NodeHandover),
}


@dataclass(frozen=True, kw_only=True)
class TargetProfile:
    """How one target runs the bundle: its entry point and steps, who owns Slurm, and what differs by target."""

    # The target's nodes: its name, whether Slurm or Kubernetes runs, their roles, whether kiln mounts Lustre.
    target: BootstrapTarget
    entry_point: str
    how_it_runs: str
    default_role: str
    install_steps: tuple[str, ...]
    configure_steps: tuple[str, ...]
    # Who writes slurm.conf: "kiln" renders it, "backend" keeps its own; None, exactly where the target runs no Slurm.
    slurm_config: SlurmConfig | None = None
    # Where kiln writes slurm.conf: how it lists the nodes (templates/slurm/nodes-<this>.conf.j2).
    slurm_nodes: SlurmNodes = "backend"
    # Who keeps the munge key: the backend, or kiln under the local cluster's prefix (configure_munge).
    munge_key: MungeKey = "backend"
    # kiln's local cluster: its nodes are given (BootstrapConfig.local, no node groups, no FSx) as namespaces of this
    # machine, which the bundle runs under the cluster's prefix (KILN_ROOT) with the host's os-release, and kiln writes
    # their cluster.env at render time, so it holds only the cluster's name.
    local_cluster: bool = False
    # The operating systems its nodes may run (BootstrapConfig.os).
    operating_systems: tuple[str, ...] = _CLOUD_OPERATING_SYSTEMS
    # Its nodes may have GPUs, Neuron devices and EFA: the DCGM and EFA exporters have something to read.
    accelerators: bool = True
    # Its nodes run containers (enroot, pyxis, a container runtime) when BootstrapConfig.containers asks for them.
    containers: bool = True
    # Install steps take Slurm, munge, the node exporter and Prometheus from the distribution's packages: no vendor
    # repository or release is downloaded, and none needs a pin.
    distro_software: bool = False
    # Who starts kiln's daemons (exporters, code-server): systemd units, or none (the local cluster starts its own).
    daemons: Daemons = "systemd"
    # Who starts Slurm's daemons: the platform through systemd (kiln restarting them after a change), HyperPod's
    # lifecycle script against the platform's configuration, or none (the local cluster starts them).
    slurm_daemons: SlurmDaemons = "systemd"
    # Where Slurm's paths come from: the image's facts, the service's per Slurm version (PCS installs Slurm under
    # its version), or the local cluster's prefix around the distribution's Slurm.
    slurm_paths: SlurmPaths = "image"
    # How Slurm confines jobs in the slurm.conf kiln writes: cgroups, or the local cluster's namespaces.
    slurm_plugins: SlurmPlugins = "cgroup"
    # Every node runs PCS's agent and PCS's Slurm, from PCS's installers unless the image has them.
    runs_pcs_agent: bool = False
    # The node roles on which configure_imds lets only root and kiln's services reach IMDS: all of them, those the
    # platform leaves open (its imds_secured_roles fact names the others), or none (render.imds_guard_roles: why).
    imds_guard: ImdsGuard = "none"
    # The platform's deadline on a node's setup that kiln knows of: PCS's fixed ResumeTimeout for workers that scale
    # from zero, ParallelCluster's bootstrap timeouts, which kiln sets; None where it knows of none.
    boot_deadline: BootDeadline | None = None
    # Who runs kiln's node health check (kiln.contracts.bundle.HEALTH_CHECK_PROGRAM) on the nodes that run slurmd:
    # Slurm, as the HealthCheckProgram of a slurm.conf the platform takes it in (ParallelCluster's CustomSlurmSettings,
    # kiln's own on the local cluster); a systemd timer of kiln's, where the platform's slurm.conf takes none (PCS's
    # allow-list, HyperPod's agent-written file: platforms.json pcs.health_check_mechanism, hyperpod.resilience_slurm);
    # none where no Slurm runs (EKS's node monitoring agent is the platform's).
    health_runner: HealthRunner = "none"
    # Where a node kiln drained must be handed to the platform for replacement (kiln.launcher.replacement): HyperPod
    # replaces only what its own agent finds faulty, or a node set FAIL with Action:Replace (platforms.json
    # hyperpod.slurm_node_replacement); '' where the platform replaces drained nodes itself or none is replaced.
    node_handover: NodeHandover = ""

    def __post_init__(self) -> None:
        # A profile names only declared steps of the right phase: a typo fails here, not on a node.
        declared_steps("install", self.install_steps)
        declared_steps("configure", self.configure_steps)
        for name, allowed in _CHOICES.items():
            got = getattr(self, name)
            if got not in allowed:
                raise ValueError(f"{name}: got {got!r}, allowed: {', '.join(map(str, allowed))}")
        # Its target says whether Slurm runs and kiln mounts Lustre; the profile only says how.
        name, runs_slurm = self.target.name, self.target.runs_slurm
        if (self.slurm_config is not None) != runs_slurm:
            raise ValueError(
                f"slurm_config: got {self.slurm_config!r} for target {name!r}, which runs "
                f"{'Slurm: say who writes slurm.conf' if runs_slurm else 'no Slurm: leave it None'}"
            )
        if ("configure_health" in self.configure_steps) != (self.health_runner != "none") or (
            self.health_runner != "none" and not runs_slurm
        ):
            raise ValueError(
                f"health_runner: got {self.health_runner!r} for target {name!r}: configure_health runs exactly where "
                "a runner is named, and only where Slurm runs"
            )
        if ("configure_fsx" in self.configure_steps) != self.target.mounts_fsx:
            raise ValueError(
                f"configure_steps: configure_fsx {'missing' if self.target.mounts_fsx else 'given'} for target "
                f"{name!r}, whose nodes kiln {'mounts' if self.target.mounts_fsx else 'does not mount'} Lustre on"
            )

    @property
    def steps(self) -> tuple[Step, ...]:
        """Return every step the bundle holds: node_context first, then install, then configure."""
        install = declared_steps("install", self.install_steps)
        return (NODE_CONTEXT, *install, *declared_steps("configure", self.configure_steps))

    @property
    def node_roles(self) -> tuple[str, ...]:
        """Return the node roles of the target's nodes, as the bootstrap names them: the roles a user step may run
        on."""
        return tuple(NODE_ROLE_NAMES[role] for role in self.target.roles)

    @property
    def code_server_roles(self) -> tuple[str, ...]:
        """Return the node roles code-server may run on: a login node, or the Slurm controller where kiln boots one;
        none where Kubernetes runs it as a pod."""
        if self.target.uses_kubernetes:
            return ()
        return tuple(role for role in _CODE_SERVER_ROLES if role in self.node_roles)

    @property
    def host_nccl(self) -> bool:
        """Return whether jobs run NCCL from the node's own libraries, so the host needs aws-ofi-nccl on EFA nodes:
        Slurm's jobs run on the host (kiln-launch finds the plugin there); where Kubernetes runs them, pods bring
        NCCL, libfabric and aws-ofi-nccl, and the EKS AMI installs EFA minimal (platforms.json, eks-al2023)."""
        return not self.target.uses_kubernetes

    @property
    def slurm_exporter_role(self) -> str:
        """Return the node role the Slurm exporter (and the Prometheus agent) runs on: beside the controller, or on
        the login nodes where kiln boots no controller (PCS runs it itself); the controller, too, where no Slurm runs
        (no node runs the exporter there)."""
        if self.target.runs_slurm and "controller" not in self.node_roles:
            return "login"
        return "controller"


_PROFILES = (
    TargetProfile(
        target=PCS_TARGET,
        entry_point="pcs-user-data.sh",
        how_it_runs="run from the launch template's user data of each PCS node group",
        default_role="worker",
        # PCS's agent and Slurm (adopted from PCS's images, baked into a stock one) come before pyxis.
        install_steps=(
            *_ACCELERATOR_STEPS,
            "install_lustre_client",
            "install_pcs_agent",
            "install_pcs_slurm",
            *_ON_SLURM_INSTALL,
        ),
        configure_steps=_cloud_configure(PCS_TARGET),
        slurm_config="backend",
        slurm_paths="service",
        runs_pcs_agent=True,
        # PCS leaves its nodes' IMDS open to every user.
        imds_guard="all",
        boot_deadline="resume_timeout",
        health_runner="timer",
    ),
    TargetProfile(
        target=PARALLELCLUSTER_TARGET,
        entry_point="on-node-configured.sh",
        how_it_runs="ParallelCluster's OnNodeConfigured action on head, compute and login nodes, each told its role",
        default_role="worker",
        install_steps=_CLOUD_INSTALL,
        configure_steps=_cloud_configure(PARALLELCLUSTER_TARGET),
        slurm_config="backend",
        # ParallelCluster restricts IMDS on head and login nodes itself (platforms.json, imds_secured_roles).
        imds_guard="unsecured",
        boot_deadline="bootstrap_timeout",
        health_runner="slurm",
    ),
    TargetProfile(
        target=HYPERPOD_TARGET,
        entry_point="on_create.sh",
        how_it_runs="HyperPod's OnCreate lifecycle script; the role comes from the instance group",
        default_role="worker",
        install_steps=_CLOUD_INSTALL,
        # HyperPod's agent writes slurm.conf and keeps munge; the lifecycle script starts the daemons.
        configure_steps=_cloud_configure(HYPERPOD_TARGET),
        slurm_config="backend",
        slurm_daemons="lifecycle",
        # HyperPod leaves its nodes' IMDS open to every user; its documented work needs only root's (platforms.json,
        # hyperpod.imds_guard_roles).
        imds_guard="all",
        health_runner="timer",
        node_handover="hyperpod",
    ),
    TargetProfile(
        target=EKS_TARGET,
        entry_point="eks-user-data.sh",
        how_it_runs="run from the EKS node group's user data before the node joins",
        default_role="worker",
        # Pods bring the launcher; FSx comes through the CSI driver. The node and DCGM exporters run as Helm
        # charts; kiln's EFA exporter runs on the host (it reads the host's sysfs), from kiln's wheel.
        install_steps=(*_ACCELERATOR_STEPS, "install_lustre_client", "install_container_runtime", "install_exporters"),
        configure_steps=(
            "configure_users",
            "configure_kernel",
            "configure_accelerators",
            "configure_container_storage",
            "configure_training_env",
            "configure_exporters",
        ),
    ),
    TargetProfile(
        target=LOCAL_TARGET,
        entry_point="local-node.sh",
        how_it_runs="the local cluster runs it once under its prefix; it starts no daemons",
        default_role="controller",
        install_steps=(
            "install_slurm",
            "install_munge",
            "install_launcher",
            "install_exporters",
            "install_code_server",
        ),
        configure_steps=(
            "configure_munge",
            "configure_slurm",
            "configure_training_env",
            "configure_health",
            "configure_exporters",
            "configure_code_server",
        ),
        slurm_config="kiln",
        slurm_nodes="static",
        munge_key="local",
        local_cluster=True,
        operating_systems=("debian12",),
        accelerators=False,
        containers=False,
        distro_software=True,
        daemons="none",
        slurm_daemons="none",
        slurm_paths="prefix",
        slurm_plugins="namespaces",
        health_runner="slurm",
    ),
)
PROFILES: dict[str, TargetProfile] = {profile.target.name: profile for profile in _PROFILES}
