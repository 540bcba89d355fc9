"""Can the nodes in an existing private subnet reach what they need: a default route to a NAT gateway (or another
egress), or else the VPC endpoints of the AWS services they call?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kiln.catalog.network import S3, Endpoint, endpoint
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "egress"
DEFAULT_ROUTE = "0.0.0.0/0"
# Route targets that carry a private subnet's traffic beyond the VPC (an internet gateway does not: the nodes have
# no public addresses). The key is the field of an EC2 Route.
EGRESS_TARGETS = {
    "NatGatewayId": "NAT gateway",
    "TransitGatewayId": "transit gateway",
    "NetworkInterfaceId": "network interface (a NAT instance or firewall)",
    "InstanceId": "instance (a NAT instance)",
    "VpcPeeringConnectionId": "VPC peering connection",
    "LocalGatewayId": "local gateway",
    "CoreNetworkArn": "Cloud WAN core network",
}
AVAILABLE = "available"


@dataclass(frozen=True, kw_only=True)
class Egress:
    """Where the subnet's default route goes: TARGET (a route's field: id), or None with WHY."""

    table_id: str
    target: str | None
    why: str = ""


def route_table(aws: AwsClients, vpc_id: str, subnet_id: str) -> dict | None:
    """Return the route table of SUBNET_ID: its own, else its VPC's main table; None when it has neither."""
    own = aws.ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])
    if own["RouteTables"]:
        return own["RouteTables"][0]
    main = aws.ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "association.main", "Values": ["true"]}]
    )
    return next(iter(main["RouteTables"]), None)


def default_route(table: dict) -> Egress:
    """Return where TABLE's default route takes the nodes' traffic."""
    table_id = table["RouteTableId"]
    routes = [route for route in table.get("Routes", []) if route.get("DestinationCidrBlock") == DEFAULT_ROUTE]
    if not routes:
        return Egress(table_id=table_id, target=None, why=f"{table_id} has no default route ({DEFAULT_ROUTE})")
    route = routes[0]
    if route.get("State") == "blackhole":
        return Egress(
            table_id=table_id, target=None, why=f"{table_id}'s default route is a blackhole (its target is gone)"
        )
    for field, what in EGRESS_TARGETS.items():
        if route.get(field):
            return Egress(table_id=table_id, target=f"{what} {route[field]}")
    gateway = route.get("GatewayId", "")
    if gateway.startswith("vgw-"):
        return Egress(table_id=table_id, target=f"virtual private gateway {gateway}")
    if gateway.startswith("igw-"):
        why = f"{table_id} sends {DEFAULT_ROUTE} to internet gateway {gateway}, no use to nodes without public IPs"
        return Egress(table_id=table_id, target=None, why=why)
    return Egress(table_id=table_id, target=None, why=f"{table_id}'s default route has no target kiln knows")


def vpc_endpoints(aws: AwsClients, vpc_id: str) -> list[dict]:
    """Return the VPC's endpoints that are available."""
    pages = aws.ec2.get_paginator("describe_vpc_endpoints").paginate(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    return [e for page in pages for e in page["VpcEndpoints"] if str(e.get("State", "")).lower() == AVAILABLE]


def _serves(found: dict[str, Any], wanted: Endpoint, region: str, table_id: str) -> bool:
    """Return True when endpoint FOUND carries the nodes' calls to WANTED from a subnet routed by TABLE_ID."""
    if found.get("ServiceName") != wanted.service_name(region):
        return False
    kind = str(found.get("VpcEndpointType", "")).lower()
    if kind == "gateway":
        return table_id in found.get("RouteTableIds", [])
    # An interface endpoint serves the whole VPC, but only under the service's own name with private DNS.
    return kind == "interface" and bool(found.get("PrivateDnsEnabled"))


def _missing_line(plan: Plan, wanted: Endpoint, table_id: str, found: list[dict]) -> Finding:
    """Return the failure of WANTED's endpoint, which the nodes lack."""
    service = wanted.service_name(plan.region)
    same = [e for e in found if e.get("ServiceName") == service]
    if wanted.gateway:
        message = f"no {service} gateway endpoint routes {table_id}"
        remedy = f"add {table_id} to a {service} gateway endpoint, or a default route to a NAT gateway"
    elif same:
        message = f"{same[0].get('VpcEndpointId')} for {service} has private DNS off, so the nodes' calls bypass it"
        remedy = "enable its private DNS names, or add a default route to a NAT gateway"
    else:
        message = f"no {service} interface endpoint (with private DNS) in {plan.vpc_id}"
        remedy = f"create one ({wanted.source}), or add a default route to a NAT gateway"
    return Finding(check=NAME, status="fail", subject=f"endpoint {wanted.name}", message=message, remedy=remedy)


def _new_vpc(plan: Plan) -> Finding:
    endpoints = " and interface endpoints for the nodes' services" if plan.interface_endpoints else ""
    return Finding(
        check=NAME,
        status="ok",
        subject="new VPC",
        message=f"kiln's VPC routes its private subnets to a NAT gateway, with an S3 gateway endpoint{endpoints}",
    )


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return how the nodes in the existing private subnet reach the internet and AWS: one line when a default route
    carries it all, else one line per thing missing."""
    if plan.vpc_id is None or plan.subnet_id is None:
        return [_new_vpc(plan)]
    if plan.kept:
        message = (
            f"the deploy gives kept {plan.vpc_id} a NAT gateway again and routes {plan.subnet_id}'s {DEFAULT_ROUTE} "
            "to it, with an S3 gateway endpoint (the kept_vpc check proves the VPC this cluster's)"
        )
        return [Finding(check=NAME, status="ok", subject="kept VPC", message=message)]
    subject = f"network.private_subnet_id {plan.subnet_id}"
    table = route_table(aws, plan.vpc_id, plan.subnet_id)
    if table is None:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"has no route table in {plan.vpc_id} (neither its own nor the VPC's main table)",
                remedy="check network.private_subnet_id and network.vpc_id (the subnet check says where it is)",
            )
        ]
    egress = default_route(table)
    if egress.target is not None:
        message = f"{egress.table_id} routes {DEFAULT_ROUTE} to {egress.target}: the nodes reach AWS and the internet"
        return [Finding(check=NAME, status="ok", subject=subject, message=message)]
    found = vpc_endpoints(aws, plan.vpc_id)
    wanted = [endpoint(S3), *(endpoint(name) for name in plan.node_endpoints)]
    missing = [w for w in wanted if not any(_serves(e, w, plan.region, egress.table_id) for e in found)]
    have = [w.name for w in wanted if w not in missing]
    findings = [_missing_line(plan, w, egress.table_id, found) for w in missing]
    findings.append(
        Finding(
            check=NAME,
            # With every endpoint there, AWS is reachable: what is left is the internet the bootstrap downloads from.
            status="warn" if not missing else "fail",
            subject=subject,
            message=f"{egress.why}: the nodes reach only what VPC endpoints serve"
            + (f" (here: {', '.join(have)})" if have else " (here: none of theirs)")
            + ", and not the internet their bootstrap downloads installers from",
            remedy=f"add a route {DEFAULT_ROUTE} to a NAT gateway in {egress.table_id}, or bake an image that needs "
            "no downloads",
        )
    )
    return findings


CHECK = Check(name=NAME, about="subnet egress", run=check)
