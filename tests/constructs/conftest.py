"""Helpers for construct tests: a fresh app per module, logical ids taken from constructs."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import IConstruct

from kiln.constructs import NodeBootstrap
from kiln.stacks import new_app

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
        availability_zones=["us-east-1a"],
        private_subnet_ids=["subnet-0123456789abcdef0"],
    )


def plain_bootstrap(st: cdk.Stack, entry_point: str = "pcs-user-data.sh") -> NodeBootstrap:
    """Return a bundle as any platform team could stage it: a zip in a bucket, no kiln renderer involved."""
    bucket = s3.Bucket.from_bucket_name(st, "Bundles", "kiln-bundles-111111111111")
    return NodeBootstrap(bucket=bucket, object_key="bundles/node.zip", entry_point=entry_point)
