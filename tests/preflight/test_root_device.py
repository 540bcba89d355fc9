"""The image check refuses compute.image.ami_id when it boots from another device than the one kiln's launch templates
map the root volume to (the spec's OS's, platforms.json ec2.root_device_names), in one line.

moto's images boot from /dev/sda1 (as Ubuntu's do); an Amazon Linux one comes from a Stubber.
"""

from __future__ import annotations

import pytest

from kiln.catalog.platforms import root_device_name
from kiln.preflight.checks import image
from kiln.preflight.root_device import mismatch
from tests.support.preflight import make_plan, stubbed

# The slow tier (`make test-slow`): moto's account setup puts this module over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

STUB_AMI = "ami-0123456789abcdef0"
# An Amazon Linux 2022 image in moto's bundled catalog (moto/ec2/resources/amis.json).
MOTO_IMAGE = "ami-0b301ce3ce347599c"


def _moto_image(aws) -> str:
    """Make an image in moto the way users do, from an instance; return its id (it boots from /dev/sda1)."""
    instance = aws.ec2.run_instances(ImageId=MOTO_IMAGE, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    made = aws.ec2.create_image(InstanceId=instance, Name="kiln-node")["ImageId"]
    assert aws.ec2.describe_images(ImageIds=[made])["Images"][0]["RootDeviceName"] == "/dev/sda1"
    return made


def _amazon_linux(aws, plan):
    """Check PLAN against an available Amazon Linux image (root /dev/xvda) served by a Stubber."""
    clients, stubber = stubbed(aws, "ec2")
    described = {
        "ImageId": STUB_AMI,
        "Name": "al2023-node",
        "State": "available",
        "Architecture": "x86_64",
        "RootDeviceType": "ebs",
        "RootDeviceName": "/dev/xvda",
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 30}}],
    }
    stubber.add_response("describe_images", {"Images": [described]}, {"ImageIds": [STUB_AMI]})
    with stubber:
        return image.check(plan, clients)


def test_pcs_on_al2023_refuses_an_ami_that_boots_from_sda1_in_one_line(aws) -> None:
    ami = _moto_image(aws)
    plan = make_plan(compute={"image": {"ami_id": ami, "base": "own"}})
    assert (plan.image_os, plan.root_device_name) == ("al2023", root_device_name("al2023"))
    (finding,) = image.check(plan, aws)
    assert finding.line() == (
        f"FAIL      image: compute.image.ami_id {ami}: boots from /dev/sda1, but kiln maps the root volume of al2023 "
        "images to /dev/xvda: nodes would keep the image's root size and get a second, unformatted /dev/xvda; set "
        "compute.image.os to the AMI's OS (ubuntu2204 or ubuntu2404), or compute.image.ami_id to an image of al2023, "
        "which boots from /dev/xvda"
    )


def test_pcs_on_ubuntu_refuses_an_amazon_linux_ami(aws) -> None:
    plan = make_plan(compute={"image": {"ami_id": STUB_AMI, "base": "own", "os": "ubuntu2204"}})
    (finding,) = _amazon_linux(aws, plan)
    assert finding.status == "fail"
    assert "boots from /dev/xvda, but kiln maps the root volume of ubuntu2204 images to /dev/sda1" in finding.message
    assert finding.remedy.startswith("set compute.image.os to the AMI's OS (al2023)")


def test_an_ami_that_boots_from_the_mapped_device_passes(aws) -> None:
    ami = _moto_image(aws)
    (finding,) = image.check(make_plan(compute={"image": {"ami_id": ami, "base": "own", "os": "ubuntu2404"}}), aws)
    assert finding.status == "ok"
    (finding,) = _amazon_linux(aws, make_plan(compute={"image": {"ami_id": STUB_AMI, "base": "own"}}))
    assert finding.status == "ok"


def test_a_device_no_os_kiln_knows_boots_from_names_the_image_to_use() -> None:
    plan = make_plan(compute={"image": {"ami_id": STUB_AMI, "base": "own"}})
    status, message, remedy = mismatch(plan, {"RootDeviceName": "/dev/nvme0n1"})
    assert status == "fail" and message.startswith("boots from /dev/nvme0n1")
    assert remedy == "set compute.image.ami_id to an image of al2023, which boots from /dev/xvda"


def test_backends_that_size_the_root_themselves_map_no_device(aws) -> None:
    # ParallelCluster (LocalStorage/RootVolume) and HyperPod name no device: an AMI of either root passes.
    plan = make_plan(
        compute={
            "backend": "parallelcluster",
            "image": {"ami_id": STUB_AMI, "os": "ubuntu2204"},
            "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}],
        }
    )
    assert plan.root_device_name is None
    (finding,) = _amazon_linux(aws, plan)
    assert finding.status == "ok"
