"""EfaLaunchTemplate: the catalog's EFA layout, IMDSv2, encrypted root, capacity, MIME user data."""

from __future__ import annotations

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from kiln.catalog import instance_type
from kiln.catalog.interfaces import efa_layout
from kiln.catalog.platforms import root_device_name, root_device_names, service_fact
from kiln.constructs import CapacityOption, EfaLaunchTemplate, EfaLaunchTemplateProps
from tests.support.constructs import get_att, logical_id, stack

# (type, interfaces, secondary interface type) as the catalog (EC2 DescribeInstanceTypes) gives them
MATRIX = [
    ("p5.48xlarge", 32, "efa-only"),
    ("p5en.48xlarge", 16, "efa-only"),
    ("p4d.24xlarge", 4, "efa-only"),
    ("trn1.32xlarge", 8, "efa-only"),
    ("g5.48xlarge", 1, None),
    ("g5.12xlarge", 1, None),
]
CAPACITIES = {
    "on-demand": CapacityOption(),
    "spot": CapacityOption(type="spot"),
    "capacity-block": CapacityOption(type="capacity-block", reservation_id="cr-0123456789abcdef0"),
    "reservation": CapacityOption(type="reservation", reservation_id="cr-0abcdef0123456789"),
}


@pytest.fixture(scope="module")
def templates():
    st = stack("LaunchTemplates")
    vpc = ec2.Vpc.from_vpc_attributes(st, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"])
    efa = ec2.SecurityGroup(st, "Efa", vpc=vpc)
    node = ec2.SecurityGroup(st, "Node", vpc=vpc)
    placement = ec2.PlacementGroup.from_placement_group_name(st, "Placement", "pg-kiln")
    built = {}
    for name, _, _ in MATRIX:
        built[name] = EfaLaunchTemplate(
            st,
            name.replace(".", "").replace("-", ""),
            EfaLaunchTemplateProps(
                instance_type=name,
                efa_security_group=efa,
                root_device_name=root_device_name("ubuntu2204"),
                security_groups=[node],
                root_volume_gib=512,
                user_data_parts=["#!/bin/bash\necho one\n", "#!/bin/bash\necho two\n"],
                placement_group=placement,
            ),
        )
    for kind, capacity in CAPACITIES.items():
        built[kind] = EfaLaunchTemplate(
            st,
            f"Capacity{kind.title().replace('-', '')}",
            EfaLaunchTemplateProps(
                instance_type="p5.48xlarge",
                efa_security_group=efa,
                capacity=capacity,
                root_device_name=root_device_name("al2023"),
            ),
        )
    return {"built": built, "efa": efa, "node": node, "template": Template.from_stack(st)}


def _data(templates, key: str) -> dict:
    construct = templates["built"][key].launch_template
    return templates["template"].find_resources("AWS::EC2::LaunchTemplate")[logical_id(construct)]["Properties"][
        "LaunchTemplateData"
    ]


@pytest.mark.parametrize(("name", "count", "secondary"), MATRIX, ids=[m[0] for m in MATRIX])
def test_interfaces_follow_the_catalog(templates, name: str, count: int, secondary: str | None) -> None:
    data = _data(templates, name)
    assert data["InstanceType"] == name
    facts = instance_type(name)
    assert count == facts.efa_interface_count == min(facts.network_cards, facts.max_efa_interfaces)
    interfaces = data["NetworkInterfaces"]
    assert len(interfaces) == count
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(count))
    assert (interfaces[0]["DeviceIndex"], interfaces[0]["InterfaceType"]) == (0, "efa")
    assert all((i["DeviceIndex"], i["InterfaceType"]) == (1, secondary) for i in interfaces[1:])


def test_every_interface_joins_the_efa_group_and_only_the_primary_more(templates) -> None:
    efa = get_att(templates["efa"].node.default_child, "GroupId")
    node = get_att(templates["node"].node.default_child, "GroupId")
    interfaces = _data(templates, "p5.48xlarge")["NetworkInterfaces"]
    assert interfaces[0]["Groups"] == [efa, node]
    assert all(i["Groups"] == [efa] for i in interfaces[1:])
    assert "SecurityGroupIds" not in _data(templates, "p5.48xlarge")


def test_imdsv2_required_and_its_token_stays_on_the_host(templates) -> None:
    # Hop limit 1: a container behind a bridge is one hop more and gets no token (platforms.json, imds_host_hop_limit).
    assert service_fact("ec2", "imds_host_hop_limit").value == 1
    for key in templates["built"]:
        assert _data(templates, key)["MetadataOptions"] == {
            "HttpEndpoint": "enabled",
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 1,
        }


def test_root_volume_is_encrypted_gp3_of_the_requested_size(templates) -> None:
    assert root_device_names() == {"al2023": "/dev/xvda", "ubuntu2204": "/dev/sda1", "ubuntu2404": "/dev/sda1"}
    (ubuntu,) = _data(templates, "p5.48xlarge")["BlockDeviceMappings"]
    assert ubuntu == {
        "DeviceName": "/dev/sda1",
        "Ebs": {"VolumeSize": 512, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True},
    }
    (amazon_linux,) = _data(templates, "spot")["BlockDeviceMappings"]
    assert amazon_linux["DeviceName"] == "/dev/xvda" and amazon_linux["Ebs"]["VolumeSize"] == 200


@pytest.mark.parametrize(
    ("kind", "market", "reservation"),
    [
        ("on-demand", None, None),
        ("spot", "spot", None),
        ("capacity-block", "capacity-block", "cr-0123456789abcdef0"),
        ("reservation", None, "cr-0abcdef0123456789"),
    ],
)
def test_capacity_options(templates, kind: str, market: str | None, reservation: str | None) -> None:
    data = _data(templates, kind)
    assert data.get("InstanceMarketOptions", {}).get("MarketType") == market
    target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {})
    assert target.get("CapacityReservationId") == reservation


def test_user_data_is_mime_multipart_with_each_script_a_part(templates) -> None:
    template = templates["built"]["p5.48xlarge"]
    rendered = template.launch_template.stack.resolve(template.user_data.render())
    text = rendered if isinstance(rendered, str) else "".join(p for p in rendered["Fn::Join"][1] if isinstance(p, str))
    assert 'Content-Type: multipart/mixed; boundary="' in text
    assert text.count('Content-Type: text/x-shellscript; charset="utf-8"') == 2
    assert "echo one" in text and "echo two" in text
    assert "Fn::Base64" in _data(templates, "p5.48xlarge")["UserData"]


def test_placement_group(templates) -> None:
    assert _data(templates, "p5.48xlarge")["Placement"] == {"GroupName": "pg-kiln"}
    assert "Placement" not in _data(templates, "spot")


def test_non_efa_types_get_one_plain_interface() -> None:
    (only,) = efa_layout("m5.8xlarge")
    assert (only.network_card_index, only.device_index, only.interface_type) == (0, 0, None)


def test_a_type_whose_first_card_is_ena_only_puts_every_efa_on_the_other_cards() -> None:
    facts = instance_type("p6-b300.48xlarge")
    assert 0 in facts.ena_only_cards and facts.network_cards == 17
    layout = efa_layout("p6-b300.48xlarge")
    assert (layout[0].network_card_index, layout[0].device_index, layout[0].interface_type) == (0, 0, None)
    efa = [i for i in layout if i.interface_type]
    assert [i.network_card_index for i in efa] == list(range(1, 17))
    assert len(efa) == facts.max_efa_interfaces == 16


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"type": "capacity-block"},
            "CapacityOption.reservation_id: got None; allowed: cr- and 17 hex digits for capacity-block",
        ),
        ({"type": "reservation", "reservation_id": "cr-1"}, "CapacityOption.reservation_id: got 'cr-1'"),
        (
            {"type": "spot", "reservation_id": "cr-0123456789abcdef0"},
            "CapacityOption.reservation_id: got 'cr-0123456789abcdef0'; allowed: unset for spot",
        ),
        (
            {"type": "dedicated"},
            "CapacityOption.type: got 'dedicated'; allowed: on-demand, spot, capacity-block, reservation",
        ),
    ],
)
def test_bad_capacity_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CapacityOption(**kwargs)


def test_unknown_instance_type_is_refused(templates) -> None:
    with pytest.raises(KeyError, match="p5.48xlarg"):
        EfaLaunchTemplateProps(
            instance_type="p5.48xlarg", efa_security_group=templates["efa"], root_device_name="/dev/xvda"
        )


@pytest.mark.parametrize("device", ["/dev/sdb", "xvda", "/dev/nvme0n1"])
def test_a_root_device_no_image_boots_from_is_refused(templates, device: str) -> None:
    # Any other name than the image's root device adds a second volume and leaves the root at the image's size.
    with pytest.raises(ValueError, match=f"root_device_name: got '{device}'; allowed: /dev/sda1, /dev/xvda"):
        EfaLaunchTemplateProps(
            instance_type="p5.48xlarge", efa_security_group=templates["efa"], root_device_name=device
        )


def test_more_tags_than_ec2_puts_on_a_resource_are_refused(templates) -> None:
    tags = {f"k{i}": "v" for i in range(51)}
    with pytest.raises(ValueError, match="tags: got 51; allowed: at most 50"):
        EfaLaunchTemplateProps(
            instance_type="p5.48xlarge", efa_security_group=templates["efa"], root_device_name="/dev/xvda", tags=tags
        )
