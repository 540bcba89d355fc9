"""The zones check: the new VPC's AZs are this account's, and EKS takes both (by ZoneId, never by name).

moto's us-east-1 lists us-east-1a..f as use1-az6, az1, az2, az4, az3, az5: its us-east-1e is use1-az3, which EKS
refuses.
"""

from __future__ import annotations

import pytest

from kiln.preflight.checks import zones
from kiln.preflight.run import run_check
from tests.support.preflight import make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

EKS = {"backend": "eks", "login_nodes": None, "groups": [{"name": "gpu", "instance_type": "p5.48xlarge"}]}
SOURCE = "https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html#cluster-subnets"


def _zone(name: str, zone_id: str, state: str = "available", kind: str = "availability-zone") -> dict:
    return {"ZoneName": name, "ZoneId": zone_id, "State": state, "ZoneType": kind, "RegionName": "us-east-1"}


def _answering(aws, *listed: dict):
    """Return AWS whose DescribeAvailabilityZones answers LISTED once."""
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_response("describe_availability_zones", {"AvailabilityZones": list(listed)}, {})
    return clients, stubber


def test_the_second_az_is_the_first_other_the_account_lists_as_cdks_lookup_takes_it(aws) -> None:
    (finding,) = zones.check(make_plan(compute=EKS), aws)
    assert finding.line() == (
        "OK        zones: availability zones: us-east-1a (use1-az6), us-east-1b (use1-az1): the second is the first "
        "other AZ the account lists, which CDK's lookup gives the VPC; EKS takes both for its control plane"
    )


def test_a_slurm_backends_vpc_keeps_one_az_whatever_the_account_lists(aws) -> None:
    # As the network stack builds it (kiln.stacks.zones.wants_zone_lookup): no lookup where nothing needs a second.
    (finding,) = zones.check(make_plan(), aws)
    assert finding.line() == (
        "OK        zones: availability zones: us-east-1a (use1-az6): the VPC lies in this AZ alone (nothing needs a "
        "second AZ)"
    )
    # A second AZ the spec names is the VPC's, and is checked.
    (finding,) = zones.check(make_plan(network={"second_availability_zone": "us-east-1c"}), aws)
    assert finding.message.startswith("us-east-1a (use1-az6), us-east-1c (use1-az2): the second as network.")


def test_eks_takes_both_azs_of_an_ordinary_pair(aws) -> None:
    (finding,) = zones.check(make_plan(compute=EKS, availability_zone="us-east-1d"), aws)
    assert finding.status == "ok"
    assert finding.message.startswith("us-east-1d (use1-az4), us-east-1a (use1-az6)")
    assert finding.message.endswith("EKS takes both for its control plane")


def test_a_named_second_az_where_eks_refuses_a_control_plane_fails_naming_the_others(aws) -> None:
    plan = make_plan(compute=EKS, network={"second_availability_zone": "us-east-1e"})
    (finding,) = zones.check(plan, aws)
    assert finding.line() == (
        "FAIL      zones: network.second_availability_zone us-east-1e: is use1-az3 in this account, where EKS refuses "
        f"a cluster's subnets ({SOURCE}); set network.second_availability_zone to one of us-east-1b, us-east-1c, "
        "us-east-1d, us-east-1f"
    )


def test_a_first_az_where_eks_refuses_a_control_plane_fails_too(aws) -> None:
    (finding,) = zones.check(make_plan(compute=EKS, availability_zone="us-east-1e"), aws)
    assert finding.status == "fail"
    assert finding.subject == "availability_zone us-east-1e"
    assert finding.remedy.startswith("set availability_zone to one of us-east-1b, us-east-1c, us-east-1d, us-east-1f")
    assert "offerings check" in finding.remedy


def test_the_refusal_follows_the_zone_id_not_the_name(aws) -> None:
    # In this account us-east-1b is use1-az3: the lookup's pick for us-east-1a is refused.
    listed = [_zone("us-east-1a", "use1-az1"), _zone("us-east-1b", "use1-az3"), _zone("us-east-1c", "use1-az2")]
    clients, stubber = _answering(aws, *listed)
    with stubber:
        (finding,) = zones.check(make_plan(compute=EKS), clients)
    assert finding.status == "fail"
    assert finding.subject == "second AZ us-east-1b"
    assert finding.remedy == "set network.second_availability_zone to one of us-east-1c"
    # Outside EKS the same pair is fine.
    clients, stubber = _answering(aws, *listed)
    with stubber:
        (finding,) = zones.check(make_plan(), clients)
    assert finding.status == "ok"


def test_a_named_second_az_the_account_lacks_fails(aws) -> None:
    (finding,) = zones.check(make_plan(network={"second_availability_zone": "us-east-1g"}), aws)
    assert finding.line() == (
        "FAIL      zones: network.second_availability_zone us-east-1g: is not an available AZ of us-east-1 in this "
        "account (its AZs: us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f); set "
        "network.second_availability_zone to one of us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, "
        "us-east-1f"
    )


def test_local_zones_and_unavailable_zones_are_not_the_vpcs(aws) -> None:
    listed = [
        _zone("us-east-1-bos-1a", "use1-bos1-az1", kind="local-zone"),
        _zone("us-east-1a", "use1-az1"),
        _zone("us-east-1b", "use1-az2", state="impaired"),
        _zone("us-east-1c", "use1-az4"),
    ]
    clients, stubber = _answering(aws, *listed)
    with stubber:
        (finding,) = zones.check(make_plan(compute=EKS), clients)
    assert finding.message.startswith("us-east-1a (use1-az1), us-east-1c (use1-az4)")


def test_one_az_in_the_account_fails_eks_and_suits_the_rest(aws) -> None:
    clients, stubber = _answering(aws, _zone("us-east-1a", "use1-az1"))
    with stubber:
        (finding,) = zones.check(make_plan(compute=EKS), clients)
    assert (finding.status, finding.subject) == ("fail", "second AZ")
    assert "needs subnets in two" in finding.message
    clients, stubber = _answering(aws, _zone("us-east-1a", "use1-az1"))
    with stubber:
        (finding,) = zones.check(make_plan(), clients)
    assert finding.status == "ok"
    assert finding.message == "us-east-1a (use1-az1): the VPC lies in this AZ alone (nothing needs a second AZ)"


def test_without_availability_zone_eks_takes_the_regions_first_two(aws) -> None:
    listed = [_zone("us-east-1a", "use1-az3"), _zone("us-east-1b", "use1-az1"), _zone("us-east-1c", "use1-az2")]
    clients, stubber = _answering(aws, *listed)
    with stubber:
        (finding,) = zones.check(make_plan(compute=EKS, availability_zone=None), clients)
    assert finding.status == "fail"
    assert finding.subject == "AZ the VPC takes without availability_zone us-east-1a"
    assert finding.remedy.startswith("set availability_zone and network.second_availability_zone to one of us-east-1c")


def test_an_existing_vpc_has_no_zones_to_check(aws) -> None:
    plan = make_plan(network={"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"})
    clients, stubber = stubbed(aws, "ec2")
    with stubber:  # no response queued: any call would raise
        (finding,) = zones.check(plan, clients)
    assert finding.status == "ok" and finding.message.startswith("nothing to check")


def test_a_refused_describe_is_one_unchecked_line(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_availability_zones", "UnauthorizedOperation", "no")
    with stubber:
        (finding,) = run_check(zones.CHECK, make_plan(compute=EKS), clients)
    assert finding.status == "unchecked"
    assert "ec2:DescribeAvailabilityZones was denied" in finding.message
