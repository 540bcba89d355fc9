"""Are the new VPC's two availability zones this account's, and does EKS take both for its control plane?"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.catalog.network import eks_refused_zone_ids, eks_zones_source, second_zone, zone_in_region
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "zones"
# CDK's availability-zones lookup keeps the zones in this state, in DescribeAvailabilityZones' order.
AVAILABLE = "available"
# What a VPC's AZ is called when the spec pins none (CDK takes the region's first two).
UNPINNED = "AZ the VPC takes without availability_zone"


def _setting(field: str) -> str:
    """Return the spec setting that moves the AZ called FIELD."""
    if field == "availability_zone":
        return "availability_zone"
    if field.startswith(UNPINNED):
        return "availability_zone and network.second_availability_zone"
    return "network.second_availability_zone"


@dataclass(frozen=True, kw_only=True)
class Zone:
    """One availability zone of the account: its name (which differs per account) and ID (which does not)."""

    name: str
    zone_id: str


def account_zones(aws: AwsClients) -> list[Zone]:
    """Return the region's available availability zones in the order the account lists them (as CDK's lookup does),
    Local and Wavelength Zones left out."""
    zones = aws.ec2.describe_availability_zones()["AvailabilityZones"]
    return [
        Zone(name=zone["ZoneName"], zone_id=zone["ZoneId"])
        for zone in zones
        if zone.get("State") == AVAILABLE and zone_in_region(zone["ZoneName"], aws.region)
    ]


def _named(zones: list[Zone]) -> str:
    return ", ".join(f"{zone.name} ({zone.zone_id})" for zone in zones)


def _pair(plan: Plan, zones: list[Zone]) -> tuple[list[tuple[str, str, Zone | None]], str]:
    """Return the VPC's zones as (field, name, zone or None when the account has no such zone), and how the second
    was chosen."""
    by_name = {zone.name: zone for zone in zones}
    first = plan.availability_zone
    if first is None:
        # Without availability_zone, CDK takes the region's first two AZs.
        labels = (UNPINNED, f"{UNPINNED} too")
        pair = [(label, zone.name, zone) for label, zone in zip(labels, zones[:2], strict=False)]
        return pair, "the region's first two, which the VPC takes without availability_zone"
    pair = [("availability_zone", first, by_name.get(first))]
    if plan.second_availability_zone is not None:
        second = plan.second_availability_zone
        pair.append(("network.second_availability_zone", second, by_name.get(second)))
        return pair, "the second as network.second_availability_zone names it"
    if not plan.kubernetes:
        # kiln.stacks.zones.wants_zone_lookup: only an EKS control plane takes a second AZ from the account's list.
        return pair, "the VPC lies in this AZ alone"
    looked_up = second_zone(first, [zone.name for zone in zones])
    if looked_up is not None:
        pair.append(("second AZ", looked_up, by_name[looked_up]))
    return pair, "the second is the first other AZ the account lists, which CDK's lookup gives the VPC"


def _refused(plan: Plan, field: str, name: str, zone: Zone, zones: list[Zone], taken: set[str]) -> Finding:
    """Return the failure of ZONE, where EKS refuses a control plane."""
    refused = set(eks_refused_zone_ids(plan.region))
    others = [z.name for z in zones if z.zone_id not in refused and z.name not in taken]
    where = _setting(field)
    move = (
        " (compute, FSx and EFA move with availability_zone: the offerings check says which AZs offer the types)"
        if where.startswith("availability_zone")
        else ""
    )
    choices = f"one of {', '.join(others)}" if others else f"another region's AZ: {plan.region} has no other"
    return Finding(
        check=NAME,
        status="fail",
        subject=f"{field} {name}",
        message=f"is {zone.zone_id} in this account, where EKS refuses a cluster's subnets ({eks_zones_source()})",
        remedy=f"set {where} to {choices}{move}",
    )


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return whether the VPC kiln creates gets two AZs of this account (one where nothing needs a second), and on
    EKS that EKS takes both."""
    if plan.vpc_id is not None:
        return [
            Finding(
                check=NAME,
                status="ok",
                subject="zones",
                message="nothing to check: the cluster uses existing vpc_id's subnets (EKS is not offered there)",
            )
        ]
    zones = account_zones(aws)
    pair, how = _pair(plan, zones)
    all_names = ", ".join(zone.name for zone in zones) or "none"
    findings = [
        Finding(
            check=NAME,
            status="fail",
            subject=f"{field} {name}",
            message=f"is not an available AZ of {plan.region} in this account (its AZs: {all_names})",
            remedy=f"set {_setting(field)} to one of {all_names}",
        )
        for field, name, zone in pair
        if zone is None
    ]
    present = [(field, name, zone) for field, name, zone in pair if zone is not None]
    if plan.kubernetes and len(pair) < 2:
        findings.append(
            Finding(
                check=NAME,
                status="fail",
                subject="second AZ",
                message=f"this account lists no second available AZ of {plan.region}, and EKS's control plane "
                "needs subnets in two",
                remedy="choose a region where the account has two AZs (set region and availability_zone)",
            )
        )
    if plan.kubernetes:
        refused = set(eks_refused_zone_ids(plan.region))
        taken = {name for _, name, _ in pair}
        findings += [
            _refused(plan, field, name, zone, zones, taken) for field, name, zone in present if zone.zone_id in refused
        ]
    if findings:
        return findings
    needs = "EKS takes both for its control plane" if plan.kubernetes else "nothing needs a second AZ"
    if len(present) == 1:
        # Only a cluster without EKS gets here with one AZ (EKS without a second fails above).
        message = f"{_named([present[0][2]])}: the VPC lies in this AZ alone (nothing needs a second AZ)"
    else:
        message = f"{_named([zone for _, _, zone in present])}: {how}; {needs}"
    return [Finding(check=NAME, status="ok", subject="availability zones", message=message)]


CHECK = Check(name=NAME, about="availability zones", run=check)
