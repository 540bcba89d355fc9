"""Names and tags of a cluster's baked image: the one place the image stack, the compute stack and `kiln ami`
agree on (standard library only)."""

from __future__ import annotations

# The part of a cluster whose stack holds the image pipeline: <cluster>-image.
IMAGE_PART = "image"
# Output keys of the image stack.
OUTPUT_PIPELINE_ARN = "PipelineArn"
OUTPUT_IMAGE_ID = "ImageId"
OUTPUT_IMAGE_PARAMETER = "ImageParameter"
# Every AMI kiln bakes carries these tags, besides the spec's own.
TAG_CLUSTER = "kiln:cluster"
TAG_TARGET = "kiln:target"
TAG_OS = "kiln:os"
TAG_ARCHITECTURE = "kiln:architecture"
# The digest of what the install steps got (scripts and pins): the same digest means the same image contents.
TAG_RECIPE = "kiln:recipe"
# One tag per pinned version an install step recorded: kiln:pin:<variable without KILN_, lowercase>.
TAG_PIN_PREFIX = "kiln:pin:"


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
