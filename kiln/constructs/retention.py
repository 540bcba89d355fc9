"""Keep a construct's resources, and whatever is added under it later, when their stack is deleted."""

from __future__ import annotations

import aws_cdk as cdk
import jsii
from constructs import IConstruct


@jsii.implements(cdk.IAspect)
class _RetainEveryResource:
    """Give every CloudFormation resource it visits DeletionPolicy and UpdateReplacePolicy Retain."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, cdk.CfnResource):
            node.apply_removal_policy(cdk.RemovalPolicy.RETAIN)


def retain_all(scope: IConstruct) -> None:
    """Keep every resource under SCOPE on stack deletion and on replacement, the ones added after this call too.

    For what a kept resource needs in order to keep working: a security group and every rule added to it (rules
    are resources of their own under the group they open). Both policies, as cfn-lint W3011 asks: a replaced
    resource kept is never one deleted under a kept one.
    """
    cdk.Aspects.of(scope).add(_RetainEveryResource())
