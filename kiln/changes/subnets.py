"""Subnets a deploy would create on the addresses of a subnet the same deploy drops: EC2 refuses the create and the
deploy rolls back.

No subnet of a VPC may overlap another's CIDR (platforms.json, vpc.subnet_cidrs_disjoint), and CloudFormation deletes
what a template drops only after it has created what the template adds. kiln meets this when a live network stack's
own VPC is adopted as a kept one (network.kept): the VPC and its subnets leave the template while the public subnet is
built again on the same addresses. network.kept is for a deploy after `cdk destroy`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiln.catalog.platforms import service_fact

SUBNET = "AWS::EC2::Subnet"


@dataclass(frozen=True)
class SubnetCollision:
    """A subnet the deploy creates whose CIDR overlaps a subnet the deploy drops from the same stack."""

    stack: str
    logical_id: str
    cidr: str
    dropped: str
    dropped_cidr: str

    def line(self) -> str:
        fact = service_fact("vpc", "subnet_cidrs_disjoint")
        return (
            f"{self.stack} {self.logical_id} ({SUBNET}, {self.cidr}) would be created while {self.dropped} "
            f"({self.dropped_cidr}), which the deploy drops, still holds those addresses: CloudFormation deletes a "
            f"dropped resource only after creating the new ones, and EC2 takes no overlapping subnet ({fact.source}), "
            "so the deploy rolls back; network.kept adopts a VPC after `cdk destroy` of its network stack, never the "
            "live stack's own: destroy the cluster's stacks first (a PERSISTENT_2 file system keeps the VPC), then "
            "deploy with network.kept"
        )


def _cidrs(template: Mapping[str, Any]) -> dict[str, ipaddress.IPv4Network]:
    """Return the literal IPv4 CIDR of each subnet of TEMPLATE (a CIDR resolved at deploy time is not judged)."""
    found = {}
    for logical_id, resource in template.get("Resources", {}).items():
        cidr = resource.get("Properties", {}).get("CidrBlock") if resource.get("Type") == SUBNET else None
        if isinstance(cidr, str):
            try:
                found[logical_id] = ipaddress.IPv4Network(cidr, strict=False)
            except ValueError:
                continue
    return found


def subnet_collisions(
    before_templates: Mapping[str, Mapping[str, Any]], after_templates: Mapping[str, Mapping[str, Any]]
) -> tuple[SubnetCollision, ...]:
    """Return each subnet AFTER_TEMPLATES add to a stack whose CIDR overlaps one they drop from it."""
    found = []
    for stack, after in after_templates.items():
        if stack not in before_templates:
            continue
        old, new = _cidrs(before_templates[stack]), _cidrs(after)
        dropped = {lid: cidr for lid, cidr in old.items() if lid not in after.get("Resources", {})}
        for logical_id, cidr in new.items():
            if logical_id in old:
                continue
            for holder, held in dropped.items():
                if cidr.overlaps(held):
                    found.append(SubnetCollision(stack, logical_id, str(cidr), holder, str(held)))
    return tuple(found)
