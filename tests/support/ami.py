"""Builders for the `kiln ami` tests: baked AMIs in moto, a stubbed Image Builder and its states."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from moto.backends import get_backend

from kiln.contracts.image import (
    image_parameter_name,
    image_stack_name,
    pin_tag,
)
from kiln.contracts.outputs import ImageOutput
from kiln.contracts.tags import TAG_ARCHITECTURE, TAG_CLUSTER, TAG_OS, TAG_RECIPE, TAG_TARGET
from tests.support.ci import make_stack
from tests.support.fake_aws import ACCOUNT, REGION
from tests.support.specs import MINIMAL_SPEC

CLUSTER = MINIMAL_SPEC["name"]


PARENT_AMI = "ami-0123456789abcdef0"


PIPELINE_ARN = f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image-pipeline/{CLUSTER}-image"


BUILD_ARN = f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image/{CLUSTER}-image/1.0.0/3"


RECIPE = f"{CLUSTER}-image"


WHEEL_SHA256 = "0123456789abcdef" * 4


PINS = {
    "KILN_EFA_INSTALLER_VERSION": "1.41.0",
    "KILN_NVIDIA_DRIVER_VERSION": "570.172.08",
    "KILN_LAUNCHER_WHEEL_SHA256": WHEEL_SHA256,
}


_AMI_NUMBERS = itertools.count(1)


def write_spec(directory: Path, *, bake: bool = True, region: str | None = REGION, **changes: Any) -> Path:
    """Write the minimal spec, baking on PARENT_AMI unless BAKE is false, to DIRECTORY/cluster.yaml."""
    data = copy.deepcopy(MINIMAL_SPEC)
    if bake:
        data["compute"]["image"] = {"ami_id": PARENT_AMI, "bake": True}
    if region is None:
        data.pop("region")
        data.pop("availability_zone")
    else:
        data.update(region=region, availability_zone=f"{region}a")
    data.update(changes)
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def deploy_image_stack(session: boto3.Session, cluster: str = CLUSTER, **outputs: str) -> None:
    """Create CLUSTER's image stack in moto with the outputs the real one has (OUTPUTS replace them)."""
    values = {
        ImageOutput.PIPELINE_ARN.value: PIPELINE_ARN,
        ImageOutput.IMAGE_ID.value: PARENT_AMI,
        ImageOutput.IMAGE_PARAMETER.value: image_parameter_name(cluster),
        **outputs,
    }
    make_stack(session, image_stack_name(cluster), [{"Key": TAG_CLUSTER, "Value": cluster}], outputs=values)


def baked_tags(cluster: str = CLUSTER, pins: Mapping[str, str] = PINS, **extra: str) -> dict[str, str]:
    """Return the tags the image stack's distribution puts on every AMI it bakes for CLUSTER."""
    tags = {
        TAG_CLUSTER: cluster,
        TAG_TARGET: "pcs",
        TAG_OS: "ubuntu2204",
        TAG_ARCHITECTURE: "x86_64",
        TAG_RECIPE: "5f1c0de2a9b84e17",  # the first 16 hex digits of the recipe digest
    }
    tags.update({pin_tag(variable): value for variable, value in pins.items()})
    return tags | extra


def register_ami(session: boto3.Session, tags: Mapping[str, str], *, created: datetime | None = None) -> str:
    """Register an AMI in moto with TAGS, created at CREATED (UTC); return its id."""
    ec2 = session.client("ec2")
    image_id = ec2.register_image(
        Name=f"{tags.get(TAG_CLUSTER, 'other')}-image {next(_AMI_NUMBERS)}",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}],
        Architecture="x86_64",
    )["ImageId"]
    if tags:
        ec2.create_tags(Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    if created is not None:
        # EC2 sets CreationDate itself and moto has no API to choose it; its backend holds it as a datetime.
        get_backend("ec2")[ACCOUNT][session.region_name].amis[image_id].creation_date = created
    return image_id


def stubbed(service: str) -> tuple[Any, Stubber]:
    """Return a client for SERVICE in REGION and a Stubber on it (activate it after adding responses)."""
    client = boto3.client(service, region_name=REGION)
    return client, Stubber(client)


def image_state(
    status: str,
    *,
    reason: str = "",
    amis: tuple[str, ...] = (),
    s3_logs: tuple[str, str] | None = None,
    log_group: str | None = None,
) -> dict[str, Any]:
    """Return a GetImage response for BUILD_ARN in STATUS, as Image Builder shapes it."""
    image: dict[str, Any] = {
        "arn": BUILD_ARN,
        "name": RECIPE,
        "version": "1.0.0/3",
        "state": {"status": status, **({"reason": reason} if reason else {})},
        "imageRecipe": {"name": RECIPE},
        "infrastructureConfiguration": {"name": f"{CLUSTER}-image"},
        "outputResources": {
            "amis": [{"region": REGION, "image": ami, "name": f"{RECIPE} 3", "accountId": ACCOUNT} for ami in amis]
        },
    }
    if s3_logs:
        bucket, prefix = s3_logs
        image["infrastructureConfiguration"]["logging"] = {"s3Logs": {"s3BucketName": bucket, "s3KeyPrefix": prefix}}
    if log_group:
        image["loggingConfiguration"] = {"logGroupName": log_group}
    return {"image": image}


def expect_states(stub: Stubber, *states: dict[str, Any]) -> None:
    """Queue one GetImage response of BUILD_ARN per state, in order."""
    for state in states:
        stub.add_response("get_image", state, {"imageBuildVersionArn": BUILD_ARN})


def use_clients(monkeypatch: pytest.MonkeyPatch, **clients: Any) -> None:
    """Make every boto3 session the CLI opens hand out CLIENTS by service name (the rest stay real: moto)."""

    class Session(boto3.Session):
        def client(self, service: str, *args: Any, **kwargs: Any) -> Any:
            return clients.get(service) or super().client(service, *args, **kwargs)

    monkeypatch.setattr(boto3, "Session", Session)
