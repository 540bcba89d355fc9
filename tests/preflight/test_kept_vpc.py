"""The kept_vpc check and `kiln leftovers`' adopt lines: only the VPC this cluster's network stack kept is adopted
again (network.kept), proven by the tags CloudFormation set on it, never by tags anyone may set (issue 46, item 7)."""

from __future__ import annotations

import pytest

from kiln.contracts.kept_network import KEPT_SUBNET_LOGICAL_ID, KEPT_VPC_LOGICAL_ID
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT
from kiln.preflight.checks import bucket, egress, kept_vpc, leftovers
from kiln.preflight.checks.kept_vpc import stack_tags
from kiln.preflight.run import run_check
from tests.support.fake_aws import REGION
from tests.support.preflight import AZ, make_plan

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

DELETED_STACK = f"arn:aws:cloudformation:{REGION}:123456789012:stack/pf-network/0a1b2c3d-0000-0000-0000-000000000000"


def _cfn_tags(logical_id: str, stack: str = "pf-network", stack_id: str = DELETED_STACK, **more: str) -> dict:
    keys = stack_tags()
    return {keys.stack_name: stack, keys.stack_id: stack_id, keys.logical_id: logical_id, TAG_CLUSTER: "pf", **more}


def _kept(aws, vpc_tags: dict, subnet_tags: dict, cidr: str = "10.0.0.0/16", zone: str = AZ) -> tuple[str, str]:
    """Make a VPC and compute subnet with VPC_TAGS and SUBNET_TAGS in the moto account, as a destroy leaves them."""

    def spec(kind: str, tags: dict) -> list[dict]:
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]

    vpc = aws.ec2.create_vpc(CidrBlock=cidr, TagSpecifications=spec("vpc", vpc_tags))["Vpc"]["VpcId"]
    private = cidr.replace(".0.0/16", ".64.0/18")
    subnet = aws.ec2.create_subnet(
        VpcId=vpc, CidrBlock=private, AvailabilityZone=zone, TagSpecifications=spec("subnet", subnet_tags)
    )["Subnet"]["SubnetId"]
    return vpc, subnet


def _ours(aws) -> tuple[str, str]:
    return _kept(aws, _cfn_tags(KEPT_VPC_LOGICAL_ID), _cfn_tags(KEPT_SUBNET_LOGICAL_ID))


def _adopting(vpc: str, subnet: str, **network) -> dict:
    return {"network": {"vpc_id": vpc, "private_subnet_id": subnet, "kept": True, **network}}


def test_the_tag_keys_are_cloudformations_and_the_bucket_check_reads_the_same() -> None:
    keys = stack_tags()
    assert (keys.stack_name, keys.stack_id) == (bucket.STACK_TAG, bucket.STACK_ID_TAG)
    assert keys.logical_id == "aws:cloudformation:logical-id"


def test_the_vpc_its_network_stack_kept_is_adopted(aws) -> None:
    vpc, subnet = _ours(aws)
    (found,) = run_check(kept_vpc.CHECK, make_plan(**_adopting(vpc, subnet)), aws)
    assert found.status == "ok", found.line()
    assert found.message.startswith(f"kept by pf-network (its CloudFormation tags) with compute subnet {subnet}")


@pytest.mark.parametrize(
    ("vpc_tags", "subnet_tags", "why"),
    [
        # Anyone who may tag a VPC may set kiln:cluster: it proves nothing.
        ({TAG_CLUSTER: "pf"}, {TAG_CLUSTER: "pf"}, "was made by no CloudFormation stack"),
        # Another stack's VPC, tagged for this cluster.
        (
            _cfn_tags(KEPT_VPC_LOGICAL_ID, stack="other-network"),
            _cfn_tags(KEPT_SUBNET_LOGICAL_ID, stack="other-network"),
            "was made by stack other-network, not by pf-network",
        ),
        # A VPC of a stack that took the network stack's name, but not kiln's VPC resource.
        (_cfn_tags("MyVpc"), _cfn_tags(KEPT_SUBNET_LOGICAL_ID), "is pf-network's MyVpc, not its Vpc49347EA9"),
        # The subnet of another stack of that name.
        (
            _cfn_tags(KEPT_VPC_LOGICAL_ID),
            _cfn_tags(KEPT_SUBNET_LOGICAL_ID, stack_id=DELETED_STACK.replace("0a1b", "9f9f")),
            "was not made with VPC",
        ),
        # Another cluster's (or an environment's) kept VPC.
        (
            _cfn_tags(KEPT_VPC_LOGICAL_ID, **{TAG_ENVIRONMENT: "pr-1"}),
            _cfn_tags(KEPT_SUBNET_LOGICAL_ID),
            f"is not tagged {TAG_CLUSTER}=pf alone",
        ),
    ],
)
def test_a_vpc_not_proven_kept_by_this_clusters_network_stack_is_refused(
    aws, vpc_tags: dict, subnet_tags: dict, why: str
) -> None:
    vpc, subnet = _kept(aws, vpc_tags, subnet_tags)
    (found,) = run_check(kept_vpc.CHECK, make_plan(**_adopting(vpc, subnet)), aws)
    assert found.status == "fail"
    assert why in found.message
    assert found.message.endswith("kiln builds an internet gateway and NAT gateway only into its own kept VPC")
    assert found.remedy.startswith("adopt only what `kiln leftovers --spec` lists")


def test_a_vpc_a_live_stack_holds_is_not_kept(aws) -> None:
    live = aws.cloudformation.create_stack(
        StackName="pf-network",
        TemplateBody='{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}',
    )["StackId"]
    vpc, subnet = _kept(
        aws, _cfn_tags(KEPT_VPC_LOGICAL_ID, stack_id=live), _cfn_tags(KEPT_SUBNET_LOGICAL_ID, stack_id=live)
    )
    (found,) = run_check(kept_vpc.CHECK, make_plan(**_adopting(vpc, subnet)), aws)
    assert found.status == "fail"
    assert f"belongs to a live stack ({live})" in found.message


def test_another_cidr_or_az_than_the_specs_is_refused(aws) -> None:
    vpc, subnet = _ours(aws)
    (found,) = run_check(kept_vpc.CHECK, make_plan(**_adopting(vpc, subnet, vpc_cidr="10.1.0.0/16")), aws)
    assert found.status == "fail"
    assert "the VPC's CIDR is 10.0.0.0/16, network.vpc_cidr 10.1.0.0/16" in found.message
    elsewhere = _kept(
        aws, _cfn_tags(KEPT_VPC_LOGICAL_ID), _cfn_tags(KEPT_SUBNET_LOGICAL_ID), cidr="10.3.0.0/16", zone=f"{REGION}b"
    )
    (found,) = run_check(kept_vpc.CHECK, make_plan(**_adopting(*elsewhere, vpc_cidr="10.3.0.0/16")), aws)
    assert found.status == "fail"
    assert f"subnet {elsewhere[1]} is in {REGION}b, not {AZ}" in found.message


def test_a_missing_vpc_is_refused(aws) -> None:
    plan = make_plan(**_adopting("vpc-0123456789abcdef0", "subnet-0123456789abcdef0"))
    (found,) = run_check(kept_vpc.CHECK, plan, aws)
    assert (found.status, found.message) == ("fail", "VPC vpc-0123456789abcdef0 does not exist")


def test_a_spec_without_kept_has_nothing_to_prove(aws) -> None:
    (found,) = run_check(kept_vpc.CHECK, make_plan(), aws)
    assert (found.status, found.message) == ("ok", "the spec adopts no kept VPC")


def test_leftovers_print_the_lines_that_adopt_this_clusters_kept_vpc_and_none_for_another(aws) -> None:
    vpc, subnet = _ours(aws)
    planted, planted_subnet = _kept(aws, {TAG_CLUSTER: "pf"}, {TAG_CLUSTER: "pf"}, cidr="10.2.0.0/16")
    found = {item.subject: item for item in leftovers.find_leftovers(make_plan(), aws)}
    lines = f"network: {{vpc_id: {vpc}, private_subnet_id: {subnet}, kept: true}}"
    assert found[f"VPC {vpc}"].attach == lines
    assert found[f"subnet {subnet}"].attach == lines
    assert f"attach it ({lines})" in found[f"VPC {vpc}"].finding().remedy
    assert "unless the spec adopts" in found[f"VPC {vpc}"].redeploy
    for ident in (f"VPC {planted}", f"subnet {planted_subnet}"):
        assert found[ident].attach == ""
        assert "do not prove it this cluster's network stack's" in found[ident].redeploy
    adopted = {item.subject: item for item in leftovers.find_leftovers(make_plan(**_adopting(vpc, subnet)), aws)}
    assert adopted[f"VPC {vpc}"].attached
    assert adopted[f"VPC {vpc}"].redeploy == "this spec deploys into it (network.vpc_id, kept)"


def test_egress_counts_on_the_nat_gateway_the_deploy_builds_into_the_kept_vpc(aws) -> None:
    # The kept compute subnet has no default route until the deploy builds it again: not a failure of the subnet.
    vpc, subnet = _ours(aws)
    (found,) = run_check(egress.CHECK, make_plan(**_adopting(vpc, subnet)), aws)
    assert (found.status, found.subject) == ("ok", "kept VPC")
    assert found.message.startswith(f"the deploy gives kept {vpc} a NAT gateway again")
    # Without kept, the same subnet is someone else's: kiln builds nothing into it, and egress fails.
    attached = run_check(egress.CHECK, make_plan(network={"vpc_id": vpc, "private_subnet_id": subnet}), aws)
    assert "fail" in {f.status for f in attached}
