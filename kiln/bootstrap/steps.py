"""The declared bootstrap steps: each step's name, its file under scripts/, its phase and (install steps) its pins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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

    def __post_init__(self) -> None:
        # Only install steps land in an image; a configure step's inputs are read again at every boot.
        if self.pins and self.phase != "install":
            raise ValueError(f"step {self.name}: got pins {' '.join(self.pins)} on a {self.phase} step, allowed: none")

    @property
    def pins_variable(self) -> str:
        """Return the bundle.env variable that lists this install step's pins: KILN_PINS_<NAME>."""
        return f"KILN_PINS_{self.name.upper()}"

    @property
    def file(self) -> str:
        """Return the step's file, relative to the scripts directory (and to a rendered bundle)."""
        return f"steps/{self.name}.sh"


# Every bundle runs it first, before the target's steps: which node this is, its role and instance type.
NODE_CONTEXT = Step(name="node_context", phase="context")

# What each step installs follows bundle.env: its pins name every variable a step reads to decide what goes on a
# node (versions, on/off switches, install paths), KILN_IMAGE_DEVICES where it depends on the instance facts.
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step(
            name="install_nvidia_driver",
            phase="install",
            pins=("KILN_NVIDIA_DRIVER_VERSION", "KILN_IMAGE_NVIDIA_DRIVER", "KILN_REPLACE", "KILN_IMAGE_DEVICES"),
        ),
        Step(
            name="install_neuron",
            phase="install",
            pins=("KILN_NEURON_VERSION", "KILN_NEURON_PACKAGES", "KILN_IMAGE_NEURON"),
        ),
        Step(
            name="install_efa",
            phase="install",
            pins=("KILN_EFA_INSTALLER_VERSION", "KILN_IMAGE_EFA_INSTALLER", "KILN_IMAGE_DEVICES"),
        ),
        Step(name="install_nccl", phase="install", pins=("KILN_NCCL_VERSION", "KILN_IMAGE_NCCL", "KILN_IMAGE_DEVICES")),
        Step(name="install_lustre_client", phase="install", pins=("KILN_LUSTRE", "KILN_IMAGE_LUSTRE_CLIENT")),
        Step(
            name="install_pcs_agent",
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
            phase="install",
            pins=(
                "KILN_PCS_SLURM_VERSION",
                "KILN_PCS_SLURM_DIRECTORY",
                "KILN_PCS_SLURM_VERSION_FILE",
                "KILN_IMAGE_PCS_SLURM",
                "KILN_REPLACE",
            ),
        ),
        Step(name="install_slurm", phase="install", pins=("KILN_SLURM_SOURCE",)),
        Step(name="install_munge", phase="install", pins=("KILN_SLURM_SOURCE",)),
        Step(
            name="install_enroot",
            phase="install",
            pins=("KILN_CONTAINERS", "KILN_ENROOT_VERSION", "KILN_IMAGE_ENROOT", "KILN_REPLACE"),
        ),
        Step(
            name="install_pyxis",
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
        Step(
            name="install_container_runtime",
            phase="install",
            pins=(
                "KILN_CONTAINERS",
                "KILN_CONTAINER_RUNTIME",
                "KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION",
                "KILN_IMAGE_NVIDIA_CONTAINER_TOOLKIT",
                "KILN_IMAGE_DEVICES",
            ),
        ),
        Step(name="install_launcher", phase="install", pins=("KILN_LAUNCHER_WHEEL_SHA256", "KILN_TORCH_VERSION")),
        Step(
            name="install_exporters",
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
        Step(name="configure_users", phase="configure"),
        Step(name="configure_kernel", phase="configure"),
        Step(name="configure_accelerators", phase="configure"),
        Step(name="configure_fsx", phase="configure"),
        Step(name="configure_container_storage", phase="configure"),
        Step(name="configure_munge", phase="configure"),
        Step(name="configure_slurm", phase="configure"),
        Step(name="configure_training_env", phase="configure"),
        Step(name="configure_exporters", phase="configure"),
    )
}


def declared_steps(phase: Phase, names: tuple[str, ...]) -> tuple[Step, ...]:
    """Return the declared PHASE steps NAMES, refusing an undeclared step or one of another phase."""
    allowed = [name for name, step in STEPS.items() if step.phase == phase]
    for name in names:
        if name not in allowed:
            raise ValueError(f"{phase}_steps: got {name!r}, allowed: {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{phase}_steps: got {', '.join(names)}, allowed: each step once")
    return tuple(STEPS[name] for name in names)
