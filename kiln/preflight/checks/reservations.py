"""Does every capacity reservation or block a group names exist, match the group, and hold its nodes in time?"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding, Status
from kiln.preflight.plan import NodeNeed, Plan

NAME = "reservations"
NOT_FOUND = ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed")
# The spec's capacity.type for each ReservationType EC2 reports, and back.
SPEC_TYPE = {"capacity-block": "capacity-block", "default": "reservation"}
RESERVATION_TYPE = {spec: aws for aws, spec in SPEC_TYPE.items()}
LABEL = {"capacity-block": "capacity block", "default": "on-demand capacity reservation"}
# States a reservation leaves for active (nodes wait until then), and why it is in each.
WAITING = {
    "scheduled": "it starts later",
    "pending": "EC2 is still provisioning it",
    "assessing": "EC2 is still assessing the future-dated request",
    "delayed": "EC2 is late delivering the future-dated capacity",
    "payment-pending": "its upfront payment has not been processed yet",
}
# States it never leaves: no node ever launches into it.
GONE = {
    "expired": "it has ended",
    "cancelled": "it was cancelled",
    "cancelling": "it is being cancelled",
    "failed": "EC2 could not provide it",
    "payment-failed": "its upfront payment failed and the block was released",
    "unsupported": "EC2 does not support it",
}
# kiln's nodes boot Linux and launch with default tenancy; a reservation for anything else does not take them.
PLATFORM = "Linux/UNIX"
TENANCY = "default"
ENDING_SOON = timedelta(hours=24)


def now() -> datetime:
    """Return the current time in UTC (tests replace it)."""
    return datetime.now(timezone.utc)


def aware(moment: datetime) -> datetime:
    """Return MOMENT with a time zone (botocore's are UTC-aware; a naive one is taken as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def utc(moment: datetime) -> str:
    """Return MOMENT as UTC text to the minute."""
    return aware(moment).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _hours(later: datetime, earlier: datetime) -> str:
    """Return the hours from EARLIER to LATER, to a tenth."""
    return f"{(later - earlier).total_seconds() / 3600:.1f} h"


def reserved_nodes(plan: Plan) -> dict[str, list[NodeNeed]]:
    """Return the nodes launching into each reservation id the plan names, in plan order."""
    by_id: dict[str, list[NodeNeed]] = {}
    for node in plan.nodes:
        if node.reservation_id:
            by_id.setdefault(node.reservation_id, []).append(node)
    return by_id


def describe(aws: AwsClients, reservation_id: str) -> dict | None:
    """Return the reservation RESERVATION_ID as EC2 describes it, or None when this account cannot see it."""
    try:
        found = aws.ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except ClientError as error:
        if error_code(error) in NOT_FOUND:
            return None
        raise
    return next(iter(found["CapacityReservations"]), None)


class _Findings:
    """The findings about one reservation and the nodes launching into it, all with the same subject."""

    def __init__(self, reservation_id: str, nodes: list[NodeNeed]) -> None:
        self.roles = " and ".join(node.role for node in nodes)
        self.need = "needs" if len(nodes) == 1 else "need"
        self.subject = f"{reservation_id} ({self.roles})"
        self.found: list[Finding] = []

    def add(self, status: Status, message: str, remedy: str) -> None:
        self.found.append(Finding(check=NAME, status=status, subject=self.subject, message=message, remedy=remedy))


def _instances(count: int) -> str:
    """Return COUNT instances in words."""
    return f"{count} instance" if count == 1 else f"{count} instances"


def _match_types(out: _Findings, nodes: list[NodeNeed], found: dict) -> None:
    """Add a failure for each node whose instance type or capacity type the reservation does not match."""
    reserved = found["InstanceType"]
    kind = found.get("ReservationType", "default")
    for node in nodes:
        if node.instance_type != reserved:
            out.add(
                "fail",
                f"reserves {reserved}; {node.role} runs {node.instance_type}",
                f"set instance_type of {node.role} to {reserved}, or name a reservation of {node.instance_type}",
            )
        if RESERVATION_TYPE.get(node.capacity, kind) != kind:
            out.add(
                "fail",
                f"is a {LABEL.get(kind, kind)}; {node.role} has capacity.type {node.capacity}",
                f"set capacity.type of {node.role} to {SPEC_TYPE.get(kind, kind)}",
            )


def _match_zone(out: _Findings, plan: Plan, found: dict) -> None:
    """Add a failure when the reservation lies outside the cluster's AZ (or the spec names no AZ)."""
    zone = found["AvailabilityZone"]
    if plan.availability_zone is None:
        out.add(
            "fail",
            f"is in {zone}; availability_zone is not set, so the new VPC may take another AZ",
            f"set availability_zone to {zone}",
        )
    elif plan.availability_zone != zone:
        out.add(
            "fail",
            f"is in {zone}; the cluster is in availability_zone {plan.availability_zone}",
            f"set availability_zone to {zone} (with an existing VPC, network.private_subnet_id must lie there too), "
            f"or name a reservation in {plan.availability_zone}",
        )


def _match_platform(out: _Findings, found: dict) -> None:
    """Add findings when the reservation is for another platform or tenancy than kiln's nodes."""
    platform = found.get("InstancePlatform", PLATFORM)
    if platform != PLATFORM:
        out.add(
            "warn",
            f"reserves capacity for platform {platform}; only instances of an AMI of that platform launch into it",
            f"make sure compute.image.ami_id is a {platform} AMI, or name a {PLATFORM} reservation",
        )
    tenancy = found.get("Tenancy", TENANCY)
    if tenancy != TENANCY:
        out.add(
            "fail",
            f"reserves {tenancy} tenancy; kiln launches nodes with {TENANCY} tenancy, which do not launch into it",
            f"name a reservation with {TENANCY} tenancy",
        )


def _count(out: _Findings, nodes: list[NodeNeed], found: dict) -> None:
    """Add a failure when the reservation holds fewer instances than its nodes run at most."""
    need = sum(node.count for node in nodes)
    total = found["TotalInstanceCount"]
    roles = out.roles
    if found.get("ReservationType", "default") == "capacity-block":
        if total < need:
            out.add(
                "fail",
                f"holds {_instances(total)}; {roles} {out.need} up to {need}",
                f"lower max_count of {roles} to {total} in all, or buy a block of at least {need} instances",
            )
        return
    free = found["AvailableInstanceCount"]
    if free < need:
        out.add(
            "fail",
            f"has {free} of its {_instances(total)} free ({total - free} already run in it); "
            f"{roles} {out.need} up to {need}",
            f"lower max_count of {roles} to {free} in all, stop instances running in it, or raise its "
            f"instance count (aws ec2 modify-capacity-reservation)",
        )


def _state(out: _Findings, found: dict, at: datetime) -> None:
    """Add a finding unless the reservation is active."""
    state = found["State"]
    if state == "active":
        return
    wait = "nodes launch into it only once it is active"
    if state == "scheduled" and found.get("StartDate"):
        start = aware(found["StartDate"])
        out.add(
            "warn",
            f"is scheduled: it starts {utc(start)}, {_hours(start, at)} from now; {wait}",
            f"plan jobs from {utc(start)}: no node launches into it before",
        )
    elif state in WAITING:
        out.add("warn", f"is {state}: {WAITING[state]}; {wait}", "wait until it is active, then deploy")
    elif state in GONE:
        out.add("fail", f"is {state}: {GONE[state]}; no node can launch into it", _replace(out))
    else:
        out.add("warn", f"is {state}, a state kiln does not know; {wait}", "check it in the EC2 console")


def _end(out: _Findings, found: dict, at: datetime) -> None:
    """Add a finding when the reservation has ended or ends within ENDING_SOON."""
    if found.get("EndDate") is None or found["State"] in GONE:
        return
    end = aware(found["EndDate"])
    if end <= at:
        out.add("fail", f"ended {utc(end)}; no node can launch into it", _replace(out))
    elif end - at <= ENDING_SOON:
        block = found.get("ReservationType") == "capacity-block"
        reclaim = " (EC2 starts terminating its instances 30 minutes before)" if block else ""
        out.add(
            "warn",
            f"ends {utc(end)}, {_hours(end, at)} from now{reclaim}: a training run still going then loses its nodes",
            "checkpoint and finish before then, or extend it (a block: buy an extension)",
        )


def _replace(out: _Findings) -> str:
    """Return the remedy for a reservation nodes can no longer launch into."""
    return (
        f"set capacity.reservation_id of {out.roles} to a current reservation, "
        "or set capacity.type to on-demand and drop reservation_id"
    )


def _summary(out: _Findings, nodes: list[NodeNeed], found: dict) -> str:
    """Return what an active, matching reservation holds and until when."""
    kind = found.get("ReservationType", "default")
    end = found.get("EndDate")
    until = f"until {utc(end)}" if end else "with no end date"
    free = "" if kind == "capacity-block" else f", {found['AvailableInstanceCount']} free"
    need = sum(node.count for node in nodes)
    return (
        f"{LABEL.get(kind, kind)} of {found['TotalInstanceCount']} × {found['InstanceType']} in "
        f"{found['AvailabilityZone']}, active {until}{free}; {out.roles} {out.need} at most {need}"
    )


def _reservation(plan: Plan, aws: AwsClients, reservation_id: str, nodes: list[NodeNeed]) -> list[Finding]:
    """Return one ok finding for a reservation that serves NODES as they are, else one finding per problem."""
    out = _Findings(reservation_id, nodes)
    found = describe(aws, reservation_id)
    if found is None:
        out.add(
            "fail",
            f"does not exist in {plan.region} or is not this account's (nor shared with it)",
            f"correct capacity.reservation_id of {out.roles}, or set region to the reservation's region",
        )
        return out.found
    at = aware(now())
    _match_types(out, nodes, found)
    _match_zone(out, plan, found)
    _match_platform(out, found)
    _count(out, nodes, found)
    _state(out, found, at)
    _end(out, found, at)
    if not out.found:
        return [Finding(check=NAME, status="ok", subject=out.subject, message=_summary(out, nodes, found))]
    return out.found


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return the findings about every capacity reservation or block the plan's groups launch into."""
    by_id = reserved_nodes(plan)
    if not by_id:
        return [
            Finding(
                check=NAME,
                status="ok",
                subject="capacity",
                message="no group launches into a capacity reservation or block",
            )
        ]
    return [finding for rid, nodes in by_id.items() for finding in _reservation(plan, aws, rid, nodes)]


CHECK = Check(name=NAME, about="capacity reservations and blocks", run=check)
