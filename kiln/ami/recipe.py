"""What a baked image holds, decided from the bootstrap alone (no CDK): the install-only view of a bootstrap
config, the install steps in groups (one Image Builder component each), and the manifest a rendered bundle
promises, as AMI tags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from kiln.ami.names import TAG_ARCHITECTURE, TAG_OS, TAG_TARGET, pin_tag
from kiln.bootstrap.config import USER_STEP_PREFIX, USER_STEP_ROLES, BootstrapConfig, NodeGroup
from kiln.bootstrap.steps import STEPS
from kiln.catalog.code_server import default_user
from kiln.catalog.envfile import parse_env_file

# One Image Builder component per group, in bootstrap order: a failed build names the group that broke.
STEP_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accelerators", ("install_nvidia_driver", "install_neuron", "install_efa", "install_nccl")),
    ("storage", ("install_lustre_client",)),
    ("scheduler", ("install_pcs_agent", "install_pcs_slurm", "install_slurm", "install_munge")),
    ("containers", ("install_enroot", "install_pyxis", "install_container_runtime")),
    ("launcher", ("install_launcher",)),
    ("exporters", ("install_exporters",)),
    ("code-server", ("install_code_server",)),
)
# The user's install steps (user_NAME, spec bootstrap.steps) come after kiln's, in one component of their own.
USER_STEP_GROUP = "user-steps"


# The role an image bundle names for code-server when it is on: one per target, so that where it runs (a login node,
# or the controller without one) never changes the image.
_IMAGE_CODE_SERVER_ROLE = {"pcs": "login", "parallelcluster": "login", "hyperpod": "login"}


def image_config(config: BootstrapConfig) -> BootstrapConfig:
    """Return CONFIG as far as install steps read it, so a configure-only change (NCCL settings, users, group
    names and sizes) renders the same image bundle and never rebuilds the image.

    Instance types stay (they decide drivers and Neuron packages), sorted, as one group each. The user's install
    steps stay (their scripts go into the image: a changed one is a new image); their configure steps go.
    """
    types = sorted(config.instance_types)
    code_server = bool(config.code_server_role) and config.target in _IMAGE_CODE_SERVER_ROLE
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
        # Every role: the bake runs them all whatever nodes they are for, so their roles do not change the image.
        user_steps=tuple(
            dataclasses.replace(step, roles=USER_STEP_ROLES[config.target]) for step in config.user_steps_of("install")
        ),
        # A bake installs code-server whatever node runs it (an image serves every role), and whom it runs as is
        # configure's business: the image keeps only whether it is on.
        code_server_role=_IMAGE_CODE_SERVER_ROLE[config.target] if code_server else "",
        code_server_user=default_user(config.os) if code_server else "",
    )


def step_groups(install_steps: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Return the groups of INSTALL_STEPS (a profile's, in its order), leaving out empty groups.

    Refuses a step in no group, or an order the groups would change: the image must install in bootstrap order.
    """
    grouped = [(name, tuple(step for step in install_steps if step in members)) for name, members in STEP_GROUPS]
    grouped.append((USER_STEP_GROUP, tuple(step for step in install_steps if step.startswith(USER_STEP_PREFIX))))
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
        for step, pins in self.steps.items():
            # Not the user's steps: up to 16 digests would crowd EC2's 50 tags per AMI, and kiln:recipe (a digest of
            # the bundle, their scripts included) already tells one image's scripts from another's.
            if not step.startswith(USER_STEP_PREFIX):
                # Only pins with a value: an empty one is kiln installing nothing of it (the image's copy, or none),
                # which an absent tag says as well, and EC2 allows 50 tags per AMI (a PCS image pins about 48).
                tags |= {pin_tag(variable): value for variable, value in pins.items() if value}
        return tags


def read_manifest(bundle_dir: Path | str) -> ImageManifest:
    """Return the manifest a rendered bundle's bundle.env promises (its KILN_PINS_<STEP> lines)."""
    path = Path(bundle_dir) / "bundle.env"
    values = parse_env_file(path.read_text(), source=str(path))
    steps: dict[str, dict[str, str]] = {}
    for step in values["KILN_INSTALL_STEPS"].split():
        if step not in STEPS and not step.startswith(USER_STEP_PREFIX):
            raise ValueError(f"{path}: KILN_INSTALL_STEPS names {step!r}, which is no declared step nor a user step")
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
