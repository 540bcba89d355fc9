"""Every launch template kiln writes maps its root volume to the device the image boots from (platforms.json,
ec2.root_device_names): any other name leaves the root at the image's size and adds a stray, unformatted volume."""

from __future__ import annotations

import copy

import pytest
import yaml
from aws_cdk.assertions import Template

from kiln.catalog.platforms import image_profile, root_device_name
from kiln.spec import load_spec, parse_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.constructs import root_devices
from tests.support.paths import ROOT


def _spec(stem: str, **image: object):
    data = yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())
    if image:
        data = copy.deepcopy(data)
        data["compute"]["image"] = image
    return parse_spec(data, f"{stem}.yaml")


@pytest.fixture(scope="module")
def pcs_sample() -> Template:
    """examples/p5-pcs.yaml: its nodes boot the PCS sample AMI for Slurm 25.11, named only at deploy."""
    stacks = build_cluster(new_app(), load_spec(ROOT / "examples" / "p5-pcs.yaml"), nag=False)
    return Template.from_stack(stacks.compute)


def test_p5_pcs_maps_the_root_volume_to_the_pcs_sample_amis_root_device(pcs_sample) -> None:
    # The PCS sample AMIs for Slurm 25.11 run Amazon Linux 2023, which boots from /dev/xvda.
    assert image_profile("pcs-sample").fact("operating_systems").value == ["al2023"]
    assert root_device_name("al2023") == "/dev/xvda"
    devices = root_devices(pcs_sample)
    # The gpu group and the login group: one mapping each, the root, sized by the spec.
    assert len(devices) == 2
    assert all(names == ["/dev/xvda"] for names in devices.values()), devices
    sizes = {
        resource["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
        for resource in pcs_sample.find_resources("AWS::EC2::LaunchTemplate").values()
    }
    assert 512 in sizes


def test_a_pcs_ami_of_another_os_maps_that_oss_root_device() -> None:
    spec = _spec("p5-pcs", ami_id="ami-0123456789abcdef0", base="own", os="ubuntu2204")
    compute = Template.from_stack(build_cluster(new_app(), spec, nag=False).compute)
    devices = root_devices(compute)
    assert devices and all(names == ["/dev/sda1"] for names in devices.values()), devices


def test_a_baked_image_and_the_nodes_booting_it_name_the_same_root_device() -> None:
    spec = load_spec(ROOT / "examples" / "p5-pcs-baked.yaml")
    stacks = build_cluster(new_app(), spec, nag=False)
    expected = root_device_name(spec.image_os)
    recipe = root_devices(Template.from_stack(stacks.image), "AWS::ImageBuilder::ImageRecipe")
    nodes = root_devices(Template.from_stack(stacks.compute))
    assert list(recipe.values()) == [[expected]]
    assert nodes and all(names == [expected] for names in nodes.values()), nodes
