"""kiln.ami.listing against moto: kiln's AMIs by tag, newest first, with the one each cluster's parameter names."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest

from kiln.ami.listing import as_json, find_images, images_in_use, table_lines, unlisted_in_use
from kiln.contracts.image import image_parameter_name
from tests.support.ami import CLUSTER, WHEEL_SHA256, baked_tags, register_ami, stubbed

MAY = datetime(2025, 5, 1, 12, 0, tzinfo=timezone.utc)
JUNE = datetime(2025, 6, 1, 8, 30, tzinfo=timezone.utc)
JULY = datetime(2025, 7, 1, 18, 45, tzinfo=timezone.utc)


def put_image_parameter(session: boto3.Session, cluster: str, image_id: str) -> None:
    session.client("ssm").put_parameter(Name=image_parameter_name(cluster), Value=image_id, Type="String")


def test_images_come_newest_first_and_only_for_the_cluster_asked(aws: boto3.Session) -> None:
    may = register_ami(aws, baked_tags(), created=MAY)
    july = register_ami(aws, baked_tags(), created=JULY)
    june = register_ami(aws, baked_tags(), created=JUNE)
    other = register_ami(aws, baked_tags("other"), created=JULY)
    register_ami(aws, {"Name": "not kiln's"}, created=JULY)
    ec2 = aws.client("ec2")
    assert [image.image_id for image in find_images(ec2, CLUSTER)] == [july, june, may]
    # Every cluster's: any AMI with the cluster tag; same time, the id decides.
    everything = [image.image_id for image in find_images(ec2)]
    assert everything[2:] == [june, may] and set(everything[:2]) == {july, other}
    assert find_images(ec2, "nobody") == []


def test_only_this_accounts_images_are_listed(aws: boto3.Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "true")
    ec2 = aws.client("ec2")
    public = ec2.describe_images(Owners=["amazon"], MaxResults=5)["Images"][0]["ImageId"]
    # Someone else's AMI with kiln's tag (a tag on a public AMI is this account's own view of it).
    ec2.create_tags(Resources=[public], Tags=[{"Key": "kiln:cluster", "Value": CLUSTER}])
    mine = register_ami(aws, baked_tags())
    assert [image.image_id for image in find_images(ec2, CLUSTER)] == [mine]


def test_the_table_marks_the_image_in_use_and_shortens_digests(aws: boto3.Session) -> None:
    old = register_ami(aws, baked_tags(), created=MAY)
    new = register_ami(aws, baked_tags(pins={"KILN_EFA_INSTALLER_VERSION": "1.42.0"}), created=JUNE)
    put_image_parameter(aws, CLUSTER, old)
    images = find_images(aws.client("ec2"), CLUSTER)
    in_use, notes = images_in_use(aws.client("ssm"), [CLUSTER])
    assert in_use == {CLUSTER: old} and notes == []
    header, first, second = table_lines(images, in_use)
    assert header.split() == ["AMI", "CREATED", "(UTC)", "STATE", "CLUSTER", "TARGET/OS/ARCH", "IN", "USE", "VERSIONS"]
    assert first.split() == [new, "2025-06-01", "08:30", "available", CLUSTER, "pcs/ubuntu2204/x86_64",
                             "efa_installer_version=1.42.0"]  # fmt: skip
    assert second.split() == [
        old,
        "2025-05-01",
        "12:00",
        "available",
        CLUSTER,
        "pcs/ubuntu2204/x86_64",
        "in",
        "use",
        "efa_installer_version=1.41.0",
        f"launcher_wheel_sha256={WHEEL_SHA256[:12]}",
        "nvidia_driver_version=570.172.08",
    ]
    # Columns line up: every row's versions start where the header's do.
    assert first.index("efa_installer") == second.index("efa_installer") == header.index("VERSIONS")


def test_json_keeps_every_tag_and_full_digests(aws: boto3.Session) -> None:
    image_id = register_ami(aws, baked_tags(Team="ml-platform"), created=MAY)
    put_image_parameter(aws, CLUSTER, image_id)
    images = find_images(aws.client("ec2"), CLUSTER)
    in_use, _ = images_in_use(aws.client("ssm"), [CLUSTER])
    [entry] = as_json(images, in_use)
    assert entry["image_id"] == image_id and entry["in_use"] is True
    assert entry["created"] == "2025-05-01T12:00:00.000Z" and entry["state"] == "available"
    assert (entry["cluster"], entry["target"], entry["os"], entry["architecture"]) == (
        CLUSTER,
        "pcs",
        "ubuntu2204",
        "x86_64",
    )
    assert entry["versions"] == {
        "efa_installer_version": "1.41.0",
        "launcher_wheel_sha256": WHEEL_SHA256,
        "nvidia_driver_version": "570.172.08",
    }
    assert entry["tags"] == baked_tags(Team="ml-platform")
    assert entry["recipe"] == baked_tags()["kiln:recipe"]


def test_no_parameter_means_no_mark_and_a_parameter_naming_another_ami_is_a_note(aws: boto3.Session) -> None:
    image_id = register_ami(aws, baked_tags())
    images = find_images(aws.client("ec2"), CLUSTER)
    assert images_in_use(aws.client("ssm"), [CLUSTER]) == ({}, [])
    assert "in use" not in table_lines(images, {})[1]
    put_image_parameter(aws, CLUSTER, "ami-0aaaaaaaaaaaaaaaa")
    in_use, _ = images_in_use(aws.client("ssm"), [CLUSTER])
    assert unlisted_in_use(images, in_use) == [
        f"/kiln/{CLUSTER}/image-id names ami-0aaaaaaaaaaaaaaaa, which is not among these images"
    ]
    assert "in use" not in table_lines(images, in_use)[1] and image_id in table_lines(images, in_use)[1]


def test_a_parameter_kiln_may_not_read_is_a_note_not_a_failure() -> None:
    ssm, stub = stubbed("ssm")
    stub.add_client_error("get_parameter", "AccessDeniedException", "not authorized to perform ssm:GetParameter", 400)
    stub.add_response("get_parameter", {"Parameter": {"Name": "/kiln/b/image-id", "Value": "ami-0bbbbbbbbbbbbbbbb"}})
    with stub:
        in_use, notes = images_in_use(ssm, ["b", "a", "b"])
    assert in_use == {"b": "ami-0bbbbbbbbbbbbbbbb"}
    assert notes == [
        "ssm:GetParameter /kiln/a/image-id was denied (AccessDeniedException): allow it for the AWS identity "
        "running kiln; AWS said: not authorized to perform ssm:GetParameter; the AMI a uses is not marked"
    ]


def test_images_without_kiln_tags_show_dashes(aws: boto3.Session) -> None:
    register_ami(aws, {"kiln:cluster": CLUSTER})
    row = table_lines(find_images(aws.client("ec2"), CLUSTER), {})[1].split()
    assert row[-2:] == ["-/-/-", "-"]
