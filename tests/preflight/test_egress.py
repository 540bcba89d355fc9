"""The egress check: an existing private subnet routes to a NAT gateway (or another egress), or else has the VPC
endpoints its nodes need; one line per thing missing."""

from __future__ import annotations

import pytest

from kiln.preflight.checks import egress
from kiln.preflight.plan import Plan
from tests.support.fake_aws import REGION
from tests.support.preflight import AZ, make_plan

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

SERVICE = f"com.amazonaws.{REGION}"
PCS_NEEDS = ("s3", "ssm", "ssmmessages", "ec2messages", "pcs")


def _network(aws) -> tuple[str, str, str]:
    """Create a VPC, a private subnet of it in AZ with its own route table (no default route); return their ids."""
    vpc = aws.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone=AZ)["Subnet"]["SubnetId"]
    table = aws.ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    aws.ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
    return vpc, subnet, table


def _plan(vpc: str, subnet: str, **more: object) -> Plan:
    return make_plan(network={"vpc_id": vpc, "private_subnet_id": subnet}, **more)


def _nat(aws, vpc: str) -> str:
    public = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=AZ)["Subnet"]["SubnetId"]
    allocation = aws.ec2.allocate_address(Domain="vpc")["AllocationId"]
    return aws.ec2.create_nat_gateway(SubnetId=public, AllocationId=allocation)["NatGateway"]["NatGatewayId"]


def _endpoints(aws, vpc: str, subnet: str, table: str, names: tuple[str, ...], *, private_dns: bool = True) -> None:
    for name in names:
        if name == "s3":
            aws.ec2.create_vpc_endpoint(
                VpcId=vpc, ServiceName=f"{SERVICE}.s3", VpcEndpointType="Gateway", RouteTableIds=[table]
            )
        else:
            aws.ec2.create_vpc_endpoint(
                VpcId=vpc,
                ServiceName=f"{SERVICE}.{name}",
                VpcEndpointType="Interface",
                SubnetIds=[subnet],
                PrivateDnsEnabled=private_dns,
            )


def test_a_new_vpc_is_one_ok_line_without_asking_aws(aws) -> None:
    (finding,) = egress.check(make_plan(network={"interface_endpoints": True}), aws)
    assert finding.line() == (
        "OK        egress: new VPC: kiln's VPC routes its private subnets to a NAT gateway, with an S3 gateway "
        "endpoint and interface endpoints for the nodes' services"
    )


def test_a_default_route_to_a_nat_gateway_is_one_ok_line(aws) -> None:
    vpc, subnet, table = _network(aws)
    nat = _nat(aws, vpc)
    aws.ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    (finding,) = egress.check(_plan(vpc, subnet), aws)
    assert finding.line() == (
        f"OK        egress: network.private_subnet_id {subnet}: {table} routes 0.0.0.0/0 to NAT gateway {nat}: the "
        "nodes reach AWS and the internet"
    )


def test_a_subnet_without_its_own_table_takes_the_vpcs_main_table(aws) -> None:
    vpc = aws.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone=AZ)["Subnet"]["SubnetId"]
    main = aws.ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
    )["RouteTables"][0]["RouteTableId"]
    nat = _nat(aws, vpc)
    aws.ec2.create_route(RouteTableId=main, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    (finding,) = egress.check(_plan(vpc, subnet), aws)
    assert finding.status == "ok" and finding.message.startswith(f"{main} routes 0.0.0.0/0 to NAT gateway {nat}")


def test_without_a_default_route_each_missing_endpoint_is_one_line(aws) -> None:
    vpc, subnet, table = _network(aws)
    findings = egress.check(_plan(vpc, subnet), aws)
    assert [f.subject for f in findings] == [
        *(f"endpoint {name}" for name in PCS_NEEDS),
        f"network.private_subnet_id {subnet}",
    ]
    assert all(f.status == "fail" for f in findings)
    assert findings[0].line() == (
        f"FAIL      egress: endpoint s3: no {SERVICE}.s3 gateway endpoint routes {table}; add {table} to a "
        f"{SERVICE}.s3 gateway endpoint, or a default route to a NAT gateway"
    )
    assert findings[4].line() == (
        f"FAIL      egress: endpoint pcs: no {SERVICE}.pcs interface endpoint (with private DNS) in {vpc}; create one "
        "(https://docs.aws.amazon.com/pcs/latest/userguide/vpc-interface-endpoints.html), or add a default route to "
        "a NAT gateway"
    )
    assert findings[-1].line() == (
        f"FAIL      egress: network.private_subnet_id {subnet}: {table} has no default route (0.0.0.0/0): the nodes "
        "reach only what VPC endpoints serve (here: none of theirs), and not the internet their bootstrap downloads "
        f"installers from; add a route 0.0.0.0/0 to a NAT gateway in {table}, or bake an image that needs no downloads"
    )


def test_with_every_endpoint_there_only_the_internet_is_missing_a_warning(aws) -> None:
    vpc, subnet, table = _network(aws)
    _endpoints(aws, vpc, subnet, table, PCS_NEEDS)
    (finding,) = egress.check(_plan(vpc, subnet), aws)
    assert finding.status == "warn"
    assert "(here: s3, ssm, ssmmessages, ec2messages, pcs)" in finding.message


def test_each_backend_is_held_to_its_own_nodes_endpoints(aws) -> None:
    vpc, subnet, table = _network(aws)
    _endpoints(aws, vpc, subnet, table, PCS_NEEDS)
    # EKS takes no existing VPC (its control plane needs two AZs); HyperPod's nodes log and put metrics.
    hyperpod = {
        "backend": "hyperpod",
        "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}],
    }
    findings = egress.check(_plan(vpc, subnet, compute=hyperpod), aws)
    assert [f.subject for f in findings if f.subject.startswith("endpoint")] == ["endpoint logs", "endpoint monitoring"]
    prometheus = egress.check(_plan(vpc, subnet, observability={"prometheus": True}), aws)
    assert [f.subject for f in prometheus if f.status == "fail"] == ["endpoint aps-workspaces", prometheus[-1].subject]


def test_an_interface_endpoint_without_private_dns_does_not_count(aws) -> None:
    vpc, subnet, table = _network(aws)
    _endpoints(aws, vpc, subnet, table, PCS_NEEDS[:-1])
    _endpoints(aws, vpc, subnet, table, ("pcs",), private_dns=False)
    findings = egress.check(_plan(vpc, subnet), aws)
    (pcs,) = [f for f in findings if f.subject == "endpoint pcs"]
    assert "has private DNS off, so the nodes' calls bypass it" in pcs.message
    assert pcs.remedy == "enable its private DNS names, or add a default route to a NAT gateway"


def test_an_s3_gateway_on_another_route_table_does_not_serve_the_subnet(aws) -> None:
    vpc, subnet, _ = _network(aws)
    other = aws.ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    aws.ec2.create_vpc_endpoint(
        VpcId=vpc, ServiceName=f"{SERVICE}.s3", VpcEndpointType="Gateway", RouteTableIds=[other]
    )
    assert "endpoint s3" in [f.subject for f in egress.check(_plan(vpc, subnet), aws)]


def test_a_default_route_to_an_internet_gateway_is_no_egress_for_private_nodes(aws) -> None:
    vpc, subnet, table = _network(aws)
    gateway = aws.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    aws.ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    aws.ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    last = egress.check(_plan(vpc, subnet), aws)[-1]
    assert last.status == "fail"
    assert last.message.startswith(f"{table} sends 0.0.0.0/0 to internet gateway {gateway}, no use to nodes")


@pytest.mark.parametrize(
    ("route", "target"),
    [
        ({"TransitGatewayId": "tgw-0123"}, "transit gateway tgw-0123"),
        ({"NetworkInterfaceId": "eni-0123"}, "network interface (a NAT instance or firewall) eni-0123"),
        ({"GatewayId": "vgw-0123"}, "virtual private gateway vgw-0123"),
        ({"NatGatewayId": "nat-0123", "State": "blackhole"}, None),
        ({"GatewayId": "local"}, None),
    ],
)
def test_the_default_route_target_decides_the_egress(route: dict, target: str | None) -> None:
    table = {"RouteTableId": "rtb-1", "Routes": [{"DestinationCidrBlock": "0.0.0.0/0", "State": "active", **route}]}
    found = egress.default_route(table)
    assert found.target == target
    if target is None:
        assert found.why.startswith("rtb-1")


def test_a_subnet_with_no_route_table_at_all_fails(aws) -> None:
    plan = _plan("vpc-0123456789abcdef0", "subnet-0123456789abcdef0")
    (finding,) = egress.check(plan, aws)
    assert finding.status == "fail" and "has no route table" in finding.message
