"""ImageStack: the <name>-image stack of a spec with compute.image.bake, whose newest AMI the compute stack boots."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.bootstrap.image_recipe import image_config, read_manifest
from kiln.catalog.limits import MAX_TAGS_PER_RESOURCE
from kiln.constructs import BootstrapAssets, BootstrapAssetsProps, TrainingImage, TrainingImageProps
from kiln.contracts.image import (
    image_parameter_name,
    pipeline_name,
)
from kiln.contracts.outputs import ImageOutput
from kiln.contracts.tags import TAG_CLUSTER
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec
from kiln.spec.problems import Problem, SpecError
from kiln.stacks.errors import UnbuildableSpec
from kiln.stacks.network import NetworkStack


def image_root_volume_gib(spec: ClusterSpec) -> int:
    """Return the image's root volume: the smallest of every node that boots it (login and head nodes too), so each
    one's root volume can hold the AMI's snapshot; on HyperPod, which sizes root volumes itself, the smallest group's.
    """
    return spec.smallest_root_volume_gib or min(group.root_volume_gib for group in spec.compute.groups)


def bakes_image(spec: ClusterSpec) -> bool:
    """Return whether SPEC's nodes boot an image kiln bakes."""
    return spec.compute.image.bake


# The tags kiln puts on every AMI besides the manifest's: kiln:cluster and kiln:recipe.
AMI_OWN_TAGS = 2


def _check_ami_tags(spec: ClusterSpec, manifest_tags: int) -> None:
    """Refuse, in one line, spec tags that would take the baked AMI past EC2's tags per resource: Image Builder would
    fail to tag it at the end of a build, tens of minutes after the deploy started."""
    room = MAX_TAGS_PER_RESOURCE - manifest_tags - AMI_OWN_TAGS
    if len(spec.tags) > room:
        message = (
            f"at most {room} tags with compute.image.bake (got {len(spec.tags)}): EC2 allows {MAX_TAGS_PER_RESOURCE} "
            f"per AMI and kiln tags this image with {manifest_tags + AMI_OWN_TAGS} of its own (its pinned versions, "
            "kiln:cluster, kiln:recipe)"
        )
        raise SpecError(spec._source_file or spec.name, [Problem(path=("tags",), message=message)], spec._source_lines)


class ImageStack(cdk.Stack):
    """An EC2 Image Builder pipeline baking the spec's install steps, and its first image."""

    def __init__(self, scope: Construct, construct_id: str, *, spec: ClusterSpec, network: NetworkStack, **kwargs: Any):
        super().__init__(scope, construct_id, description=f"kiln {spec.name}: baked node image", **kwargs)
        if not bakes_image(spec) or spec.compute.image.ami_id is None:
            raise UnbuildableSpec("compute.image: an image stack needs bake: true and ami_id (the image baked on)")
        # Only what install steps read: a change to NCCL settings or users changes no image.
        config = image_config(config_from_spec(spec))
        assets = BootstrapAssets(self, "Bundle", BootstrapAssetsProps(config=config))
        self.parameter_name = image_parameter_name(spec.name)
        manifest = read_manifest(assets.directory)
        _check_ami_tags(spec, len(manifest.tags()))
        self.image = TrainingImage(
            self,
            "Image",
            TrainingImageProps(
                name=pipeline_name(spec.name),
                bundle=assets.node_bootstrap,
                bundle_digest=assets.asset.asset_hash,
                manifest=manifest,
                parent_image=spec.compute.image.ami_id,
                vpc=network.training_vpc.vpc,
                subnet=network.training_vpc.compute_subnet,
                image_parameter_name=self.parameter_name,
                root_volume_gib=image_root_volume_gib(spec),
                retain=spec.storage.bucket.retain,
                tags={TAG_CLUSTER: spec.name, **spec.tags},
            ),
        )
        cdk.CfnOutput(self, ImageOutput.PIPELINE_ARN.value, value=self.image.pipeline.attr_arn)
        cdk.CfnOutput(self, ImageOutput.IMAGE_ID.value, value=self.image.image_id)
        cdk.CfnOutput(self, ImageOutput.IMAGE_PARAMETER.value, value=self.parameter_name)
