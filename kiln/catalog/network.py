"""Where a cluster's network lies: its second availability zone, and the VPC endpoints its nodes reach AWS through.

Both the stacks (what the VPC gets) and preflight (what an account has) read these, so the rules live here once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kiln.catalog.names import AVAILABILITY_ZONE
from kiln.catalog.platforms import service_fact

GATEWAY = "Gateway"
# The S3 gateway endpoint every VPC kiln creates has, whatever else it gets.
S3 = "s3"


def zone_in_region(zone: str, region: str) -> bool:
    """Return True when ZONE names an availability zone of REGION (Local and Wavelength Zones do not)."""
    return AVAILABILITY_ZONE.fullmatch(zone) is not None and zone[:-1] == region


def second_zone(first: str, zones: Iterable[str]) -> str | None:
    """Return the first of ZONES (in the order the account lists them) that is another availability zone of FIRST's
    region, or None when the account has no other.

    CDK's availability-zones lookup and preflight both list DescribeAvailabilityZones' available zones in its order;
    both pick with this, so preflight judges the zone a deploy takes.
    """
    region = first[:-1]
    return next((zone for zone in zones if zone != first and zone_in_region(zone, region)), None)


def zones_context_file() -> str:
    """Return the file the CDK CLI records its lookups in, in the directory it runs in (cdk.context.json)."""
    return str(service_fact("cdk", "availability_zones_context").value["file"])


def zones_context_key(account: str, region: str) -> str:
    """Return the context key under which the CDK CLI records the AZs of ACCOUNT's REGION."""
    template = service_fact("cdk", "availability_zones_context").value["key"]
    return template.format(account=account, region=region)


def zones_fallback_key() -> str:
    """Return the context key whose AZ list CDK takes for a stack without an account (else Fn::GetAZs)."""
    return str(service_fact("cdk", "availability_zones_context").value["fallback_key"])


def recorded_zones(context: Mapping[str, Any], region: str) -> dict[str, list[str]]:
    """Return the AZ lists CONTEXT (a cdk.context.json's content) records for REGION, by account."""
    prefix, _, suffix = zones_context_key("\0", region).partition("\0")
    found = {}
    for key, value in context.items():
        if key.startswith(prefix) and key.endswith(suffix) and isinstance(value, list):
            account = key[len(prefix) : len(key) - len(suffix)]
            if account and ":" not in account and all(isinstance(zone, str) for zone in value):
                found[account] = list(value)
    return found


def eks_control_plane_zones() -> int:
    """Return how many availability zones an EKS cluster's subnets must span."""
    return int(service_fact("eks", "control_plane_zones").value["zones"])


def eks_refused_zone_ids(region: str) -> tuple[str, ...]:
    """Return the zone IDs of REGION where EKS refuses a cluster's subnets (none for a region AWS does not list)."""
    return tuple(service_fact("eks", "control_plane_zones").value["refused_zone_ids"].get(region, ()))


def eks_zones_source() -> str:
    """Return the AWS page that lists the zones EKS refuses."""
    return service_fact("eks", "control_plane_zones").source


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """A VPC endpoint of an AWS service: NAME as CDK and kiln call it (ssm, ecr.api), gateway or interface."""

    name: str
    service_name_template: str
    gateway: bool
    source: str

    def service_name(self, region: str) -> str:
        """Return the endpoint service's name in REGION, e.g. com.amazonaws.us-east-1.ssm."""
        return self.service_name_template.format(region=region)


def endpoint(name: str) -> Endpoint:
    """Return the endpoint of service NAME (platforms.json, services.vpc_endpoints)."""
    fact = service_fact("vpc_endpoints", name)
    return Endpoint(
        name=name,
        service_name_template=fact.value["service_name"],
        gateway=fact.value["type"] == GATEWAY,
        source=fact.source,
    )


def node_endpoints(platform: str, *, prometheus_agent: bool = False) -> tuple[Endpoint, ...]:
    """Return the endpoints the nodes of PLATFORM (kiln.contracts.backends's name: hyperpod-eks for HyperPod with EKS)
    call, S3's gateway aside.

    PROMETHEUS_AGENT: a Prometheus agent on the nodes remote-writes metrics to a Prometheus workspace (the Slurm
    platforms' with observability.prometheus; EKS's go through AWS's managed collector, which needs nothing of the
    nodes' network).
    """
    needs = service_fact("vpc_endpoints", "node_needs").value
    names = list(needs[platform])
    if prometheus_agent:
        names += needs["prometheus-agent"]
    return tuple(endpoint(name) for name in dict.fromkeys(names))
