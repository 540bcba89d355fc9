"""The subnet check: the private subnet (existing, or the new VPC's) has room for every node's addresses."""

from __future__ import annotations

import pytest

from kiln.preflight.checks import subnet
from kiln.preflight.run import run_check
from tests.support.preflight import AZ, client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

BASE_NEED = "1 × m5.2xlarge × 1 + 2 × p5.48xlarge × 1 = 3 addresses"


def _nodes(count: int, backend: str = "pcs", instance_type: str = "m5.2xlarge") -> dict:
    """Return compute overrides: one group of COUNT nodes of INSTANCE_TYPE on BACKEND."""
    group = {"name": "cpu", "instance_type": instance_type, "min_count": count, "max_count": count}
    return {"backend": backend, "groups": [group]}


def test_the_breakdown_names_each_kind_of_node_and_its_addresses() -> None:
    assert subnet.address_breakdown(make_plan()) == BASE_NEED
    # HyperPod attaches an address to each of a p5's 32 EFA interfaces.
    hyperpod = make_plan(compute=_nodes(2, "hyperpod", "p5.48xlarge"))
    assert subnet.address_breakdown(hyperpod) == (
        "1 × m5.8xlarge × 1 + 1 × m5.2xlarge × 1 + 2 × p5.48xlarge × 32 = 66 addresses"
    )


def test_a_new_vpc_with_room_is_ok_without_asking_aws(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    with stubber:  # no response queued: any call would raise
        (finding,) = subnet.check(make_plan(), clients)
    assert finding.line() == (
        "OK        subnet: new VPC's private subnet: a /18 (network.vpc_cidr /16 + 2) has 16379 usable addresses; "
        f"the nodes take up to {BASE_NEED} (addresses FSx takes are not counted)"
    )


def test_on_eks_the_pods_addresses_are_named_as_not_counted(aws) -> None:
    eks = {
        "backend": "eks",
        "login_nodes": None,
        "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}],
    }
    (finding,) = subnet.check(make_plan(compute=eks), aws)
    assert finding.message.endswith("(addresses FSx and pods take are not counted)")


def test_a_new_vpc_too_small_fails_naming_a_wide_enough_cidr(aws) -> None:
    plan = make_plan(network={"vpc_cidr": "10.0.0.0/22"}, compute=_nodes(260))
    (finding,) = subnet.check(plan, aws)
    assert finding.status == "fail"
    assert finding.message.startswith("a /24 (network.vpc_cidr /22 + 2) has 251 usable addresses")
    assert "1 × m5.2xlarge × 1 + 260 × m5.2xlarge × 1 = 261 addresses" in finding.message
    assert finding.remedy == (
        "set network.vpc_cidr to a /21 or wider (the private subnet is the VPC's prefix + 2: a /23 has 507 addresses)"
    )


def test_a_new_vpc_nearly_full_warns(aws) -> None:
    (finding,) = subnet.check(make_plan(network={"vpc_cidr": "10.0.0.0/22"}, compute=_nodes(240)), aws)
    assert finding.status == "warn"
    assert finding.remedy.startswith("set network.vpc_cidr to a /21 or wider for headroom")


def test_a_need_no_new_vpc_holds_points_to_an_existing_one(aws) -> None:
    (finding,) = subnet.check(make_plan(compute=_nodes(520, "hyperpod", "p5.48xlarge")), aws)
    assert finding.status == "fail"
    assert finding.remedy.startswith("lower max_count, or use an existing VPC")


def _subnet(aws, cidr: str = "10.0.0.0/24", zone: str = AZ) -> tuple[str, str]:
    """Create a VPC and one subnet of CIDR in ZONE in moto; return their ids."""
    vpc = aws.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    made = aws.ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
    return vpc, made


def _existing(vpc: str, subnet_id: str, **more: object):
    return make_plan(network={"vpc_id": vpc, "private_subnet_id": subnet_id}, **more)


def test_an_existing_subnet_with_room_is_one_ok_line(aws) -> None:
    vpc, subnet_id = _subnet(aws)
    (finding,) = subnet.check(_existing(vpc, subnet_id), aws)
    assert finding.line() == (
        f"OK        subnet: network.private_subnet_id {subnet_id}: 10.0.0.0/24 in {AZ} has 251 free addresses; "
        f"the nodes take up to {BASE_NEED} (addresses FSx takes are not counted)"
    )


@pytest.mark.parametrize(("cidr", "status"), [("10.0.0.0/27", "warn"), ("10.0.0.0/28", "fail")])
def test_an_existing_subnet_short_of_addresses_warns_or_fails(aws, cidr: str, status: str) -> None:
    # 21 nodes and a login node take 22 addresses: a /27 has 27 free (more than 80% taken), a /28 only 11.
    vpc, subnet_id = _subnet(aws, cidr)
    (finding,) = subnet.check(_existing(vpc, subnet_id, compute=_nodes(21)), aws)
    assert finding.status == status
    assert "network.private_subnet_id" in finding.remedy and "lower max_count" in finding.remedy


def test_a_subnet_ec2_does_not_know_fails(aws) -> None:
    vpc, _ = _subnet(aws)
    (finding,) = subnet.check(_existing(vpc, "subnet-0123456789abcdef0"), aws)
    assert finding.status == "fail"
    assert finding.message == "does not exist in us-east-1 or is not this account's (nor shared with it)"


def test_a_subnet_in_another_vpc_and_az_fails_on_each(aws) -> None:
    _, subnet_id = _subnet(aws, zone="us-east-1b")
    other_vpc = aws.ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    vpc, zone, addresses = subnet.check(_existing(other_vpc, subnet_id), aws)
    assert (vpc.status, zone.status, addresses.status) == ("fail", "fail", "ok")
    assert vpc.message.endswith(f"not in network.vpc_id {other_vpc}")
    assert zone.message == f"is in us-east-1b, not in availability_zone {AZ}"
    assert zone.remedy == f"set availability_zone to us-east-1b, or choose a private subnet in {AZ}"


@pytest.mark.parametrize(
    ("code", "remedy"),
    [
        ("AccessDenied", "allow ec2:DescribeSubnets (read-only) for the identity running kiln, or pass --skip subnet"),
        ("ThrottlingException", "run preflight again in a minute"),
    ],
)
def test_a_refused_call_is_one_unchecked_line_naming_its_action(aws, code: str, remedy: str) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_subnets", **client_error(code))
    with stubber:
        (finding,) = run_check(subnet.CHECK, _existing("vpc-01234567", "subnet-01234567"), clients)
    assert (finding.check, finding.status) == ("subnet", "unchecked")
    assert "ec2:DescribeSubnets" in finding.message and code in finding.message
    assert finding.remedy == remedy
