"""What a baked image holds, decided from the bootstrap alone (no CDK): the install-only view of a bootstrap
config, the install steps in groups (one Image Builder component each), and the manifest a rendered bundle
promises, as AMI tags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from kiln.ami.names import TAG_ARCHITECTURE, TAG_OS, TAG_TARGET, pin_tag
from kiln.bootstrap.config import BootstrapConfig, NodeGroup
from kiln.bootstrap.steps import STEPS
from kiln.catalog.envfile import parse_env_file

# One Image Builder component per group, in bootstrap order: a failed build names the group that broke.
STEP_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accelerators", ("install_nvidia_driver", "install_neuron", "install_efa", "install_nccl")),
    ("storage", ("install_lustre_client",)),
    ("scheduler", ("install_pcs_agent", "install_pcs_slurm", "install_slurm", "install_munge")),
    ("containers", ("install_enroot", "install_pyxis", "install_container_runtime")),
    ("launcher", ("install_launcher",)),
    ("exporters", ("install_exporters",)),
)


def image_config(config: BootstrapConfig) -> BootstrapConfig:
    """Return CONFIG as far as install steps read it, so a configure-only change (NCCL settings, users, group
    names and sizes) renders the same image bundle and never rebuilds the image.

    Instance types stay (they decide drivers and Neuron packages), sorted, as one group each.
    """
    types = sorted(config.instance_types)
    return dataclasses.replace(
        config,
        service_instance_types=(),
        groups=tuple(NodeGroup(name=f"image{index}", instance_type=name) for index, name in enumerate(types, 1)),
        nccl_env={},
        fork_enomem=False,
        hugepages_2m=None,
        users=(),
        checkpoint_dir=BootstrapConfig.checkpoint_dir,
        hyperpod_controller_group=BootstrapConfig.hyperpod_controller_group,
        hyperpod_login_group=BootstrapConfig.hyperpod_login_group,
    )


def step_groups(install_steps: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Return the groups of INSTALL_STEPS (a profile's, in its order), leaving out empty groups.

    Refuses a step in no group, or an order the groups would change: the image must install in bootstrap order.
    """
    grouped = [(name, tuple(step for step in install_steps if step in members)) for name, members in STEP_GROUPS]
    grouped = [(name, steps) for name, steps in grouped if steps]
    flattened = tuple(step for _, steps in grouped for step in steps)
    if flattened != tuple(install_steps):
        raise ValueError(
            f"install steps {' '.join(install_steps)}: the image groups would run them as {' '.join(flattened)}"
        )
    return tuple(grouped)


@dataclass(frozen=True, kw_only=True)
class ImageManifest:
    """What a bundle's install steps put on an image: per step, the pinned variables and their values."""

    target: str
    os: str
    architecture: str
    steps: dict[str, dict[str, str]]

    @property
    def install_steps(self) -> tuple[str, ...]:
        return tuple(self.steps)

    def tags(self) -> dict[str, str]:
        """Return the AMI tags of this manifest: target, OS, architecture and one kiln:pin:* tag per pin."""
        tags = {TAG_TARGET: self.target, TAG_OS: self.os, TAG_ARCHITECTURE: self.architecture}
        for pins in self.steps.values():
            tags |= {pin_tag(variable): value for variable, value in pins.items()}
        return tags


def read_manifest(bundle_dir: Path | str) -> ImageManifest:
    """Return the manifest a rendered bundle's bundle.env promises (its KILN_PINS_<STEP> lines)."""
    path = Path(bundle_dir) / "bundle.env"
    values = parse_env_file(path.read_text(), source=str(path))
    steps: dict[str, dict[str, str]] = {}
    for step in values["KILN_INSTALL_STEPS"].split():
        if step not in STEPS:
            raise ValueError(f"{path}: KILN_INSTALL_STEPS names {step!r}, which is no declared step")
        pins = values.get(f"KILN_PINS_{step.upper()}")
        if pins is None:
            raise ValueError(f"{path}: no KILN_PINS_{step.upper()} for install step {step}")
        steps[step] = {variable: values.get(variable, "") for variable in pins.split()}
    return ImageManifest(
        target=values["KILN_TARGET"],
        os=values["KILN_IMAGE_OS"],
        architecture=values["KILN_ARCHITECTURE"],
        steps=steps,
    )
