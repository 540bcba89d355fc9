"""The declared bootstrap steps: each step's name, its file under scripts/, its phase and (install steps) its pins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kiln.bootstrap.checks import BootstrapInputError

Phase = Literal["context", "install", "configure"]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One bash step: the function NAME, alone with its private helpers in steps/NAME.sh."""

    name: str
    # install steps download and may be baked into an image; configure steps run at every boot.
    phase: Phase
    # The bundle.env variables whose values decide what this install step puts on a node. A node records them
    # as the step's marker (/etc/kiln/image/NAME.env), and a baked image whose marker differs is refused.
    pins: tuple[str, ...] = ()
    # The component whose ownership decides whether this install step adopts the image's copy or installs one
    # (kiln.catalog.platforms.COMPONENTS); None for kiln's own software and configure steps.
    component: str | None = None
    # kiln's estimate, in seconds, of the step's wall time on a fresh AWS node when it installs (an install step) or
    # runs (a configure step); the boot budget (kiln.bootstrap.budget) adds them up. These are kiln's engineering
    # estimates, a typical run rounded up, of downloads from the vendor's repository in the node's region and of
    # kernel module builds (DKMS) on a large instance: no AWS page publishes such figures, and none was measured on
    # AWS. Each is a guess to correct with a node's step log (`done in Ns` per step).
    seconds: int = 10

    def __post_init__(self) -> None:
        # Only install steps land in an image; a configure step's inputs are read again at every boot.
        if self.pins and self.phase != "install":
            raise BootstrapInputError(
                f"step {self.name}: got pins {' '.join(self.pins)} on a {self.phase} step, allowed: none"
            )
        if self.component is not None and self.phase != "install":
            raise BootstrapInputError(
                f"step {self.name}: got component {self.component} on a {self.phase} step, allowed: none"
            )

    @property
    def pins_variable(self) -> str:
        """Return the bundle.env variable that lists this install step's pins: KILN_PINS_<NAME>."""
        return f"KILN_PINS_{self.name.upper()}"

    @property
    def file(self) -> str:
        """Return the step's file, relative to the scripts directory (and to a rendered bundle)."""
        return f"steps/{self.name}.sh"


# kiln's estimate for install_code_server (a guess like the others, not an AWS figure). Its basis is measured: the
# whole step took 221 s inside `kiln local up` on a 2-core Debian 12 machine (the three tarballs from the npm registry,
# a cold npm cache, then npm's install and node-gyp's build of VS Code's native modules; the build packages were
# already there), npm's part alone 234 s in a separate cold run. A fresh node adds its build packages from the OS's
# repositories (about a minute); rounded up to 5 minutes.
CODE_SERVER_INSTALL_SECONDS = 300

# Every bundle runs it first, before the target's steps: which node this is, its role and instance type.
NODE_CONTEXT = Step(name="node_context", phase="context")

# What each step installs follows bundle.env: its pins name every variable a step reads to decide what goes on a
# node (versions, on/off switches, install paths), KILN_IMAGE_DEVICES where it depends on the instance facts.
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        # The driver's packages from NVIDIA's CUDA repository and a DKMS build of its kernel modules.
        Step(
            name="install_nvidia_driver",
            component="nvidia_driver",
            seconds=420,
            phase="install",
            pins=(
                "KILN_NVIDIA_DRIVER_VERSION",
                "KILN_IMAGE_NVIDIA_DRIVER",
                "KILN_NVIDIA_DRIVER_MINIMUM",
                "KILN_REPLACE",
                "KILN_IMAGE_DEVICES",
            ),
        ),
        # The aws-neuronx-dkms kernel module build, and the runtime and tools packages.
        Step(
            name="install_neuron",
            component="neuron",
            seconds=300,
            phase="install",
            pins=("KILN_NEURON_VERSION", "KILN_NEURON_PACKAGES", "KILN_IMAGE_NEURON"),
        ),
        # The installer's tarball, its DKMS module build, rdma-core, libfabric and aws-ofi-nccl.
        Step(
            name="install_efa",
            component="efa_installer",
            seconds=360,
            phase="install",
            pins=("KILN_EFA_INSTALLER_VERSION", "KILN_IMAGE_EFA_INSTALLER", "KILN_IMAGE_DEVICES"),
        ),
        Step(
            name="install_nccl",
            component="nccl",
            seconds=90,
            phase="install",
            # Whether the host needs the plugin at all, and where it looks for it (the directory it registers).
            pins=(
                "KILN_NCCL_VERSION",
                "KILN_IMAGE_NCCL",
                "KILN_IMAGE_DEVICES",
                "KILN_HOST_NCCL",
                "KILN_OFI_NCCL_DIRS",
                "KILN_OFI_NCCL_NAMES",
            ),
        ),
        # The client's packages and kernel modules for the running kernel.
        Step(
            name="install_lustre_client",
            component="lustre_client",
            seconds=120,
            phase="install",
            pins=("KILN_LUSTRE", "KILN_IMAGE_LUSTRE_CLIENT"),
        ),
        Step(
            name="install_pcs_agent",
            component="pcs_agent",
            seconds=60,
            phase="install",
            pins=(
                "KILN_PCS_AGENT_VERSION",
                "KILN_PCS_AGENT_DIRECTORY",
                "KILN_PCS_AGENT_VERSION_FILE",
                "KILN_IMAGE_PCS_AGENT",
                "KILN_REPLACE",
            ),
        ),
        Step(
            name="install_pcs_slurm",
            component="pcs_slurm",
            seconds=120,
            phase="install",
            pins=(
                "KILN_PCS_SLURM_VERSION",
                "KILN_PCS_SLURM_DIRECTORY",
                "KILN_PCS_SLURM_VERSION_FILE",
                "KILN_IMAGE_PCS_SLURM",
                "KILN_REPLACE",
            ),
        ),
        Step(name="install_slurm", seconds=120, phase="install", pins=("KILN_SLURM_SOURCE",)),
        Step(name="install_munge", seconds=30, phase="install", pins=("KILN_SLURM_SOURCE",)),
        # A build from source with its musl toolchain (58 s median, make -j1 on 2 cores: benchmarks/source_builds.py),
        # its build and runtime packages, and the fetch of the tree and its three submodules.
        Step(
            name="install_enroot",
            component="enroot",
            seconds=180,
            phase="install",
            pins=("KILN_CONTAINERS", "KILN_ENROOT_VERSION", "KILN_IMAGE_ENROOT", "KILN_REPLACE"),
        ),
        # Compiled against the node's Slurm headers.
        Step(
            name="install_pyxis",
            component="pyxis",
            seconds=60,
            phase="install",
            pins=(
                "KILN_CONTAINERS",
                "KILN_PYXIS_VERSION",
                "KILN_PYXIS_PREFIX",
                "KILN_PYXIS_PLUGIN",
                "KILN_SLURM_PREFIX",
                "KILN_IMAGE_PYXIS",
            ),
        ),
        # Docker's engine packages, and NVIDIA's container toolkit on GPU nodes.
        Step(
            name="install_container_runtime",
            component="nvidia_container_toolkit",
            seconds=120,
            phase="install",
            pins=(
                "KILN_CONTAINERS",
                "KILN_CONTAINER_RUNTIME",
                "KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION",
                "KILN_IMAGE_NVIDIA_CONTAINER_TOOLKIT",
                "KILN_IMAGE_DEVICES",
            ),
        ),
        # A virtual environment with torch's CUDA wheel and NVIDIA's libraries, several GB.
        Step(
            name="install_launcher",
            seconds=240,
            phase="install",
            pins=("KILN_LAUNCHER_WHEEL_SHA256", "KILN_TORCH_VERSION"),
        ),
        # DCGM's packages on GPU nodes, Prometheus's binaries.
        Step(
            name="install_exporters",
            seconds=180,
            phase="install",
            pins=(
                "KILN_EXPORTERS",
                "KILN_NODE_EXPORTER_VERSION",
                "KILN_PROMETHEUS_AGENT",
                "KILN_PROMETHEUS_VERSION",
                "KILN_DCGM_VERSION",
                "KILN_DCGM_EXPORTER_VERSION",
                "KILN_PROMETHEUS_CLIENT_REQUIREMENT",
                "KILN_LAUNCHER_WHEEL_SHA256",
                "KILN_IMAGE_DEVICES",
            ),
        ),
        # Node 24, npm and code-server from the npm registry, and a node-gyp build of VS Code's native modules (see
        # CODE_SERVER_INSTALL_SECONDS), only on the node code-server runs on, or in a bake.
        Step(
            name="install_code_server",
            seconds=CODE_SERVER_INSTALL_SECONDS,
            phase="install",
            pins=(
                "KILN_CODE_SERVER_VERSION",
                "KILN_CODE_SERVER_NODE_VERSION",
                "KILN_CODE_SERVER_NPM_VERSION",
                "KILN_CODE_SERVER_PREFIX",
            ),
        ),
        Step(name="configure_users", phase="configure"),
        # Only root and kiln's services reach the instance metadata service, and so the node role.
        Step(name="configure_imds", phase="configure"),
        Step(name="configure_kernel", phase="configure"),
        Step(name="configure_accelerators", phase="configure"),
        # The Lustre mount, and LNet over each EFA device.
        Step(name="configure_fsx", seconds=120, phase="configure"),
        Step(name="configure_container_storage", phase="configure"),
        Step(name="configure_munge", phase="configure"),
        # Waits for the controller and the node's registration.
        Step(name="configure_slurm", seconds=90, phase="configure"),
        Step(name="configure_training_env", phase="configure"),
        # kiln's node health check program, and the systemd timer that runs it where the platform's Slurm does not.
        Step(name="configure_health", phase="configure"),
        Step(name="configure_exporters", phase="configure"),
        # The user's config.yaml (once) and the systemd unit, on the node code-server runs on.
        Step(name="configure_code_server", phase="configure"),
    )
}


def declared_steps(phase: Phase, names: tuple[str, ...]) -> tuple[Step, ...]:
    """Return the declared PHASE steps NAMES, refusing an undeclared step or one of another phase."""
    allowed = [name for name, step in STEPS.items() if step.phase == phase]
    for name in names:
        if name not in allowed:
            raise BootstrapInputError(f"{phase}_steps: got {name!r}, allowed: {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise BootstrapInputError(f"{phase}_steps: got {', '.join(names)}, allowed: each step once")
    return tuple(STEPS[name] for name in names)
