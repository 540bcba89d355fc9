"""What a baked image holds, decided from the bootstrap alone (no CDK): the install-only view of a bootstrap
config, and the manifest a rendered bundle promises (kiln.contracts.image.ImageManifest), read from its bundle.env."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kiln.bootstrap.checks import BootstrapInputError
from kiln.bootstrap.config import BootstrapConfig, NodeGroup
from kiln.bootstrap.steps import STEPS
from kiln.catalog.code_server import CODE_SERVER_NODE_USER
from kiln.catalog.envfile import parse_env_file
from kiln.contracts.bundle import USER_STEP_PREFIX
from kiln.contracts.image import ImageManifest

# The role an image bundle names for code-server when it is on, on every target with login nodes: one role, so that
# where it runs (a login node, or the controller without one) never changes the image. Images of the other targets
# hold no code-server: EKS runs it as a pod, and the local cluster boots no image.
_IMAGE_CODE_SERVER_ROLE = "login"


def image_config(config: BootstrapConfig) -> BootstrapConfig:
    """Return CONFIG as far as install steps read it, so a configure-only change (NCCL settings, users, group
    names and sizes) renders the same image bundle and never rebuilds the image.

    Instance types stay (they decide drivers and Neuron packages), sorted, as one group each. The user's install
    steps stay (their scripts go into the image: a changed one is a new image); their configure steps go.
    """
    types = sorted(config.instance_types)
    profile = config.profile
    code_server = bool(config.code_server_role) and _IMAGE_CODE_SERVER_ROLE in profile.code_server_roles
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
            dataclasses.replace(step, roles=profile.node_roles) for step in config.user_steps_of("install")
        ),
        # A bake installs code-server whatever node runs it (an image serves every role), and whom it runs as is
        # configure's business: the image keeps only whether it is on.
        code_server_role=_IMAGE_CODE_SERVER_ROLE if code_server else "",
        code_server_user=CODE_SERVER_NODE_USER if code_server else "",
    )


def read_manifest(bundle_dir: Path | str) -> ImageManifest:
    """Return the manifest a rendered bundle's bundle.env promises (its KILN_PINS_<STEP> lines)."""
    path = Path(bundle_dir) / "bundle.env"
    values = parse_env_file(path.read_text(), source=str(path))
    steps: dict[str, dict[str, str]] = {}
    for step in values["KILN_INSTALL_STEPS"].split():
        if step not in STEPS and not step.startswith(USER_STEP_PREFIX):
            raise BootstrapInputError(
                f"{path}: KILN_INSTALL_STEPS names {step!r}, which is no declared step nor a user step"
            )
        pins = values.get(f"KILN_PINS_{step.upper()}")
        if pins is None:
            raise BootstrapInputError(f"{path}: no KILN_PINS_{step.upper()} for install step {step}")
        steps[step] = {variable: values.get(variable, "") for variable in pins.split()}
    return ImageManifest(
        target=values["KILN_TARGET"],
        os=values["KILN_IMAGE_OS"],
        architecture=values["KILN_ARCHITECTURE"],
        steps=steps,
    )
