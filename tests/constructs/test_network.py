"""TrainingVpc, EfaSecurityGroup and ClusterPlacementGroup."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from kiln.constructs import (
    ClusterPlacementGroup,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    ExistingNetwork,
    TrainingVpc,
    TrainingVpcProps,
    acknowledgements,
)
from tests.support.constructs import get_att, logical_id, stack


@pytest.fixture(scope="module")
def new_vpc():
    st = stack("NewVpc")
    props = TrainingVpcProps(cidr="10.20.0.0/16", availability_zone="us-east-1c", second_availability_zone="us-east-1a")
    vpc = TrainingVpc(st, "Vpc", props)
    efa = EfaSecurityGroup(st, "Efa", EfaSecurityGroupProps(vpc=vpc.vpc))
    placement = ClusterPlacementGroup(st, "Placement")
    return vpc, efa, placement, Template.from_stack(st)


def test_vpc_has_public_and_private_subnets_in_two_azs_compute_first(new_vpc) -> None:
    vpc, _, _, template = new_vpc
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.20.0.0/16"})
    template.resource_count_is("AWS::EC2::Subnet", 4)
    assert vpc.availability_zone == "us-east-1c"
    assert {s.availability_zone for s in vpc.vpc.private_subnets} == {"us-east-1c", "us-east-1a"}
    subnet = vpc.compute_subnet.node.default_child
    template.has_resource_properties(
        "AWS::EC2::Subnet",
        {"AvailabilityZone": "us-east-1c", "CidrBlock": subnet.cidr_block, "MapPublicIpOnLaunch": False},
    )
    assert subnet.cidr_block.endswith("/18")


def test_one_nat_gateway_and_an_s3_gateway_endpoint(new_vpc) -> None:
    _, _, _, template = new_vpc
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Gateway",
            "ServiceName": Match.object_like({"Fn::Join": Match.array_with([Match.array_with([".s3"])])}),
        },
    )


def test_flow_logs_capture_all_traffic_into_a_retained_log_group(new_vpc) -> None:
    vpc, _, _, template = new_vpc
    template.has_resource_properties(
        "AWS::EC2::FlowLog",
        {"TrafficType": "ALL", "ResourceType": "VPC", "ResourceId": {"Ref": logical_id(vpc.vpc.node.default_child)}},
    )
    template.has_resource("AWS::Logs::LogGroup", {"Properties": {"RetentionInDays": 365}, "DeletionPolicy": "Retain"})


def _key_statements(template: Template, key) -> list[dict]:
    return template.find_resources("AWS::KMS::Key")[logical_id(key.node.default_child)]["Properties"]["KeyPolicy"][
        "Statement"
    ]


def test_flow_logs_are_encrypted_with_their_own_rotating_key_kept_as_long_as_they_are(new_vpc) -> None:
    vpc, _, _, template = new_vpc
    key = vpc.flow_log_key.node.default_child
    (group,) = template.find_resources("AWS::Logs::LogGroup").values()
    assert group["Properties"]["KmsKeyId"] == get_att(key, "Arn")
    keys = template.find_resources("AWS::KMS::Key")
    assert list(keys) == [logical_id(key)]
    assert keys[logical_id(key)]["Properties"]["EnableKeyRotation"] is True
    assert (keys[logical_id(key)]["DeletionPolicy"], group["DeletionPolicy"]) == ("Retain", "Retain")
    (logs_use,) = [s for s in _key_statements(template, vpc.flow_log_key) if "Service" in s["Principal"]]
    assert logs_use["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert sorted(logs_use["Action"]) == sorted(acknowledgements.LOGS_KEY_USE.actions)
    # Only CloudWatch Logs of this account and region, for log groups, may use the key.
    assert logs_use["Condition"] == {
        "ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:us-east-1:111111111111:log-group:*"}
    }


def test_short_lived_flow_logs_take_their_key_with_them() -> None:
    st = stack("ShortLivedVpc")
    vpc = TrainingVpc(st, "Vpc", TrainingVpcProps(availability_zone="us-east-1a", retain_flow_logs=False))
    template = Template.from_stack(st)
    key = template.find_resources("AWS::KMS::Key")[logical_id(vpc.flow_log_key.node.default_child)]
    (group,) = template.find_resources("AWS::Logs::LogGroup").values()
    assert (key["DeletionPolicy"], group["DeletionPolicy"]) == ("Delete", "Delete")


def test_default_security_group_is_restricted(new_vpc) -> None:
    _, _, _, template = new_vpc
    template.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


def test_efa_group_allows_all_traffic_to_and_from_itself_only(new_vpc) -> None:
    _, efa, _, template = new_vpc
    group = efa.security_group.node.default_child
    self_ref = get_att(group, "GroupId")
    ingress = template.find_resources("AWS::EC2::SecurityGroupIngress")
    rules = [r["Properties"] for r in ingress.values() if r["Properties"]["GroupId"] == self_ref]
    assert rules == [
        {"IpProtocol": "-1", "GroupId": self_ref, "SourceSecurityGroupId": self_ref, "Description": "EFA peers"}
    ]
    egress = template.find_resources("AWS::EC2::SecurityGroupEgress")
    out = [r["Properties"] for r in egress.values() if r["Properties"]["GroupId"] == self_ref]
    assert out == [
        {"IpProtocol": "-1", "GroupId": self_ref, "DestinationSecurityGroupId": self_ref, "Description": "EFA peers"}
    ]
    props = template.find_resources("AWS::EC2::SecurityGroup")[logical_id(group)]["Properties"]
    # Inline egress must exist, or EC2 adds its default allow-all egress: one rule that matches nothing.
    assert "SecurityGroupIngress" not in props
    assert props["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]


def test_no_ingress_from_the_internet_anywhere(new_vpc) -> None:
    _, _, _, template = new_vpc
    inline = [
        rule
        for sg in template.find_resources("AWS::EC2::SecurityGroup").values()
        for rule in sg["Properties"].get("SecurityGroupIngress", [])
    ]
    standalone = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert all(rule.get("CidrIp") != "0.0.0.0/0" and rule.get("CidrIpv6") != "::/0" for rule in inline + standalone)


def test_cluster_placement_group(new_vpc) -> None:
    _, _, placement, template = new_vpc
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})
    assert logical_id(placement.placement_group.node.default_child) in template.find_resources(
        "AWS::EC2::PlacementGroup"
    )


def test_imported_vpc_creates_nothing_and_uses_the_given_subnet() -> None:
    st = stack("Imported")
    existing = ExistingNetwork(
        vpc_id="vpc-0123456789abcdef0", private_subnet_id="subnet-0123456789abcdef0", availability_zone="us-east-1d"
    )
    vpc = TrainingVpc(st, "Vpc", TrainingVpcProps(existing=existing))
    EfaSecurityGroup(st, "Efa", EfaSecurityGroupProps(vpc=vpc.vpc))
    template = Template.from_stack(st)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::Subnet", 0)
    template.resource_count_is("AWS::KMS::Key", 0)
    assert vpc.flow_log_key is None
    template.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": "vpc-0123456789abcdef0"})
    assert (vpc.compute_subnet.subnet_id, vpc.availability_zone) == ("subnet-0123456789abcdef0", "us-east-1d")


def test_env_agnostic_vpc_uses_the_regions_first_az() -> None:
    st = stack("Agnostic", env=None)
    vpc = TrainingVpc(st, "Vpc")
    template = Template.from_stack(st)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"})
    subnet = template.find_resources("AWS::EC2::Subnet")[logical_id(vpc.compute_subnet.node.default_child)]
    assert subnet["Properties"]["AvailabilityZone"] == {"Fn::Select": [0, {"Fn::GetAZs": ""}]}


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "10.0.0.0/24", "not-a-cidr"])
def test_bad_cidr_is_refused_with_what_is_allowed(cidr: str) -> None:
    with pytest.raises(ValueError, match=r"cidr: got .* allowed: an IPv4 CIDR from /16 to /22"):
        TrainingVpcProps(cidr=cidr)


def test_props_are_frozen_and_keyword_only() -> None:
    props = TrainingVpcProps()
    with pytest.raises(AttributeError):
        props.cidr = "10.1.0.0/16"
    with pytest.raises(TypeError):
        TrainingVpcProps("10.1.0.0/16")


def test_connections_expose_the_efa_group(new_vpc) -> None:
    _, efa, _, _ = new_vpc
    assert isinstance(efa.connections, ec2.Connections)
    assert efa.connections.security_groups[0] is efa.security_group


@pytest.fixture(scope="module")
def one_az():
    """A VPC pinned to us-east-1c with no second AZ named, and the interface endpoints of an EKS cluster's nodes."""
    st = stack("OneAz")
    props = TrainingVpcProps(
        cidr="10.20.0.0/16",
        availability_zone="us-east-1c",
        interface_endpoints=("ssm", "ecr.api", "eks-auth", "ssm"),
        gateway_endpoints=("dynamodb",),
    )
    vpc = TrainingVpc(st, "Vpc", props)
    return vpc, Template.from_stack(st)


def test_without_a_second_az_the_vpc_lies_in_the_first_alone_its_compute_subnet_unmoved(new_vpc, one_az) -> None:
    two, _, _, _ = new_vpc
    vpc, template = one_az
    template.resource_count_is("AWS::EC2::Subnet", 2)
    assert {s.availability_zone for s in vpc.vpc.public_subnets + vpc.vpc.private_subnets} == {"us-east-1c"}
    # The compute subnet keeps its address block whether the VPC spans one AZ or two: adding or dropping the
    # second AZ never replaces it (a subnet's CidrBlock is create-only).
    mine, theirs = vpc.compute_subnet.node.default_child, two.compute_subnet.node.default_child
    assert mine.cidr_block == theirs.cidr_block == "10.20.64.0/18"
    assert (
        vpc.vpc.public_subnets[0].node.default_child.cidr_block
        == two.vpc.public_subnets[0].node.default_child.cidr_block
    )
    template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_interface_endpoints_sit_in_the_compute_subnet_with_private_dns(one_az) -> None:
    vpc, template = one_az
    endpoints = [
        r["Properties"]
        for r in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if r["Properties"]["VpcEndpointType"] == "Interface"
    ]
    # Each service once, however often it is named.
    assert sorted(e["ServiceName"] for e in endpoints) == [
        "com.amazonaws.us-east-1.ecr.api",
        "com.amazonaws.us-east-1.eks-auth",
        "com.amazonaws.us-east-1.ssm",
    ]
    group = get_att(vpc.endpoint_security_group.node.default_child, "GroupId")
    for endpoint in endpoints:
        assert endpoint["SubnetIds"] == [{"Ref": logical_id(vpc.compute_subnet.node.default_child)}]
        assert endpoint["SecurityGroupIds"] == [group]
        assert endpoint["PrivateDnsEnabled"] is True


def test_the_endpoints_group_admits_https_from_the_vpc_cidr_only(one_az) -> None:
    vpc, template = one_az
    group = vpc.endpoint_security_group.node.default_child
    props = template.find_resources("AWS::EC2::SecurityGroup")[logical_id(group)]["Properties"]
    assert props["SecurityGroupIngress"] == [
        {
            "CidrIp": "10.20.0.0/16",
            "Description": "HTTPS from this VPC",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.20.0.0/16"})
    # No egress (the disabling placeholder rule alone): an endpoint only answers.
    assert [rule["CidrIp"] for rule in props["SecurityGroupEgress"]] == ["255.255.255.255/32"]
    standalone = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert not [r for r in standalone if r["GroupId"] == get_att(group, "GroupId")]


def test_gateway_endpoints_besides_s3_route_from_the_private_subnets(one_az) -> None:
    vpc, template = one_az
    gateways = {
        json.dumps(r["Properties"]["ServiceName"], sort_keys=True): r["Properties"]
        for r in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if r["Properties"]["VpcEndpointType"] == "Gateway"
    }
    assert len(gateways) == 2
    assert any(".dynamodb" in name for name in gateways) and any(".s3" in name for name in gateways)
    private_tables = [cdk.Stack.of(vpc).resolve(s.route_table.route_table_id) for s in vpc.vpc.private_subnets]
    for gateway in gateways.values():
        assert all(table in gateway["RouteTableIds"] for table in private_tables)


def test_without_endpoints_the_vpc_has_only_s3s_gateway(new_vpc) -> None:
    vpc, _, _, template = new_vpc
    assert vpc.endpoint_security_group is None
    (endpoint,) = template.find_resources("AWS::EC2::VPCEndpoint").values()
    assert endpoint["Properties"]["VpcEndpointType"] == "Gateway"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"second_availability_zone": "us-east-1b"},
            "second_availability_zone: got 'us-east-1b'; allowed: set together",
        ),
        (
            {"availability_zone": "us-east-1a", "second_availability_zone": "us-east-1a"},
            "allowed: an AZ other than us-east-1a",
        ),
        ({"gateway_endpoints": ("s3",)}, "gateway_endpoints: got 's3'; allowed: dynamodb"),
        (
            {
                "existing": ExistingNetwork(
                    vpc_id="vpc-0123456789abcdef0", private_subnet_id="subnet-0123456789abcdef0", availability_zone="a"
                ),
                "interface_endpoints": ("ssm",),
            },
            "interface_endpoints: got ['ssm']; allowed: none with `existing`",
        ),
    ],
)
def test_bad_zone_and_endpoint_props_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainingVpcProps(**fields)
