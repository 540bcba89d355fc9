"""Does EC2 offer every instance type the cluster launches in its availability zone?"""

from __future__ import annotations

from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "offerings"
# Local Zones and Wavelength Zones (opted in) answer DescribeAvailabilityZones too; kiln places nodes in AZs only.
ZONE_TYPE = "availability-zone"


def region_zones(aws: AwsClients) -> list[str]:
    """Return the names of the region's availability zones, sorted."""
    zones = aws.ec2.describe_availability_zones()["AvailabilityZones"]
    return sorted(zone["ZoneName"] for zone in zones if zone.get("ZoneType", ZONE_TYPE) == ZONE_TYPE)


def offering_zones(aws: AwsClients, types: tuple[str, ...], zones: list[str]) -> dict[str, set[str]]:
    """Return, for each of TYPES, the ZONES that offer it."""
    offered: dict[str, set[str]] = {name: set() for name in types}
    pages = aws.ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "location", "Values": zones}, {"Name": "instance-type", "Values": list(types)}],
    )
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            offered.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return offered


def _roles(plan: Plan, name: str) -> str:
    """Return the roles of the EC2 nodes of type NAME, comma separated."""
    return ", ".join(node.role for node in plan.nodes if node.instance_type == name and not node.hyperpod)


def _in_zone(plan: Plan, name: str, where: set[str]) -> Finding:
    """Return whether the plan's AZ offers NAME, which the zones WHERE offer."""
    zone = plan.availability_zone
    subject = f"{name} ({_roles(plan, name)})"
    if zone in where:
        return Finding(check=NAME, status="ok", subject=subject, message=f"offered in {zone}")
    if where:
        remedy = (
            f"set availability_zone to one of {', '.join(sorted(where))}, which offer it (with an existing VPC, "
            "network.private_subnet_id must lie there too), or choose another instance type"
        )
    else:
        remedy = f"no AZ of {plan.region} offers it: choose another region (set region) or another instance type"
    return Finding(check=NAME, status="fail", subject=subject, message=f"not offered in {zone}", remedy=remedy)


def _common(types: tuple[str, ...], zones: list[str], offered: dict[str, set[str]]) -> list[str]:
    """Return the ZONES that offer every one of TYPES, in order."""
    return [zone for zone in zones if all(zone in offered[name] for name in types)]


def _where_each(types: tuple[str, ...], offered: dict[str, set[str]]) -> str:
    """Return each of TYPES with the zones that offer it, for a message."""
    return "; ".join(f"{name}: {', '.join(sorted(offered[name])) or 'none'}" for name in types)


def _unknown_zone(plan: Plan, types: tuple[str, ...], zones: list[str], offered: dict[str, set[str]]) -> Finding:
    """Return the failure of an availability_zone the region does not have."""
    common = _common(types, zones, offered)
    choices = f"one that offers {', '.join(types)}: {', '.join(common)}" if common else f"one of {', '.join(zones)}"
    return Finding(
        check=NAME,
        status="fail",
        subject=f"availability_zone {plan.availability_zone}",
        message=f"is not an availability zone of {plan.region} (its zones: {', '.join(zones)})",
        remedy=f"set availability_zone to {choices}",
    )


def _unset_zone(plan: Plan, types: tuple[str, ...], zones: list[str], offered: dict[str, set[str]]) -> Finding:
    """Return which AZs could hold the whole cluster when the spec names none."""
    common = _common(types, zones, offered)
    subject = "availability_zone (unset)"
    if not common:
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message=f"no AZ of {plan.region} offers every instance type ({_where_each(types, offered)})",
            remedy="choose instance types one AZ offers together, or another region (set region)",
        )
    return Finding(
        check=NAME,
        status="warn",
        subject=subject,
        message=f"availability_zone is not set: the new VPC takes the region's first AZ; "
        f"{', '.join(common)} offer {', '.join(types)}",
        remedy=f"set availability_zone to one of: {', '.join(common)}",
    )


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return one finding per EC2 instance type in the plan's AZ, or one about the AZ itself."""
    types = plan.ec2_types
    if not types:
        return [
            Finding(
                check=NAME,
                status="ok",
                subject="instance types",
                message="HyperPod runs every node in SageMaker's account: no EC2 offering applies",
            )
        ]
    zones = region_zones(aws)
    offered = offering_zones(aws, types, zones)
    if plan.availability_zone is None:
        return [_unset_zone(plan, types, zones, offered)]
    if plan.availability_zone not in zones:
        return [_unknown_zone(plan, types, zones, offered)]
    return [_in_zone(plan, name, offered[name]) for name in types]


CHECK = Check(name=NAME, about="instance types offered in the AZ", run=check)
