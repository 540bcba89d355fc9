"""The image check: compute.image.ami_id exists, is available, runs on every node's architecture and fits its root.

moto makes images from instances (architecture from the source image, a 15 GiB root snapshot) and can disable and
deregister them; a pending image, a larger root snapshot and a deprecation time come from a Stubber.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kiln.preflight.checks import image
from kiln.preflight.run import run_check
from tests.support.preflight import client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

# Amazon Linux 2022 images in moto's bundled catalog (moto/ec2/resources/amis.json), one per architecture.
MOTO_IMAGES = {"x86_64": "ami-0b301ce3ce347599c", "arm64": "ami-0e9271c829888680e"}
STUB_AMI = "ami-0123456789abcdef0"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image, "now", lambda: NOW)


def _own_image(aws, architecture: str = "x86_64") -> str:
    """Make an image of ARCHITECTURE in moto the way users do, from an instance; return its id."""
    source = MOTO_IMAGES[architecture]
    assert aws.ec2.describe_images(ImageIds=[source])["Images"][0]["Architecture"] == architecture
    instance = aws.ec2.run_instances(ImageId=source, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    return aws.ec2.create_image(InstanceId=instance, Name="kiln-node")["ImageId"]


def _plan(ami_id: str, **more: object):
    # moto's images and the stubbed one boot from /dev/sda1, as Ubuntu's do (platforms.json, ec2.root_device_names).
    return make_plan(compute={"image": {"ami_id": ami_id, "base": "own", "os": "ubuntu2204"}, **more})


def _described(**fields: object) -> dict:
    """Return EC2's description of STUB_AMI: an available x86_64 image with a 40 GiB root, overridden by FIELDS."""
    described = {
        "ImageId": STUB_AMI,
        "Name": "kiln-node",
        "State": "available",
        "Architecture": "x86_64",
        "RootDeviceType": "ebs",
        "RootDeviceName": "/dev/sda1",
        "BlockDeviceMappings": [
            {"DeviceName": "/dev/sdb", "Ebs": {"VolumeSize": 900}},
            {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 40}},
        ],
    }
    described.update(fields)
    return described


def _check_stubbed(aws, plan, described: dict):
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_response("describe_images", {"Images": [described]}, {"ImageIds": [STUB_AMI]})
    with stubber:
        return image.check(plan, clients)


def test_no_ami_is_one_ok_line_and_no_call(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    with stubber:  # no response queued: any call would raise
        (finding,) = image.check(make_plan(), clients)
    assert finding.line() == "OK        image: compute.image.ami_id: unset: nodes boot the pcs default image"


def test_an_available_image_every_node_runs_is_one_ok_line(aws) -> None:
    ami = _own_image(aws)
    (finding,) = image.check(_plan(ami), aws)
    assert finding.line() == (
        f"OK        image: compute.image.ami_id {ami}: kiln-node is available, x86_64, "
        "root snapshot 15 GiB ≤ root_volume_gib 200"
    )


def test_an_image_of_another_architecture_fails_naming_every_node(aws) -> None:
    ami = _own_image(aws, "arm64")
    (finding,) = image.check(_plan(ami), aws)
    assert finding.status == "fail"
    assert finding.message == "is arm64, but m5.2xlarge (login nodes), p5.48xlarge (group gpu) run x86_64 only"
    assert finding.remedy == "set compute.image.ami_id to an x86_64 AMI"


def test_an_arm64_image_for_arm64_nodes_is_ok(aws) -> None:
    ami = _own_image(aws, "arm64")
    graviton = {"instance_type": "c7g.16xlarge"}
    arm = {"login_nodes": graviton, "groups": [{"name": "arm", **graviton}]}
    (finding,) = image.check(_plan(ami, **arm), aws)
    assert (finding.status, finding.message) == (
        "ok",
        "kiln-node is available, arm64, root snapshot 15 GiB ≤ root_volume_gib 200",
    )


def test_a_disabled_image_fails(aws) -> None:
    ami = _own_image(aws)
    aws.ec2.disable_image(ImageId=ami)
    (finding,) = image.check(_plan(ami), aws)
    assert finding.status == "fail"
    assert finding.message == "is disabled: EC2 cannot launch it"


@pytest.mark.parametrize("how", ["deregistered", "never made"])
def test_an_image_ec2_does_not_show_fails(aws, how: str) -> None:
    # EC2 answers a deregistered image with an empty list, an unknown one with InvalidAMIID.NotFound.
    ami = _own_image(aws) if how == "deregistered" else STUB_AMI
    if how == "deregistered":
        aws.ec2.deregister_image(ImageId=ami)
    (finding,) = image.check(_plan(ami), aws)
    assert finding.status == "fail"
    assert finding.message == "does not exist in us-east-1 or is not shared with this account"


def test_a_pending_image_warns(aws) -> None:
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI), _described(State="pending"))
    assert (finding.status, finding.message) == ("warn", "is pending: EC2 is still creating it")


def test_a_failed_image_fails_with_ec2s_reason(aws) -> None:
    described = _described(State="failed", StateReason={"Code": "Client.Error", "Message": "snapshot missing"})
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI), described)
    assert (finding.status, finding.message) == ("fail", "is failed (snapshot missing): EC2 cannot launch it")


def test_a_root_snapshot_larger_than_the_root_volume_fails(aws) -> None:
    groups = [{"name": "gpu", "instance_type": "p5.48xlarge", "root_volume_gib": 100}]
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI, groups=groups), _described())
    assert finding.status == "ok"  # the 900 GiB data volume is not the root
    big_root = _described(BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 250}}])
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI, groups=groups), big_root)
    assert finding.status == "fail"
    assert finding.message.startswith("has a 250 GiB root snapshot; the smallest root_volume_gib is 100 GiB")
    assert finding.remedy == "raise root_volume_gib to at least 250 in every group below it"


def test_hyperpod_sizes_its_own_root_volumes(aws) -> None:
    hyperpod = {"backend": "hyperpod", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 1}]}
    big_root = _described(BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 500}}])
    (finding,) = _check_stubbed(aws, make_plan(compute={**hyperpod, "image": {"ami_id": STUB_AMI}}), big_root)
    assert (finding.status, finding.message) == ("ok", "kiln-node is available, x86_64")


def test_a_deprecated_image_warns_and_one_deprecated_later_is_ok(aws) -> None:
    past = (NOW - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI), _described(DeprecationTime=past))
    assert finding.status == "warn"
    assert finding.message.startswith("was deprecated 2025-05-30 12:00 UTC")
    future = (NOW + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    (finding,) = _check_stubbed(aws, _plan(STUB_AMI), _described(DeprecationTime=future))
    assert finding.status == "ok"


def test_an_instance_store_root_has_no_snapshot_size() -> None:
    instance_store = _described(RootDeviceType="instance-store", BlockDeviceMappings=[{"DeviceName": "/dev/sda1"}])
    assert image.root_gib(instance_store) is None
    assert image.root_gib(_described()) == 40


@pytest.mark.parametrize(
    ("code", "remedy"),
    [
        ("AccessDenied", "allow ec2:DescribeImages (read-only) for the identity running kiln, or pass --skip image"),
        ("ThrottlingException", "run preflight again in a minute"),
    ],
)
def test_a_refused_call_is_one_unchecked_line_naming_its_action(aws, code: str, remedy: str) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_images", **client_error(code))
    with stubber:
        (finding,) = run_check(image.CHECK, _plan(STUB_AMI), clients)
    assert (finding.check, finding.status) == ("image", "unchecked")
    assert "ec2:DescribeImages" in finding.message and code in finding.message
    assert finding.remedy == remedy
