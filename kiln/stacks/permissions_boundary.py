"""The permissions boundary every IAM role of a cluster's stacks carries: the spec's iam.permissions_boundary, or in a
CI environment kiln's own (kiln.contracts.permissions_boundary, made by `kiln ci identity`), which the CloudFormation
execution policies require of every role they let CloudFormation create."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from kiln.contracts.permissions_boundary import BOUNDARY_NAME, boundary_arn
from kiln.spec import ClusterSpec
from kiln.stacks.ci_mode import CiEnvironment


def boundary_name(spec: ClusterSpec, ci: CiEnvironment | None) -> str | None:
    """Return the boundary (policy name or ARN) SPEC's roles carry: the spec's, else kiln's in a CI environment."""
    if spec.iam.permissions_boundary is not None:
        return spec.iam.permissions_boundary
    return BOUNDARY_NAME if ci is not None else None


def boundary_policy_arn(name: str) -> str:
    """Return the ARN of the boundary NAME (a name is a policy of the stack's own account)."""
    return boundary_arn(name, partition=cdk.Aws.PARTITION, account=cdk.Aws.ACCOUNT_ID)


def apply_boundary(stack: cdk.Stack, name: str) -> None:
    """Give every IAM role and user under STACK the boundary NAME: CDK's aspect reaches the L2 roles, L1 CfnRoles,
    custom resource provider and bucket deployment handler roles and those of nested stacks (any CfnResource of type
    AWS::IAM::Role or AWS::IAM::User)."""
    policy = iam.ManagedPolicy.from_managed_policy_arn(stack, "KilnPermissionsBoundary", boundary_policy_arn(name))
    iam.PermissionsBoundary.of(stack).apply(policy)


@jsii.implements(cdk.IAspect)
class TagPlainRoles:
    """Give roles CDK's tag aspect cannot reach (custom resource providers' plain CfnResource roles) TAGS as their
    Tags property: the execution policies let CloudFormation create a role only with a kiln:environment tag in the
    request (aws:RequestTag), which the template then says outright rather than leaving to stack tag propagation."""

    def __init__(self, tags: Mapping[str, str]) -> None:
        self.tags = [{"Key": key, "Value": value} for key, value in sorted(tags.items())]

    def visit(self, node: IConstruct) -> None:
        if (
            isinstance(node, cdk.CfnResource)
            and node.cfn_resource_type == "AWS::IAM::Role"
            and not cdk.TagManager.is_taggable(node)
        ):
            node.add_property_override("Tags", self.tags)


def tag_plain_roles(stack: cdk.Stack, tags: Mapping[str, str]) -> None:
    """Tag every role under STACK that CDK's tag aspect skips with TAGS (see TagPlainRoles)."""
    cdk.Aspects.of(stack).add(TagPlainRoles(tags))
