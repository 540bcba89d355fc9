"""Template hygiene every kiln stack gets: no DependsOn that a Ref or GetAtt already implies, reviewed checkov skips."""

from __future__ import annotations

import json

import aws_cdk as cdk
import jsii
from constructs import IConstruct

from kiln.constructs.review import ReviewHandlerManagedPolicies, SkipReviewedCheckovChecks


def _rendered_dependencies(node: cdk.CfnResource, stack: cdk.Stack) -> set[str]:
    """Return the logical ids CDK will write into NODE's DependsOn (same stack only)."""
    targets: list[IConstruct] = list(node.obtain_dependencies())
    scope: IConstruct | None = node
    while scope is not None and scope is not stack:
        for dependency in scope.node.dependencies:
            targets.extend(c for c in dependency.node.find_all() if isinstance(c, cdk.CfnResource))
        scope = scope.node.scope
    return {
        stack.get_logical_id(t)
        for t in targets
        if isinstance(t, cdk.CfnResource) and cdk.Stack.of(t) is stack and t is not node
    }


@jsii.implements(cdk.IAspect)
class DropRedundantDependsOn:
    """Drop DependsOn entries the resource already references (cfn-lint W3005).

    CDK's own provider handlers (default-SG restriction, auto-delete, bucket deployment)
    both reference and depend on their role; the reference alone orders them.
    """

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource):
            return
        stack = cdk.Stack.of(node)
        properties = json.dumps(stack.resolve(node._cfn_properties))
        depends = _rendered_dependencies(node, stack)
        implied = {i for i in depends if f'{{"Ref": "{i}"}}' in properties or f'"Fn::GetAtt": ["{i}"' in properties}
        if implied:
            remaining = sorted(depends - implied)
            if remaining:
                node.add_override("DependsOn", remaining)
            else:
                node.add_deletion_override("DependsOn")


def add_template_aspects(stack: cdk.Stack) -> None:
    """Add the aspects every kiln stack gets: DependsOn without redundancy, the reviewed checkov skips, and the
    reviewed AWS-managed policies of CDK's handler roles."""
    cdk.Aspects.of(stack).add(DropRedundantDependsOn())
    cdk.Aspects.of(stack).add(SkipReviewedCheckovChecks())
    cdk.Aspects.of(stack).add(ReviewHandlerManagedPolicies())
