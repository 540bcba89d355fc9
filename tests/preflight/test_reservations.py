"""The reservations check: a group's capacity reservation or block exists, matches it and holds its nodes in time.

moto has no DescribeCapacityReservations: EC2's answers come from a Stubber.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kiln.preflight.checks import reservations
from kiln.preflight.findings import Finding
from kiln.preflight.run import run_check
from tests.support.preflight import AZ, client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

RID = "cr-0123456789abcdef0"
OTHER = "cr-0fedcba9876543210"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reservations, "now", lambda: NOW)


def _group(name: str = "gpu", count: int = 2, kind: str = "capacity-block", rid: str = RID) -> dict:
    """Return one p5.48xlarge group of COUNT nodes bought as KIND from RID."""
    capacity = {"type": kind, "reservation_id": rid}
    return {"name": name, "instance_type": "p5.48xlarge", "min_count": count, "max_count": count, "capacity": capacity}


def _plan(*groups: dict, **more: object):
    """Return the base plan with GROUPS (default: one group of 2 nodes from a capacity block RID)."""
    return make_plan(compute={"groups": list(groups or [_group()])}, **more)


def _reservation(**fields: object) -> dict:
    """Return EC2's description of RID: an active 2-node p5.48xlarge capacity block in AZ, overridden by FIELDS."""
    described = {
        "CapacityReservationId": RID,
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": AZ,
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "active",
        "StartDate": NOW - timedelta(days=1),
        "EndDate": NOW + timedelta(days=3),
        "EndDateType": "limited",
        "ReservationType": "capacity-block",
    }
    described.update(fields)
    return {key: value for key, value in described.items() if value is not None}


def _check(aws, plan, *described: dict) -> list[Finding]:
    """Return the check's findings with EC2 describing each reservation of the plan as DESCRIBED, in order."""
    clients, stubber = stubbed(aws, "ec2")
    for reservation in described:
        params = {"CapacityReservationIds": [reservation["CapacityReservationId"]]}
        stubber.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation]}, params)
    with stubber:
        findings = reservations.check(plan, clients)
    stubber.assert_no_pending_responses()
    return findings


def test_no_reservation_in_the_plan_is_one_ok_line_and_no_call(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    with stubber:  # no response queued: any call would raise
        (finding,) = reservations.check(make_plan(), clients)
    assert finding.line() == "OK        reservations: capacity: no group launches into a capacity reservation or block"


def test_a_matching_active_capacity_block_is_one_ok_line(aws) -> None:
    (finding,) = _check(aws, _plan(), _reservation())
    assert finding.line() == (
        f"OK        reservations: {RID} (group gpu): capacity block of 2 × p5.48xlarge in {AZ}, "
        "active until 2025-06-04 12:00 UTC; group gpu needs at most 2"
    )


def test_a_matching_on_demand_reservation_with_room_is_one_ok_line(aws) -> None:
    described = _reservation(
        ReservationType="default", TotalInstanceCount=4, AvailableInstanceCount=3, EndDate=None, EndDateType=None
    )
    (finding,) = _check(aws, _plan(_group(kind="reservation")), described)
    assert finding.status == "ok"
    assert "on-demand capacity reservation of 4 × p5.48xlarge" in finding.message
    assert "active with no end date, 3 free" in finding.message


@pytest.mark.parametrize("code", ["InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"])
def test_a_reservation_ec2_does_not_know_fails(aws, code: str) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_capacity_reservations", **client_error(code))
    with stubber:
        (finding,) = reservations.check(_plan(), clients)
    assert finding.status == "fail"
    assert finding.message == "does not exist in us-east-1 or is not this account's (nor shared with it)"
    assert finding.remedy.startswith("correct capacity.reservation_id of group gpu")


def test_an_empty_answer_fails_as_unknown_too(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_response("describe_capacity_reservations", {"CapacityReservations": []})
    with stubber:
        (finding,) = reservations.check(_plan(), clients)
    assert finding.status == "fail" and "does not exist in us-east-1" in finding.message


def test_each_mismatch_is_its_own_failure(aws) -> None:
    described = _reservation(InstanceType="p5en.48xlarge", AvailabilityZone="us-east-1b", TotalInstanceCount=1)
    kind, zone, count = _check(aws, _plan(), described)
    assert [f.status for f in (kind, zone, count)] == ["fail", "fail", "fail"]
    assert kind.message == "reserves p5en.48xlarge; group gpu runs p5.48xlarge"
    assert kind.remedy.startswith("set instance_type of group gpu to p5en.48xlarge")
    assert zone.message == f"is in us-east-1b; the cluster is in availability_zone {AZ}"
    assert zone.remedy.startswith("set availability_zone to us-east-1b")
    assert count.message == "holds 1 instance; group gpu needs up to 2"


def test_a_spec_without_an_az_must_name_the_reservations(aws) -> None:
    (finding,) = _check(aws, _plan(availability_zone=None), _reservation(AvailabilityZone="us-east-1c"))
    assert finding.status == "fail"
    assert finding.remedy == "set availability_zone to us-east-1c"


@pytest.mark.parametrize(
    ("spec_type", "ec2_type", "remedy"),
    [
        ("capacity-block", "default", "set capacity.type of group gpu to reservation"),
        ("reservation", "capacity-block", "set capacity.type of group gpu to capacity-block"),
    ],
)
def test_the_capacity_type_must_match_the_kind_of_reservation(aws, spec_type: str, ec2_type: str, remedy: str) -> None:
    (finding,) = _check(aws, _plan(_group(kind=spec_type)), _reservation(ReservationType=ec2_type))
    assert finding.status == "fail"
    assert finding.message.endswith(f"group gpu has capacity.type {spec_type}")
    assert finding.remedy == remedy


def test_a_reservation_with_too_few_free_instances_fails_giving_both_numbers(aws) -> None:
    described = _reservation(ReservationType="default", TotalInstanceCount=4, AvailableInstanceCount=1)
    (finding,) = _check(aws, _plan(_group(kind="reservation")), described)
    assert finding.status == "fail"
    assert finding.message == "has 1 of its 4 instances free (3 already run in it); group gpu needs up to 2"


def test_groups_sharing_a_block_add_up_their_nodes(aws) -> None:
    plan = _plan(_group("aaa", count=2), _group("bbb", count=1))
    (finding,) = _check(aws, plan, _reservation(TotalInstanceCount=2))
    assert finding.subject == f"{RID} (group aaa and group bbb)"
    assert finding.message == "holds 2 instances; group aaa and group bbb need up to 3"


def test_each_reservation_is_asked_about_once(aws) -> None:
    plan = _plan(_group("aaa"), _group("bbb", rid=OTHER))
    first, second = _check(aws, plan, _reservation(), _reservation(CapacityReservationId=OTHER))
    assert (first.status, second.status) == ("ok", "ok")
    assert second.subject == f"{OTHER} (group bbb)"


def test_a_scheduled_block_warns_when_it_starts(aws) -> None:
    described = _reservation(State="scheduled", StartDate=NOW + timedelta(hours=30), AvailableInstanceCount=0)
    (finding,) = _check(aws, _plan(), described)
    assert finding.status == "warn"
    assert finding.message == (
        "is scheduled: it starts 2025-06-02 18:00 UTC, 30.0 h from now; nodes launch into it only once it is active"
    )
    assert finding.remedy == "plan jobs from 2025-06-02 18:00 UTC: no node launches into it before"


@pytest.mark.parametrize("state", ["pending", "assessing", "delayed", "payment-pending", "unavailable"])
def test_a_reservation_not_yet_active_warns(aws, state: str) -> None:
    (finding,) = _check(aws, _plan(), _reservation(State=state))
    assert finding.status == "warn"
    assert finding.message.startswith(f"is {state}") and "only once it is active" in finding.message


@pytest.mark.parametrize("state", ["expired", "cancelled", "cancelling", "failed", "payment-failed", "unsupported"])
def test_a_reservation_that_will_never_be_active_fails(aws, state: str) -> None:
    (finding,) = _check(aws, _plan(), _reservation(State=state, EndDate=NOW - timedelta(hours=1)))
    assert finding.status == "fail"  # one line: an expired block's past end date is the same problem
    assert finding.message.startswith(f"is {state}: ") and "no node can launch into it" in finding.message
    assert finding.remedy.startswith("set capacity.reservation_id of group gpu to a current reservation")


def test_a_block_ending_within_a_day_warns_naming_the_end_in_utc(aws) -> None:
    (finding,) = _check(aws, _plan(), _reservation(EndDate=NOW + timedelta(hours=5, minutes=30)))
    assert finding.status == "warn"
    assert finding.message == (
        "ends 2025-06-01 17:30 UTC, 5.5 h from now (EC2 starts terminating its instances 30 minutes before): "
        "a training run still going then loses its nodes"
    )


def test_a_reservation_past_its_end_date_fails(aws) -> None:
    (finding,) = _check(aws, _plan(), _reservation(EndDate=NOW - timedelta(minutes=10)))
    assert finding.status == "fail"
    assert finding.message == "ended 2025-06-01 11:50 UTC; no node can launch into it"


def test_another_platform_warns_and_dedicated_tenancy_fails(aws) -> None:
    described = _reservation(InstancePlatform="Red Hat Enterprise Linux", Tenancy="dedicated")
    platform, tenancy = _check(aws, _plan(), described)
    assert platform.status == "warn" and "platform Red Hat Enterprise Linux" in platform.message
    assert tenancy.status == "fail" and "dedicated tenancy" in tenancy.message


@pytest.mark.parametrize(
    ("code", "remedy"),
    [
        (
            "AccessDenied",
            "allow ec2:DescribeCapacityReservations (read-only) for the identity running kiln, "
            "or pass --skip reservations",
        ),
        ("ThrottlingException", "run preflight again in a minute"),
    ],
)
def test_a_refused_call_is_one_unchecked_line_naming_its_action(aws, code: str, remedy: str) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_capacity_reservations", **client_error(code))
    with stubber:
        (finding,) = run_check(reservations.CHECK, _plan(), clients)
    assert (finding.check, finding.status) == ("reservations", "unchecked")
    assert "ec2:DescribeCapacityReservations" in finding.message and code in finding.message
    assert finding.remedy == remedy
