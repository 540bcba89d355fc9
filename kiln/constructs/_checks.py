"""Prop validation shared by the constructs: clear ValueErrors, tokens skipped."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from kiln.catalog.names import NODE_GROUP_NAME_RULE, is_node_group_name
from kiln.constructs.nag_rules import Finding, wildcard_action, wildcard_resource


def unresolved(value: Any) -> bool:
    """Return True when VALUE is a CDK token only known at deploy time."""
    return cdk.Token.is_unresolved(value)


def require_in(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ValueError unless VALUE (when resolved) is one of ALLOWED."""
    allowed = list(allowed)
    if not unresolved(value) and value not in allowed:
        raise ValueError(f"{name}: got {value!r}; allowed: {', '.join(map(str, allowed))}")


def require(condition: bool, name: str, value: Any, allowed: str) -> None:
    """Raise ValueError naming what was received and what is allowed unless CONDITION."""
    if not condition:
        raise ValueError(f"{name}: got {value!r}; allowed: {allowed}")


NAG_PACK = "AwsSolutions"


def require_node_group(name: str, min_count: int, max_count: int, *, what: str = "name") -> None:
    """Check a node group's name (Slurm partition rules, called WHAT in errors) and its scaling bounds."""
    require(is_node_group_name(name), what, name, NODE_GROUP_NAME_RULE)
    require(
        0 <= min_count <= max_count and max_count >= 1,
        "min_count/max_count",
        (min_count, max_count),
        "0 <= min_count <= max_count, max_count >= 1",
    )


def acknowledge(construct: IConstruct, *findings: Finding) -> None:
    """Acknowledge cdk-nag AwsSolutions FINDINGS (entries of kiln.constructs.nag_rules) on CONSTRUCT and below.

    Rule ids look like AwsSolutions-IAM5 or AwsSolutions-IAM5[Resource::*]. The pack prefix is
    added here: without it CDK files the acknowledgement as an annotation and the finding vanishes
    from the validation report instead of being listed as acknowledged.
    """
    for finding in findings:
        require(bool(finding.reason.strip()), "reason", finding.reason, "a non-empty reason for every acknowledgement")
        cdk.Validations.of(construct).acknowledge(
            cdk.Acknowledgment(id=f"{NAG_PACK}::{finding.rule}", reason=finding.reason)
        )


def _nag_text(value: Any) -> str:
    """Render a resolved CloudFormation value the way cdk-nag names it in finding ids."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((kind, body),) = value.items()
        if kind == "Ref":
            return f"<{body}>"
        if kind == "Fn::GetAtt":
            return f"<{body[0]}.{body[1]}>"
        if kind == "Fn::Join":
            return body[0].join(_nag_text(part) for part in body[1])
        if kind == "Fn::ImportValue":
            return _nag_text(body)
        if kind == "Fn::Sub":
            template, variables = (body, {}) if isinstance(body, str) else body
            return re.sub(
                r"\$\{([^}]+)\}", lambda m: _nag_text(variables[m[1]]) if m[1] in variables else f"<{m[1]}>", template
            )
    raise ValueError(f"cannot name {value!r} as cdk-nag does")


@jsii.implements(cdk.IAspect)
class _AcknowledgeWildcards:
    """At synthesis, acknowledge each wildcard finding of the policies under a construct."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, iam.CfnPolicy):
            return
        document = cdk.Stack.of(node).resolve(node.policy_document)
        findings: list[str] = []
        for statement in document.get("Statement", []):
            actions = statement.get("Action", [])
            resources = statement.get("Resource", [])
            for action in [actions] if isinstance(actions, str) else actions:
                if "*" in action:
                    findings.append(wildcard_action(action))
            for resource in [resources] if not isinstance(resources, list) else resources:
                text = _nag_text(resource)
                if "*" in text:
                    findings.append(wildcard_resource(text))
        acknowledge(node, *(Finding(rule, self.reason) for rule in dict.fromkeys(findings)))


def acknowledge_wildcards(construct: IConstruct, reason: str) -> None:
    """Acknowledge every IAM5 wildcard finding of the policies under CONSTRUCT with REASON.

    cdk-nag v3 wants each finding acknowledged by its exact id, and those ids hold logical ids
    and regions known only at synthesis; they are read from the policies themselves.
    """
    require(bool(reason.strip()), "reason", reason, "a non-empty reason")
    cdk.Aspects.of(construct).add(_AcknowledgeWildcards(reason))
