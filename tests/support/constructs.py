"""Builders for construct tests: a fresh stack, logical ids taken from constructs, IAM rows of a template."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from kiln.constructs import (
    ClusterPlacementGroup,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    NodeBootstrap,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.stacks.app import new_app
from kiln.stacks.tidy import add_template_aspects

ENV = cdk.Environment(account="111111111111", region="us-east-1")


def stack(name: str, app: cdk.App | None = None, env: cdk.Environment | None = ENV) -> cdk.Stack:
    """Return a new stack in APP (or a fresh kiln app)."""
    return cdk.Stack(app or new_app(), name, env=env)


def logical_id(construct: IConstruct) -> str:
    """Return the CloudFormation logical id of CONSTRUCT (an L1) as its stack names it."""
    return cdk.Stack.of(construct).get_logical_id(construct)


def ref(construct: IConstruct) -> dict:
    return {"Ref": logical_id(construct)}


def get_att(construct: IConstruct, attribute: str) -> dict:
    return {"Fn::GetAtt": [logical_id(construct), attribute]}


def imported_vpc(st: cdk.Stack) -> ec2.IVpc:
    """Return an existing-VPC stand-in with one private subnet in us-east-1a."""
    return ec2.Vpc.from_vpc_attributes(
        st,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["us-east-1a"],
        private_subnet_ids=["subnet-0123456789abcdef0"],
    )


# The digest a platform team computes of the directory it zipped (kiln.bootstrap.fetch.bundle_digest).
PLAIN_BUNDLE_SHA256 = "5" * 64


def plain_bootstrap(st: cdk.Stack, entry_point: str = "pcs-user-data.sh") -> NodeBootstrap:
    """Return a bundle as any platform team could stage it: a zip in a bucket and its digest, no kiln renderer
    involved."""
    bucket = s3.Bucket.from_bucket_name(st, "Bundles", "kiln-bundles-111111111111")
    return NodeBootstrap(
        bucket=bucket, object_key="bundles/node.zip", entry_point=entry_point, content_sha256=PLAIN_BUNDLE_SHA256
    )


@dataclass(frozen=True)
class EfaNetwork:
    """What an EFA node group stands on: the VPC, the EFA security group and a cluster placement group."""

    net: TrainingVpc
    efa: EfaSecurityGroup
    placement: ClusterPlacementGroup


def efa_network(
    st: cdk.Stack, availability_zone: str, second_availability_zone: str | None = "us-east-1b"
) -> EfaNetwork:
    """Build a training VPC in AVAILABILITY_ZONE (and SECOND_AVAILABILITY_ZONE, which an EKS control plane needs)
    with its EFA security group and placement group in ST."""
    props = TrainingVpcProps(availability_zone=availability_zone, second_availability_zone=second_availability_zone)
    net = TrainingVpc(st, "Vpc", props)
    efa = EfaSecurityGroup(st, "Efa", EfaSecurityGroupProps(vpc=net.vpc))
    return EfaNetwork(net=net, efa=efa, placement=ClusterPlacementGroup(st, "Placement"))


def synth_as_kiln(app: cdk.App, outdir: Path, stacks: list[cdk.Stack]) -> dict[str, Template]:
    """Synthesize APP with cdk-nag on and kiln's tidying, as kiln's stacks are; return each stack's template."""
    for each in stacks:
        # As kiln's stacks do: no DependsOn a Ref or GetAtt already implies (cfn-lint W3005), reviewed checkov skips.
        add_template_aspects(each)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    app.synth()
    return {
        each.stack_name: Template.from_json(json.loads((outdir / f"{each.stack_name}.template.json").read_text()))
        for each in stacks
    }


def policy_rows(document: dict) -> set[tuple[str, str, str | None]]:
    """Every (action, resource, condition) a policy document allows, one row per pair."""
    rows = set()
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        assert not {"NotAction", "NotResource", "NotPrincipal"} & statement.keys()
        condition = json.dumps(statement["Condition"], sort_keys=True) if "Condition" in statement else None
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        rows |= {(a, json.dumps(r, sort_keys=True), condition) for a in actions for r in resources}
    return rows


def role_policies(template: Template, role: IConstruct) -> list[dict]:
    """The documents of the inline policies TEMPLATE attaches to ROLE alone."""
    policies = template.find_resources("AWS::IAM::Policy").values()
    return [p["Properties"]["PolicyDocument"] for p in policies if p["Properties"]["Roles"] == [ref(role)]]


def trust_statements(template: Template, role: IConstruct) -> list[dict]:
    """ROLE's trust policy statements in TEMPLATE."""
    return template.to_json()["Resources"][logical_id(role)]["Properties"]["AssumeRolePolicyDocument"]["Statement"]


def root_devices(template: Template, kind: str = "AWS::EC2::LaunchTemplate") -> dict[str, list[str]]:
    """Return every launch template's (or image recipe's) mapped device names, by logical id."""
    found = {}
    for name, resource in template.find_resources(kind).items():
        props = resource["Properties"]
        mappings = (
            props["LaunchTemplateData"]["BlockDeviceMappings"]
            if "LaunchTemplateData" in props
            else props["BlockDeviceMappings"]
        )
        found[name] = [m["DeviceName"] for m in mappings]
    return found
