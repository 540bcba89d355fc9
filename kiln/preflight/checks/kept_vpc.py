"""Is the VPC a spec adopts again (network.kept) the one this cluster's network stack kept on `cdk destroy`?

kiln builds an internet gateway, a NAT gateway and routes into a kept VPC, so it must never take someone else's VPC
for one. kiln:cluster alone proves nothing (anyone who may tag a VPC may set it); the proof is what CloudFormation
tagged the VPC and subnet with when it made them, under the reserved aws: prefix no user can set: the cluster's
network stack by name, one stack id for both, the logical ids kiln's network stack gives them, and that stack
deleted (so no live stack holds them). The same proof lets `kiln leftovers` print the lines that adopt a kept VPC.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.catalog.platforms import service_fact
from kiln.contracts.environment import stack_name
from kiln.contracts.kept_network import KEPT_SUBNET_LOGICAL_ID, KEPT_VPC_LOGICAL_ID, NETWORK_PART
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.checks.bucket import stack_alive
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "kept_vpc"


@dataclass(frozen=True)
class StackTags:
    """The keys of the tags CloudFormation sets on what it creates (platforms.json, vpc.stack_level_tags)."""

    stack_name: str
    stack_id: str
    logical_id: str


def stack_tags() -> StackTags:
    keys = service_fact("vpc", "stack_level_tags").value
    return StackTags(stack_name=keys["stack_name"], stack_id=keys["stack_id"], logical_id=keys["logical_id"])


def _owner_problems(plan: Plan, what: str, tags: dict[str, str], logical_id: str) -> list[str]:
    """Return why TAGS do not prove WHAT kept by the plan's network stack as LOGICAL_ID (none: they do)."""
    keys, network = stack_tags(), stack_name(plan.name, NETWORK_PART)
    problems = []
    if tags.get(keys.stack_name) != network:
        found = tags.get(keys.stack_name)
        made = f"stack {found}" if found else "no CloudFormation stack (no aws:cloudformation tags)"
        problems.append(f"{what} was made by {made}, not by {network}")
    elif tags.get(keys.logical_id) != logical_id:
        problems.append(f"{what} is {network}'s {tags.get(keys.logical_id)}, not its {logical_id}")
    if plan.environment is not None:
        if tags.get(TAG_ENVIRONMENT) != plan.environment:
            problems.append(f"{what} is not tagged {TAG_ENVIRONMENT}={plan.environment}")
    elif tags.get(TAG_CLUSTER) != plan.name or TAG_ENVIRONMENT in tags:
        problems.append(f"{what} is not tagged {TAG_CLUSTER}={plan.name} alone (no {TAG_ENVIRONMENT})")
    return problems


def kept_problems(plan: Plan, aws: AwsClients, vpc: dict, subnet: dict) -> list[str]:
    """Return why VPC and SUBNET (EC2's descriptions) are not the VPC and compute subnet the plan's network stack
    kept on its deletion; none: they are, and a deploy may build their egress again."""
    vpc_tags = {t["Key"]: t["Value"] for t in vpc.get("Tags", [])}
    subnet_tags = {t["Key"]: t["Value"] for t in subnet.get("Tags", [])}
    problems = _owner_problems(plan, f"VPC {vpc['VpcId']}", vpc_tags, KEPT_VPC_LOGICAL_ID)
    problems += _owner_problems(plan, f"subnet {subnet['SubnetId']}", subnet_tags, KEPT_SUBNET_LOGICAL_ID)
    if problems:
        return problems
    keys = stack_tags()
    stack_id = vpc_tags.get(keys.stack_id)
    if subnet["VpcId"] != vpc["VpcId"] or subnet_tags.get(keys.stack_id) != stack_id:
        return [f"subnet {subnet['SubnetId']} was not made with VPC {vpc['VpcId']} by the same stack"]
    if stack_id is None or stack_alive(aws, stack_id):
        return [f"VPC {vpc['VpcId']} belongs to a live stack ({stack_id or 'its id untagged'}), not kept by a destroy"]
    return []


def adopt_lines(vpc_id: str, subnet_id: str, cidr: str, plan: Plan) -> str:
    """Return the spec lines that adopt the kept VPC VPC_ID (of CIDR) and its compute subnet SUBNET_ID."""
    lines = f"network: {{vpc_id: {vpc_id}, private_subnet_id: {subnet_id}, kept: true"
    if cidr != plan.vpc_cidr:
        lines += f", vpc_cidr: {cidr}"
    return lines + "}"


def _describe(aws: AwsClients, plan: Plan) -> tuple[dict | None, dict | None]:
    """Return EC2's descriptions of the plan's VPC and subnet, None for one that does not exist."""

    def one(call: str, key: str, ids: str, ident: str) -> dict | None:
        try:
            found = getattr(aws.ec2, call)(**{ids: [ident]})[key]
        except ClientError as error:
            if error_code(error).endswith(".NotFound"):
                return None
            raise
        return found[0] if found else None

    vpc = one("describe_vpcs", "Vpcs", "VpcIds", plan.vpc_id)
    subnet = one("describe_subnets", "Subnets", "SubnetIds", plan.subnet_id)
    return vpc, subnet


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """With network.kept: prove the VPC and subnet kept by this cluster's network stack, in the spec's AZ and CIDR."""
    if not plan.kept:
        return [Finding(check=NAME, status="ok", subject="network", message="the spec adopts no kept VPC")]
    subject = f"VPC {plan.vpc_id}"
    remedy = (
        "adopt only what `kiln leftovers --spec` lists as this cluster's kept VPC, or drop network.kept, vpc_id and "
        "private_subnet_id so that kiln makes a new VPC"
    )
    vpc, subnet = _describe(aws, plan)
    if vpc is None or subnet is None:
        missing = f"VPC {plan.vpc_id}" if vpc is None else f"subnet {plan.subnet_id}"
        return [Finding(check=NAME, status="fail", subject=subject, message=f"{missing} does not exist", remedy=remedy)]
    problems = kept_problems(plan, aws, vpc, subnet)
    if subnet.get("AvailabilityZone") != plan.availability_zone:
        problems.append(f"subnet {plan.subnet_id} is in {subnet.get('AvailabilityZone')}, not {plan.availability_zone}")
    if vpc.get("CidrBlock") != plan.vpc_cidr:
        problems.append(f"the VPC's CIDR is {vpc.get('CidrBlock')}, network.vpc_cidr {plan.vpc_cidr}")
    if problems:
        message = "; ".join(problems) + ": kiln builds an internet gateway and NAT gateway only into its own kept VPC"
        return [Finding(check=NAME, status="fail", subject=subject, message=message, remedy=remedy)]
    message = (
        f"kept by {stack_name(plan.name, NETWORK_PART)} (its CloudFormation tags) with compute subnet "
        f"{plan.subnet_id}; the deploy builds its public subnet, internet gateway, NAT gateway and routes again"
    )
    return [Finding(check=NAME, status="ok", subject=subject, message=message)]


CHECK = Check(name=NAME, about="a kept VPC the spec adopts", run=check)
