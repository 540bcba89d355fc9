"""Do the account's VPC, internet gateway, Elastic IP and NAT gateway quotas leave room for what the deploy makes?

A new VPC takes one of each (its NAT gateway and Elastic IP in the compute AZ); a kept VPC adopted again
(network.kept) all but the VPC; an existing VPC none. Each destroy of a cluster with a PERSISTENT_2 file system keeps
its VPC, so with the default quotas (5 of each) the fifth deploy of the same spec would fail without this line.
Quota codes and defaults: platforms.json, vpc.quotas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from botocore.exceptions import ClientError

from kiln.aws.errors import ACCESS_DENIED, error_code
from kiln.catalog.platforms import service_fact
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.checks.quotas import number, service_quotas_remedy
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "network_quotas"


@dataclass(frozen=True, kw_only=True)
class Quota:
    """One quota the deploy consumes from (platforms.json, vpc.quotas)."""

    key: str
    name: str
    service_code: str
    quota_code: str
    default: float


def quotas() -> dict[str, Quota]:
    return {key: Quota(key=key, **fields) for key, fields in service_fact("vpc", "quotas").value.items()}


def needs(plan: Plan) -> dict[str, int]:
    """Return how many of each quota's resource a deploy of PLAN makes."""
    if plan.vpc_id is not None and not plan.kept:
        return {}
    egress = {"internet_gateways": 1, "elastic_ips": 1, "nat_gateways": 1}
    return egress if plan.kept else {"vpcs": 1, **egress}


def quota_value(aws: AwsClients, quota: Quota) -> tuple[float, str]:
    """Return the quota's value in the account and where it came from: the applied value, AWS's default from
    Service Quotas, or (where Service Quotas refuses the call) the documented default."""
    client, codes = aws.service_quotas, {"ServiceCode": quota.service_code, "QuotaCode": quota.quota_code}
    try:
        try:
            return client.get_service_quota(**codes)["Quota"]["Value"], "applied"
        except ClientError as error:
            if error_code(error) != "NoSuchResourceException":
                raise
        return client.get_aws_default_service_quota(**codes)["Quota"]["Value"], "AWS's default"
    except ClientError as error:
        if error_code(error) not in ACCESS_DENIED:
            raise
        return quota.default, f"documented default: Service Quotas refused the call ({error_code(error)})"


def _in_use(aws: AwsClients, key: str) -> int:
    """Return how many of KEY's resource the region holds (NAT gateways: see _nat_gateways_by_zone)."""
    if key == "vpcs":
        return sum(len(page["Vpcs"]) for page in aws.ec2.get_paginator("describe_vpcs").paginate())
    if key == "internet_gateways":
        pages = aws.ec2.get_paginator("describe_internet_gateways").paginate()
        return sum(len(page["InternetGateways"]) for page in pages)
    return len(aws.ec2.describe_addresses()["Addresses"])


def _nat_gateways_by_zone(aws: AwsClients) -> Counter:
    """Return the NAT gateways the per-AZ quota counts (platforms.json, vpc.nat_gateway_counted_states), by AZ."""
    states = list(service_fact("vpc", "nat_gateway_counted_states").value)
    pages = aws.ec2.get_paginator("describe_nat_gateways").paginate(Filters=[{"Name": "state", "Values": states}])
    subnets = [gateway["SubnetId"] for page in pages for gateway in page["NatGateways"]]
    if not subnets:
        return Counter()
    zone_of = {
        subnet["SubnetId"]: subnet["AvailabilityZone"]
        for page in aws.ec2.get_paginator("describe_subnets").paginate(
            Filters=[{"Name": "subnet-id", "Values": sorted(set(subnets))}]
        )
        for subnet in page["Subnets"]
    }
    return Counter(zone_of.get(subnet, "an unknown AZ") for subnet in subnets)


def _finding(plan: Plan, aws: AwsClients, quota: Quota, need: int, used: int, where: str) -> Finding:
    value, origin = quota_value(aws, quota)
    subject = f"{quota.name}{where}"
    message = f"the deploy makes {need}, {used} in use, quota {number(value)} ({quota.quota_code}, {origin})"
    if used + need <= value:
        return Finding(check=NAME, status="ok", subject=subject, message=message)
    kept = " Each `cdk destroy` of a PERSISTENT_2 cluster keeps its VPC: `kiln leftovers --spec` lists them, with the"
    kept += " lines that deploy into this cluster's kept VPC again (network.kept) and the commands that delete the rest"
    remedy = service_quotas_remedy(used + need, quota.quota_code, quota.service_code, plan.region) + "." + kept
    return Finding(check=NAME, status="fail", subject=subject, message=message, remedy=remedy)


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """One line per quota the deploy takes from: OK with the numbers, or FAIL with what to request."""
    wanted = needs(plan)
    if not wanted:
        return [
            Finding(
                check=NAME,
                status="ok",
                subject="network",
                message=f"the cluster uses existing {plan.vpc_id}: the deploy makes no VPC, gateway or Elastic IP",
            )
        ]
    found = quotas()
    findings = []
    for key, need in wanted.items():
        if key != "nat_gateways":
            findings.append(_finding(plan, aws, found[key], need, _in_use(aws, key), ""))
            continue
        by_zone = _nat_gateways_by_zone(aws)
        zone = plan.availability_zone
        if zone is None:
            # CDK puts the NAT gateway in the first AZ it picks: judge by the fullest.
            zone, used = max(by_zone.items(), key=lambda item: item[1], default=("the fullest AZ", 0))
            where = f" (in {zone}, the fullest AZ: availability_zone is unset)"
        else:
            used, where = by_zone[zone], f" (in {zone})"
        findings.append(_finding(plan, aws, found[key], need, used, where))
    return findings


CHECK = Check(name=NAME, about="VPC, internet gateway, Elastic IP and NAT gateway quotas", run=check)
