"""Names of a cluster's baked image (its tags are kiln.contracts.tags), and the manifest a rendered bundle promises
as AMI tags: the one place the image stack, the TrainingImage construct, the compute stack and `kiln ami` agree
on."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.contracts.bundle import USER_STEP_PREFIX
from kiln.contracts.tags import TAG_ARCHITECTURE, TAG_OS, TAG_PIN_PREFIX, TAG_TARGET

# The part of a cluster whose stack holds the image pipeline: <cluster>-image.
IMAGE_PART = "image"


def image_stack_name(cluster: str) -> str:
    """Return the name of CLUSTER's image stack."""
    return f"{cluster}-{IMAGE_PART}"


def pipeline_name(cluster: str) -> str:
    """Return the name of CLUSTER's Image Builder pipeline."""
    return f"{cluster}-image"


def image_parameter_name(cluster: str) -> str:
    """Return the SSM parameter that holds the newest AMI kiln baked for CLUSTER (its compute stack reads it)."""
    return f"/kiln/{cluster}/image-id"


def pin_tag(variable: str) -> str:
    """Return the AMI tag key of bundle variable KILN_NAME: kiln:pin:name."""
    if not variable.startswith("KILN_"):
        raise ValueError(f"pin variable: got {variable!r}, allowed: a KILN_ bundle variable")
    return TAG_PIN_PREFIX + variable.removeprefix("KILN_").lower()


@dataclass(frozen=True, kw_only=True)
class ImageManifest:
    """What a bundle's install steps put on an image: per step, the pinned variables and their values
    (kiln.bootstrap.image_recipe.read_manifest reads it from a rendered bundle)."""

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
