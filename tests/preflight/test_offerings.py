"""The offerings check: EC2 must offer every instance type the cluster launches in its availability zone.

moto answers from its copy of EC2's offerings per AZ. In us-east-1 (zones a to f) it lists p5.48xlarge in every
zone, m5.2xlarge in all but us-east-1e, p5en.48xlarge in us-east-1a and us-east-1c, trn1.32xlarge in us-east-1b,
us-east-1c and us-east-1f, p6-b200.48xlarge in us-east-1c only, vt1.24xlarge in us-east-1a and us-east-1d, and
trn2.48xlarge nowhere.
"""

from __future__ import annotations

import pytest

from kiln.preflight.checks import offerings
from kiln.preflight.run import run_check
from tests.support.preflight import AZ, client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow


def _groups(*types: str, **more: object) -> dict:
    """Return plan overrides with one group of one node per type in TYPES."""
    groups = [{"name": f"grp{i}", "instance_type": name, "max_count": 1} for i, name in enumerate(types)]
    return {"compute": {"groups": groups}, **more}


def test_every_type_offered_in_the_az_is_one_ok_line_each(aws) -> None:
    findings = offerings.check(make_plan(), aws)
    assert [f.line() for f in findings] == [
        f"OK        offerings: m5.2xlarge (login nodes): offered in {AZ}",
        f"OK        offerings: p5.48xlarge (group gpu): offered in {AZ}",
    ]


def test_a_type_the_az_lacks_fails_naming_the_azs_that_offer_it(aws) -> None:
    login, p5en = offerings.check(make_plan(**_groups("p5en.48xlarge", availability_zone="us-east-1b")), aws)
    assert login.status == "ok"
    assert p5en.status == "fail"
    assert p5en.subject == "p5en.48xlarge (group grp0)"
    assert p5en.message == "not offered in us-east-1b"
    assert p5en.remedy.startswith("set availability_zone to one of us-east-1a, us-east-1c, which offer it")


def test_a_type_no_az_of_the_region_offers_asks_for_another_region(aws) -> None:
    _, trn2 = offerings.check(make_plan(**_groups("trn2.48xlarge")), aws)
    assert trn2.status == "fail"
    assert trn2.remedy == ("no AZ of us-east-1 offers it: choose another region (set region) or another instance type")


def test_an_az_the_region_does_not_have_fails_naming_its_zones(aws) -> None:
    (finding,) = offerings.check(make_plan(**_groups("p5en.48xlarge", availability_zone="us-east-1g")), aws)
    assert finding.status == "fail"
    assert finding.subject == "availability_zone us-east-1g"
    zones = "us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f"
    assert finding.message == f"is not an availability zone of us-east-1 (its zones: {zones})"
    assert (
        finding.remedy == "set availability_zone to one that offers m5.2xlarge, p5en.48xlarge: us-east-1a, us-east-1c"
    )


def test_no_az_set_warns_and_names_the_azs_that_offer_every_type(aws) -> None:
    plan = make_plan(**_groups("p5en.48xlarge", "trn1.32xlarge", availability_zone=None))
    (finding,) = offerings.check(plan, aws)
    assert finding.status == "warn"
    assert finding.message.startswith("availability_zone is not set: the new VPC takes the region's first AZ")
    assert finding.remedy == "set availability_zone to one of: us-east-1c"


def test_no_az_set_and_no_az_offering_every_type_fails(aws) -> None:
    (finding,) = offerings.check(make_plan(**_groups("p6-b200.48xlarge", "vt1.24xlarge", availability_zone=None)), aws)
    assert finding.status == "fail"
    assert "p6-b200.48xlarge: us-east-1c; vt1.24xlarge: us-east-1a, us-east-1d" in finding.message
    assert "another region" in finding.remedy


def test_hyperpod_nodes_need_no_ec2_offering_and_no_call(aws) -> None:
    hyperpod = {
        "backend": "hyperpod",
        "groups": [{"name": "gpu", "instance_type": "ml.p5.48xlarge", "min_count": 2, "max_count": 2}],
    }
    clients, stubber = stubbed(aws, "ec2")
    with stubber:  # no response queued: any call would raise
        (finding,) = offerings.check(make_plan(compute=hyperpod), clients)
    assert finding.status == "ok"
    assert "SageMaker's account" in finding.message


def _zones(*zones: tuple[str, str]) -> dict:
    """Return a DescribeAvailabilityZones answer listing ZONES, each a (name, zone type) pair."""
    return {"AvailabilityZones": [{"ZoneName": name, "ZoneType": kind} for name, kind in zones]}


def _offered(name: str, zone: str) -> dict:
    """Return one offering of DescribeInstanceTypeOfferings: type NAME in ZONE."""
    return {"InstanceType": name, "LocationType": "availability-zone", "Location": zone}


def test_every_page_of_offerings_is_read_and_local_zones_are_not_azs(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_response(
        "describe_availability_zones", _zones((AZ, "availability-zone"), ("us-east-1-bos-1a", "local-zone"))
    )
    filters = [{"Name": "location", "Values": [AZ]}, {"Name": "instance-type", "Values": ["m5.2xlarge", "p5.48xlarge"]}]
    params = {"LocationType": "availability-zone", "Filters": filters}
    first = {"InstanceTypeOfferings": [_offered("m5.2xlarge", AZ)], "NextToken": "page-2"}
    stubber.add_response("describe_instance_type_offerings", first, params)
    second = {"InstanceTypeOfferings": [_offered("p5.48xlarge", AZ)]}
    stubber.add_response("describe_instance_type_offerings", second, {**params, "NextToken": "page-2"})
    with stubber:
        findings = offerings.check(make_plan(), clients)
    stubber.assert_no_pending_responses()
    assert [f.status for f in findings] == ["ok", "ok"]


DENIED = "allow {action} (read-only) for the identity running kiln, or pass --skip offerings"
THROTTLED = "run preflight again in a minute"


@pytest.mark.parametrize(
    ("refused", "action", "code", "remedy"),
    [
        ("describe_availability_zones", "ec2:DescribeAvailabilityZones", "AccessDenied", DENIED),
        ("describe_availability_zones", "ec2:DescribeAvailabilityZones", "ThrottlingException", THROTTLED),
        # EC2's own words for a denial and for throttling
        ("describe_instance_type_offerings", "ec2:DescribeInstanceTypeOfferings", "UnauthorizedOperation", DENIED),
        ("describe_instance_type_offerings", "ec2:DescribeInstanceTypeOfferings", "RequestLimitExceeded", THROTTLED),
    ],
)
def test_a_refused_call_is_one_unchecked_line_naming_its_action(
    aws, refused: str, action: str, code: str, remedy: str
) -> None:
    clients, stubber = stubbed(aws, "ec2")
    if refused == "describe_instance_type_offerings":
        stubber.add_response("describe_availability_zones", _zones((AZ, "availability-zone")))
    stubber.add_client_error(refused, **client_error(code))
    with stubber:
        (finding,) = run_check(offerings.CHECK, make_plan(), clients)
    assert (finding.check, finding.status) == ("offerings", "unchecked")
    assert action in finding.message and code in finding.message
    assert finding.remedy == remedy.format(action=action)
