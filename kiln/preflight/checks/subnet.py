"""Has the cluster's private subnet room for every node's addresses, and is an existing one where the spec says?"""

from __future__ import annotations

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.catalog.limits import PRIVATE_SUBNET_EXTRA_BITS, SUBNET_RESERVED_ADDRESSES, VPC_PREFIX_MAX, VPC_PREFIX_MIN
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding, Status
from kiln.preflight.plan import Plan, private_subnet_addresses

NAME = "subnet"
NOT_FOUND = ("InvalidSubnetID.NotFound", "InvalidSubnetID.Malformed")
# Above this share of the free addresses, FSx, pods and later growth may find none left.
HEADROOM = 0.8


def address_breakdown(plan: Plan) -> str:
    """Return how the plan's address need adds up: nodes × type × addresses per node, per kind of node."""
    terms = " + ".join(f"{node.count} × {node.instance_type} × {node.addresses}" for node in plan.nodes)
    return f"{terms} = {plan.address_need} addresses"


def not_counted(plan: Plan) -> str:
    """Return what else takes addresses from the subnet that the need leaves out."""
    others = "FSx and pods take" if "eks" in plan.services else "FSx takes"
    return f"addresses {others} are not counted"


def room(free: int, need: int) -> Status:
    """Return fail when NEED exceeds FREE addresses, warn when it takes more than HEADROOM of them, else ok."""
    if need > free:
        return "fail"
    return "warn" if need > HEADROOM * free else "ok"


def _vpc_prefix(subnet_addresses: int) -> int:
    """Return the prefix length of the new VPC whose private subnet has SUBNET_ADDRESSES usable addresses."""
    subnet_prefix = 32 - (subnet_addresses + SUBNET_RESERVED_ADDRESSES).bit_length() + 1
    return subnet_prefix - PRIVATE_SUBNET_EXTRA_BITS


def _wide_enough(need: int) -> int | None:
    """Return the longest VPC prefix whose private subnet holds NEED within HEADROOM, or None when none does."""
    for prefix in range(VPC_PREFIX_MAX, VPC_PREFIX_MIN - 1, -1):
        if room(private_subnet_addresses(prefix), need) == "ok":
            return prefix
    return None


def _new_vpc_remedy(plan: Plan, status: Status) -> str:
    """Return what to change when a new VPC's private subnet is too small (STATUS fail) or tight (warn)."""
    prefix = _wide_enough(plan.address_need)
    if prefix is None:
        fits = f"at least {plan.address_need} free addresses"
        return f"lower max_count, or use an existing VPC (network.vpc_id, network.private_subnet_id) with {fits}"
    subnet = prefix + PRIVATE_SUBNET_EXTRA_BITS
    more = "" if status == "fail" else " for headroom"
    return (
        f"set network.vpc_cidr to a /{prefix} or wider{more} (the private subnet is the VPC's prefix + "
        f"{PRIVATE_SUBNET_EXTRA_BITS}: a /{subnet} has {private_subnet_addresses(prefix)} addresses)"
    )


def _new_vpc(plan: Plan, free: int) -> Finding:
    """Return whether the private subnet of kiln's new VPC holds the plan's addresses."""
    need = plan.address_need
    prefix = _vpc_prefix(free)
    status = room(free, need)
    message = (
        f"a /{prefix + PRIVATE_SUBNET_EXTRA_BITS} (network.vpc_cidr /{prefix} + {PRIVATE_SUBNET_EXTRA_BITS}) "
        f"has {free} usable addresses; "
        f"the nodes take up to {address_breakdown(plan)} ({not_counted(plan)})"
    )
    remedy = "" if status == "ok" else _new_vpc_remedy(plan, status)
    return Finding(check=NAME, status=status, subject="new VPC's private subnet", message=message, remedy=remedy)


def describe(aws: AwsClients, subnet_id: str) -> dict | None:
    """Return the subnet SUBNET_ID as EC2 describes it, or None when this account cannot see it."""
    try:
        found = aws.ec2.describe_subnets(SubnetIds=[subnet_id])
    except ClientError as error:
        if error_code(error) in NOT_FOUND:
            return None
        raise
    return next(iter(found["Subnets"]), None)


def _placement(plan: Plan, subject: str, subnet: dict) -> list[Finding]:
    """Return a failure for each of the subnet's VPC and AZ that differs from the spec's."""
    findings = []
    if subnet["VpcId"] != plan.vpc_id:
        findings.append(
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"is in {subnet['VpcId']}, not in network.vpc_id {plan.vpc_id}",
                remedy=f"set network.vpc_id to {subnet['VpcId']}, or choose a private subnet of {plan.vpc_id}",
            )
        )
    if subnet["AvailabilityZone"] != plan.availability_zone:
        findings.append(
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"is in {subnet['AvailabilityZone']}, not in availability_zone {plan.availability_zone}",
                remedy=f"set availability_zone to {subnet['AvailabilityZone']}, "
                f"or choose a private subnet in {plan.availability_zone}",
            )
        )
    return findings


def _existing_room(plan: Plan, subject: str, subnet: dict) -> Finding:
    """Return whether the existing subnet's free addresses hold the plan's."""
    free, need = subnet["AvailableIpAddressCount"], plan.address_need
    status = room(free, need)
    message = (
        f"{subnet['CidrBlock']} in {subnet['AvailabilityZone']} has {free} free addresses; "
        f"the nodes take up to {address_breakdown(plan)} ({not_counted(plan)})"
    )
    remedies = {
        "fail": f"choose a network.private_subnet_id with at least {need} free addresses, or lower max_count",
        "warn": "leave headroom: choose a network.private_subnet_id with more free addresses, or lower max_count",
    }
    return Finding(check=NAME, status=status, subject=subject, message=message, remedy=remedies.get(status, ""))


def _existing(plan: Plan, aws: AwsClients, subnet_id: str) -> list[Finding]:
    """Return the findings about the existing subnet SUBNET_ID: where it is, and its room."""
    subject = f"network.private_subnet_id {subnet_id}"
    subnet = describe(aws, subnet_id)
    if subnet is None:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"does not exist in {plan.region} or is not this account's (nor shared with it)",
                remedy="correct network.private_subnet_id: a private subnet of network.vpc_id in availability_zone",
            )
        ]
    return [*_placement(plan, subject, subnet), _existing_room(plan, subject, subnet)]


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return the findings about the cluster's private subnet, existing or new."""
    if plan.subnet_id is not None:
        return _existing(plan, aws, plan.subnet_id)
    if plan.new_subnet_addresses is not None:
        return [_new_vpc(plan, plan.new_subnet_addresses)]
    return [
        Finding(
            check=NAME,
            status="ok",
            subject="subnet",
            message="nothing to check: the plan names neither a subnet nor a new VPC",
        )
    ]


CHECK = Check(name=NAME, about="subnet addresses", run=check)
