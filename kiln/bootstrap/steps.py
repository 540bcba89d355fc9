"""The declared bootstrap steps: every step's name, its file under scripts/, and its phase."""

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

    @property
    def file(self) -> str:
        """Return the step's file, relative to the scripts directory (and to a rendered bundle)."""
        return f"steps/{self.name}.sh"


# Every bundle runs it first, before the target's steps: which node this is, its role and instance type.
NODE_CONTEXT = Step(name="node_context", phase="context")

STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step(name="install_nvidia_driver", phase="install"),
        Step(name="install_neuron", phase="install"),
        Step(name="install_efa", phase="install"),
        Step(name="install_nccl", phase="install"),
        Step(name="install_lustre_client", phase="install"),
        Step(name="install_slurm", phase="install"),
        Step(name="install_munge", phase="install"),
        Step(name="install_enroot", phase="install"),
        Step(name="install_pyxis", phase="install"),
        Step(name="install_container_runtime", phase="install"),
        Step(name="install_launcher", phase="install"),
        Step(name="configure_users", phase="configure"),
        Step(name="configure_kernel", phase="configure"),
        Step(name="configure_accelerators", phase="configure"),
        Step(name="configure_fsx", phase="configure"),
        Step(name="configure_container_storage", phase="configure"),
        Step(name="configure_munge", phase="configure"),
        Step(name="configure_slurm", phase="configure"),
        Step(name="configure_training_env", phase="configure"),
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
