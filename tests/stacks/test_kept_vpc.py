"""Deploying the same spec again after `cdk destroy` kept its VPC: network.kept deploys into the kept VPC and compute
subnet and builds again what the destroy removed, so repeated destroys and deploys take no new VPC (issue 46, item 7).

Before: the first deploy's network stack (a new VPC, kept with its compute subnet for a PERSISTENT_2 file system).
After: the redeploy's, adopting them. Today's code had no network.kept: every redeploy made a new VPC.
"""

from __future__ import annotations

import copy
import functools
import json
from collections import Counter

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from kiln.changes import dangling_references, plan, subnet_collisions
from kiln.constructs import ExistingNetwork, TrainingVpc, TrainingVpcProps
from kiln.constructs._checks import PropError
from kiln.contracts.kept_network import KEPT_SUBNET_LOGICAL_ID, KEPT_VPC_LOGICAL_ID
from kiln.spec import parse_spec
from kiln.stacks.app import environment, new_app
from kiln.stacks.network import NetworkStack
from tests.support.specs import MINIMAL_SPEC, spec_problems

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

VPC, SUBNET = "vpc-0123456789abcdef0", "subnet-0123456789abcdef0"
# What kiln builds into a VPC it made or keeps, and never into anyone else's.
EGRESS = (
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::InternetGateway",
    "AWS::EC2::VPCGatewayAttachment",
    "AWS::EC2::EIP",
    "AWS::EC2::NatGateway",
    "AWS::EC2::RouteTable",
    "AWS::EC2::Route",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::VPCEndpoint",
    "AWS::EC2::FlowLog",
)
KEPT = {"vpc_id": VPC, "private_subnet_id": SUBNET, "kept": True}
# What CDK's VPC adds to restrict the default security group (the custom resource, its provider's function and
# role); an imported VPC has no such custom resource.
RESTRICT_DEFAULT_SG = ("VpcRestrictDefaultSecurityGroup", "CustomVpcRestrictDefaultSG")


@functools.cache
def _template(network: str) -> dict:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["network"] = json.loads(network)
    spec = parse_spec(data)
    stack = NetworkStack(new_app(), "t-network", spec=spec, env=environment(spec))
    return Template.from_stack(stack).to_json()


def _of_type(template: dict, kind: str) -> dict[str, dict]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def _one(template: dict, kind: str) -> tuple[str, dict]:
    (found,) = _of_type(template, kind).items()
    return found


def test_the_first_deploy_keeps_the_vpc_and_subnet_under_the_logical_ids_preflight_proves() -> None:
    before = _template("{}")["Resources"]
    assert before[KEPT_VPC_LOGICAL_ID]["Type"] == "AWS::EC2::VPC"
    assert before[KEPT_SUBNET_LOGICAL_ID]["Type"] == "AWS::EC2::Subnet"
    kept = {
        name for name, r in before.items() if r.get("DeletionPolicy") == "Retain" and r["Type"].startswith("AWS::EC2")
    }
    assert kept == {KEPT_VPC_LOGICAL_ID, KEPT_SUBNET_LOGICAL_ID}


def test_the_redeploy_into_the_kept_vpc_makes_no_vpc_and_builds_again_what_the_destroy_removed() -> None:
    before, after = _template("{}"), _template(json.dumps(KEPT))
    assert not _of_type(after, "AWS::EC2::VPC")
    assert Counter(r["Type"] for r in after["Resources"].values())["AWS::EC2::Subnet"] == 1
    # What the destroy deleted of the first deploy's network is what the redeploy makes, type for type.
    removed = Counter(
        r["Type"]
        for name, r in before["Resources"].items()
        if r.get("DeletionPolicy") != "Retain" and not name.startswith(RESTRICT_DEFAULT_SG)
    )
    made = Counter(r["Type"] for r in after["Resources"].values() if r.get("DeletionPolicy") != "Retain")
    assert made == removed
    # The public subnet where the first deploy had it, in the compute AZ; the NAT gateway behind the new gateway.
    _, old_public = next((n, r) for n, r in _of_type(before, "AWS::EC2::Subnet").items() if n != KEPT_SUBNET_LOGICAL_ID)
    public_id, public = _one(after, "AWS::EC2::Subnet")
    assert public["Properties"]["CidrBlock"] == old_public["Properties"]["CidrBlock"] == "10.0.0.0/20"
    assert public["Properties"]["AvailabilityZone"] == "us-east-1a"
    assert public["Properties"]["VpcId"] == VPC
    gateway, _ = _one(after, "AWS::EC2::InternetGateway")
    _, attachment = _one(after, "AWS::EC2::VPCGatewayAttachment")
    assert attachment["Properties"] == {"InternetGatewayId": {"Ref": gateway}, "VpcId": VPC}
    nat, nat_gateway = _one(after, "AWS::EC2::NatGateway")
    assert nat_gateway["Properties"]["SubnetId"] == {"Ref": public_id}
    # The kept compute subnet gets a table of its own again: its default route to the NAT, S3's gateway endpoint.
    (association,) = [
        r["Properties"]
        for r in _of_type(after, "AWS::EC2::SubnetRouteTableAssociation").values()
        if r["Properties"]["SubnetId"] == SUBNET
    ]
    table = association["RouteTableId"]
    routes = [r["Properties"] for r in _of_type(after, "AWS::EC2::Route").values()]
    assert {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": {"Ref": nat}, "RouteTableId": table} in routes
    _, endpoint = _one(after, "AWS::EC2::VPCEndpoint")
    assert endpoint["Properties"]["RouteTableIds"] == [table]
    _, flow_log = _one(after, "AWS::EC2::FlowLog")
    assert flow_log["Properties"]["ResourceId"] == VPC
    assert flow_log["Properties"]["ResourceType"] == "VPC"


def test_a_kept_vpc_of_another_cidr_gets_its_public_subnet_at_that_cidrs_start() -> None:
    stack = cdk.Stack(cdk.App(), "s", env=cdk.Environment(account="123456789012", region="us-east-1"))
    existing = ExistingNetwork(
        vpc_id=VPC, private_subnet_id=SUBNET, availability_zone="us-east-1a", cidr="10.4.0.0/20", kept=True
    )
    TrainingVpc(stack, "Vpc", TrainingVpcProps(existing=existing))
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EC2::Subnet", {"CidrBlock": "10.4.0.0/24", "MapPublicIpOnLaunch": False})
    template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_another_existing_vpc_gets_nothing_added() -> None:
    existing = {"vpc_id": VPC, "private_subnet_id": SUBNET, "vpc_cidr": "10.0.0.0/16"}
    made = {r["Type"] for r in _template(json.dumps(existing))["Resources"].values()}
    assert not made & set(EGRESS)


def test_kept_needs_the_vpc_cidr() -> None:
    with pytest.raises(PropError, match="cidr"):
        ExistingNetwork(vpc_id=VPC, private_subnet_id=SUBNET, availability_zone="us-east-1a", kept=True)


def test_validate_refuses_kept_without_the_kept_vpc_in_one_line() -> None:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["network"] = {"kept": True}
    (problem,) = spec_problems(data)
    assert "network.kept: needs vpc_id and private_subnet_id" in problem


def test_validate_refuses_kept_on_eks() -> None:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["compute"] = {"backend": "eks", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}]}
    data["network"] = dict(KEPT)
    assert any("network.vpc_id: EKS needs control-plane subnets" in p for p in spec_problems(data))


def test_the_kept_compute_subnet_and_the_vpc_carry_the_rebuilt_route_table() -> None:
    # Whatever selects the compute subnet (the S3 endpoint, a backend's construct) gets the rebuilt table.
    stack = cdk.Stack(cdk.App(), "s", env=cdk.Environment(account="123456789012", region="us-east-1"))
    existing = ExistingNetwork(
        vpc_id=VPC, private_subnet_id=SUBNET, availability_zone="us-east-1a", cidr="10.0.0.0/16", kept=True
    )
    vpc = TrainingVpc(stack, "Vpc", TrainingVpcProps(existing=existing))
    table = {"Ref": "VpcComputeRouteTableD5AAB85F"}
    assert stack.resolve(vpc.compute_subnet.route_table.route_table_id) == table
    assert [stack.resolve(s.route_table.route_table_id) for s in vpc.vpc.private_subnets] == [table]


def test_kiln_diff_refuses_kept_on_the_live_stacks_own_vpc() -> None:
    # Before: the live network stack with its own VPC. After: the same stack adopting that VPC as a kept one; the
    # new public subnet takes the addresses of the old, which CloudFormation deletes only after the create.
    before, after = _template("{}"), _template(json.dumps(KEPT))
    found = plan({"t-network": before}, {"t-network": after})
    assert found.refused
    (line,) = found.findings()
    assert line.startswith(
        "t-network VpcPublicSubnetF8F743BE (AWS::EC2::Subnet, 10.0.0.0/20) would be created while "
        "VpcPublicSubnet1Subnet4D933E0A (10.0.0.0/20), which the deploy drops, still holds those addresses"
    )
    assert line.endswith(
        "destroy the cluster's stacks first (a PERSISTENT_2 file system keeps the VPC), then deploy with network.kept"
    )


def test_the_redeploy_after_destroy_and_its_updates_deploy_and_its_teardown_keeps_nothing_of_it() -> None:
    after = _template(json.dumps(KEPT))
    # After `cdk destroy` no network stack is deployed: the redeploy creates it.
    created = plan({}, {"t-network": after})
    assert not created.refused and not created.findings()
    # Deploying the same spec again over the adopting stack refuses nothing.
    assert not plan({"t-network": after}, {"t-network": after}).findings()
    # What it made goes with its next destroy; the kept VPC is not the stack's, and nothing kept refers to it.
    assert not dangling_references({"t-network": after})
    kept = {r["Type"] for r in after["Resources"].values() if r.get("DeletionPolicy") == "Retain"}
    assert kept == {"AWS::KMS::Key", "AWS::Logs::LogGroup"}


def _subnet(cidr: str) -> dict:
    return {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": cidr, "VpcId": {"Ref": "Vpc"}}}


def test_only_a_new_subnet_on_a_dropped_subnets_addresses_is_a_collision() -> None:
    before = {"Resources": {"Old": _subnet("10.0.0.0/20"), "Kept": _subnet("10.0.64.0/18")}}
    moved = {"Resources": {"New": _subnet("10.0.8.0/24"), "Kept": _subnet("10.0.64.0/18")}}
    elsewhere = {"Resources": {"New": _subnet("10.0.16.0/20"), "Kept": _subnet("10.0.64.0/18")}}
    (collision,) = subnet_collisions({"s": before}, {"s": moved})
    assert (collision.logical_id, collision.dropped) == ("New", "Old")
    assert not subnet_collisions({"s": before}, {"s": elsewhere})
    assert not subnet_collisions({"s": before}, {"s": before})
    assert not subnet_collisions({}, {"s": moved})
