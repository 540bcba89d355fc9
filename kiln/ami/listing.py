"""The AMIs kiln baked in one region: their tags, their pinned versions, and which one each cluster boots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.aws.errors import aws_call, error_code, explain, raise_if_no_credentials
from kiln.contracts.image import image_parameter_name
from kiln.contracts.tags import TAG_ARCHITECTURE, TAG_CLUSTER, TAG_OS, TAG_PIN_PREFIX, TAG_RECIPE, TAG_TARGET

if TYPE_CHECKING:
    from kiln.aws.session import EC2Client, Ec2Filter, SSMClient

# Digests are unreadable at full length in a table; JSON keeps them whole.
SHORT_DIGEST = 12
TABLE_HEADER = ("AMI", "CREATED (UTC)", "STATE", "CLUSTER", "TARGET/OS/ARCH", "IN USE", "VERSIONS")


@dataclass(frozen=True)
class BakedImage:
    """One AMI kiln baked, as DescribeImages returns it."""

    image_id: str
    name: str
    created: str
    state: str
    tags: Mapping[str, str] = field(hash=False)

    @classmethod
    def from_described(cls, image: Mapping[str, Any]) -> BakedImage:
        """Return the image from one entry of DescribeImages' Images."""
        return cls(
            image_id=image["ImageId"],
            name=image.get("Name", ""),
            created=image.get("CreationDate", ""),
            state=image.get("State", ""),
            tags={tag["Key"]: tag.get("Value", "") for tag in image.get("Tags", [])},
        )

    @property
    def cluster(self) -> str:
        """Return the cluster the image was baked for ("" when untagged)."""
        return self.tags.get(TAG_CLUSTER, "")

    @property
    def pins(self) -> dict[str, str]:
        """Return the pinned versions from the kiln:pin:* tags, by variable name."""
        return {
            key.removeprefix(TAG_PIN_PREFIX): value
            for key, value in sorted(self.tags.items())
            if key.startswith(TAG_PIN_PREFIX)
        }

    def build(self) -> str:
        """Return target/os/architecture, with - for what the tags do not say."""
        return "/".join(self.tags.get(key) or "-" for key in (TAG_TARGET, TAG_OS, TAG_ARCHITECTURE))


def find_images(ec2: EC2Client, cluster: str | None = None) -> list[BakedImage]:
    """Return this account's AMIs tagged for CLUSTER (any cluster when None), newest first."""
    if cluster is None:
        tag_filter: Ec2Filter = {"Name": "tag-key", "Values": [TAG_CLUSTER]}
    else:
        tag_filter = {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}
    with aws_call("ec2:DescribeImages"):
        pages = ec2.get_paginator("describe_images").paginate(Owners=["self"], Filters=[tag_filter])
        images = [BakedImage.from_described(image) for page in pages for image in page["Images"]]
    # CreationDate is ISO 8601 in UTC, so its text sorts as its time; the id breaks ties for a stable order.
    return sorted(images, key=lambda image: (image.created, image.image_id), reverse=True)


def images_in_use(ssm: SSMClient, clusters: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Return the AMI each cluster's image parameter names, and notes on parameters kiln could not read.

    A missing parameter means the cluster has no baked image in use yet; a refused read is a note, not a failure,
    since the listing is complete without the mark.
    """
    in_use: dict[str, str] = {}
    notes: list[str] = []
    for cluster in sorted(set(clusters)):
        name = image_parameter_name(cluster)
        what = f"ssm:GetParameter {name}"
        with aws_call(what):
            try:
                in_use[cluster] = ssm.get_parameter(Name=name)["Parameter"]["Value"]
            except ClientError as error:
                raise_if_no_credentials(error)
                if error_code(error) != "ParameterNotFound":
                    notes.append(f"{explain(what, error)}; the AMI {cluster} uses is not marked")
    return in_use, notes


def unlisted_in_use(images: Iterable[BakedImage], in_use: Mapping[str, str]) -> list[str]:
    """Return a note for each parameter that names an AMI not among IMAGES (deregistered, or not kiln's)."""
    listed = {image.image_id for image in images}
    return [
        f"{image_parameter_name(cluster)} names {ami}, which is not among these images"
        for cluster, ami in sorted(in_use.items())
        if ami not in listed
    ]


def is_in_use(image: BakedImage, in_use: Mapping[str, str]) -> bool:
    """Return whether IMAGE is the one its cluster's image parameter names."""
    return bool(image.cluster) and in_use.get(image.cluster) == image.image_id


def table_lines(images: Iterable[BakedImage], in_use: Mapping[str, str]) -> list[str]:
    """Return the images as aligned rows under a header, one row per AMI."""
    rows = [TABLE_HEADER]
    for image in images:
        rows.append(
            (
                image.image_id,
                _short_date(image.created),
                image.state,
                image.cluster or "-",
                image.build(),
                "in use" if is_in_use(image, in_use) else "",
                " ".join(f"{name}={_short(name, value)}" for name, value in image.pins.items()) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def as_json(images: Iterable[BakedImage], in_use: Mapping[str, str]) -> list[dict[str, Any]]:
    """Return the images as plain data: every tag, and the pins in full."""
    return [
        {
            "image_id": image.image_id,
            "name": image.name,
            "created": image.created,
            "state": image.state,
            "cluster": image.cluster,
            "target": image.tags.get(TAG_TARGET, ""),
            "os": image.tags.get(TAG_OS, ""),
            "architecture": image.tags.get(TAG_ARCHITECTURE, ""),
            "recipe": image.tags.get(TAG_RECIPE, ""),
            "in_use": is_in_use(image, in_use),
            "versions": image.pins,
            "tags": dict(sorted(image.tags.items())),
        }
        for image in images
    ]


def _short(name: str, value: str) -> str:
    return value[:SHORT_DIGEST] if name.endswith("sha256") else value


def _short_date(created: str) -> str:
    """Return 2025-05-01T12:34:56.000Z as 2025-05-01 12:34."""
    return created[:16].replace("T", " ") if len(created) >= 16 else created or "-"
