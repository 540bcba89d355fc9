"""Prop validation shared by the constructs: clear ValueErrors, tokens skipped."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from kiln.catalog.names import NODE_GROUP_NAME_RULE, is_node_group_name
from kiln.constructs.nag_rules import CheckovSkip, Finding, WildcardGrant, wildcard_action, wildcard_resource


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
        # IAM policy variables (${aws:userid}) read as <aws:userid> in finding ids.
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", value)
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


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard_pairs(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return every (action, resource) an Allow statement of DOCUMENT grants where either holds a '*'."""
    pairs = []
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        for action in _listed(statement.get("Action", [])):
            for resource in _listed(statement.get("Resource", [])):
                text = _nag_text(resource)
                if "*" in action or "*" in text:
                    pairs.append((action, text))
    return pairs


def review_wildcards(
    pairs: Iterable[tuple[str, str]], grants: Sequence[WildcardGrant], places: Mapping[str, str]
) -> tuple[list[Finding], list[tuple[str, str]]]:
    """Match PAIRS against the reviewed GRANTS (their {placeholders} filled from PLACES, as cdk-nag names them).

    Return the IAM5 findings every pair behind which is reviewed, each with its grants' reasons, and the
    pairs no grant covers. A finding shared by a reviewed and an unreviewed pair stays unacknowledged.
    """
    escaped = {name: re.escape(text) for name, text in places.items()}
    compiled = [(grant, re.compile(grant.resource.format(**escaped))) for grant in grants]
    reasons: dict[str, list[str]] = {}
    blocked: set[str] = set()
    unreviewed = []
    for action, resource in pairs:
        findings = [wildcard_action(action)] * ("*" in action) + [wildcard_resource(resource)] * ("*" in resource)
        grant = next((g for g, pattern in compiled if action in g.actions and pattern.fullmatch(resource)), None)
        if grant is None:
            unreviewed.append((action, resource))
            blocked.update(findings)
            continue
        for finding in findings:
            reasons.setdefault(finding, [])
            if grant.reason not in reasons[finding]:
                reasons[finding].append(grant.reason)
    accepted = [Finding(rule, " ".join(texts)) for rule, texts in reasons.items() if rule not in blocked]
    return accepted, unreviewed


@jsii.implements(cdk.IAspect)
class _AcknowledgeReviewedWildcards:
    """At synthesis, acknowledge the IAM5 findings of the policies under a construct that reviewed grants cover."""

    def __init__(self, grants: Sequence[WildcardGrant], places: Mapping[str, Any]) -> None:
        self.grants, self.places = tuple(grants), dict(places)

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, iam.CfnPolicy):
            return
        stack = cdk.Stack.of(node)
        places = {name: _nag_text(stack.resolve(value)) for name, value in self.places.items()}
        accepted, unreviewed = review_wildcards(
            wildcard_pairs(stack.resolve(node.policy_document)), self.grants, places
        )
        acknowledge(node, *accepted)
        for action, resource in unreviewed:
            # cdk-nag then fails synthesis on the finding; this says where the review belongs.
            cdk.Annotations.of(node).add_error(
                f"unreviewed IAM wildcard: {action} on {resource}; add a WildcardGrant with its reason to "
                "kiln/constructs/nag_rules.py, or narrow the grant"
            )


def acknowledge_wildcards(construct: IConstruct, grants: Sequence[WildcardGrant], **places: Any) -> None:
    """Acknowledge the IAM5 wildcard findings under CONSTRUCT that the reviewed GRANTS cover, pair by pair.

    PLACES fill the grants' {placeholders} with the values they stand for (a bucket's ARN, a function's
    ARN), resolved at synthesis, since cdk-nag names findings by logical ids known only then. A wildcard
    (action, resource) pair no grant covers is never acknowledged: cdk-nag fails synthesis on it.
    """
    require(bool(grants), "grants", grants, "at least one reviewed WildcardGrant")
    cdk.Aspects.of(construct).add(_AcknowledgeReviewedWildcards(grants, places))


def skip_checkov(resource: cdk.CfnResource, *skips: CheckovSkip) -> None:
    """Record on RESOURCE the checkov checks it does not meet (entries of kiln.constructs.nag_rules), with reasons."""
    for skip in skips:
        require(bool(skip.reason.strip()), "reason", skip.reason, "a non-empty reason for every checkov skip")
    metadata = resource.get_metadata("checkov") or {}
    listed = list(metadata.get("skip", []))
    listed += [{"id": skip.check, "comment": skip.reason} for skip in skips]
    resource.add_metadata("checkov", {"skip": listed})
