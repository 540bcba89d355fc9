"""How the reviewed exceptions of kiln.constructs.acknowledgements reach a template.

acknowledge: cdk-nag findings on a construct. acknowledge_wildcards: the aspect that reviews a subtree's IAM wildcard
pairs against WildcardGrants, records their reasons and acknowledges their IAM5 findings. SkipReviewedCheckovChecks
and ReviewHandlerManagedPolicies: the aspects every kiln stack gets (kiln.stacks.tidy.add_template_aspects) for
checkov's skips and the managed policies of CDK's own handler roles.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import jsii
from constructs import IConstruct

from kiln.constructs._checks import require
from kiln.constructs.acknowledgements import (
    CHECKOV_SKIPS,
    MANAGED_POLICY_REVIEWS,
    CheckovSkip,
    Finding,
    ManagedPolicyReview,
    WildcardGrant,
    wildcard_action,
    wildcard_resource,
)
from kiln.contracts.iam_wildcards import (
    MANAGED_POLICY_RESOURCE,
    POLICY_PROPERTIES,
    REVIEW_METADATA,
    nag_text,
    policy_documents,
    review_metadata,
    wildcard_pairs,
)

NAG_PACK = "AwsSolutions"


def acknowledge(construct: IConstruct, *findings: Finding) -> None:
    """Acknowledge cdk-nag AwsSolutions FINDINGS (entries of kiln.constructs.acknowledgements) on CONSTRUCT and below.

    Rule ids look like AwsSolutions-IAM5 or AwsSolutions-IAM5[Resource::*]. The pack prefix is
    added here: without it CDK files the acknowledgement as an annotation and the finding vanishes
    from the validation report instead of being listed as acknowledged.
    """
    for finding in findings:
        require(
            finding,
            bool(finding.reason.strip()),
            "reason",
            finding.reason,
            "a non-empty reason for every acknowledgement",
        )
        cdk.Validations.of(construct).acknowledge(
            cdk.Acknowledgment(id=f"{NAG_PACK}::{finding.rule}", reason=finding.reason)
        )


@dataclass(frozen=True)
class WildcardReview:
    """What the reviewed grants make of a policy's wildcard pairs.

    accepted: the IAM5 findings every pair behind which is reviewed, each with its grants' reasons.
    reviewed: each grant's reason with the pairs it covers.
    unreviewed: the pairs no grant covers.
    """

    accepted: list[Finding]
    reviewed: dict[str, list[tuple[str, str]]]
    unreviewed: list[tuple[str, str]]


def review_wildcards(
    pairs: Iterable[tuple[str, str]], grants: Sequence[WildcardGrant], places: Mapping[str, str]
) -> WildcardReview:
    """Match PAIRS against the reviewed GRANTS (their {placeholders} filled from PLACES, as cdk-nag names them).

    A finding shared by a reviewed and an unreviewed pair stays unaccepted.
    """
    escaped = {name: re.escape(text) for name, text in places.items()}
    compiled = [(grant, re.compile(grant.resource.format(**escaped))) for grant in grants]
    reasons: dict[str, list[str]] = {}
    reviewed: dict[str, list[tuple[str, str]]] = {}
    blocked: set[str] = set()
    unreviewed = []
    for action, resource in pairs:
        findings = [wildcard_action(action)] * ("*" in action) + [wildcard_resource(resource)] * ("*" in resource)
        grant = next((g for g, pattern in compiled if action in g.actions and pattern.fullmatch(resource)), None)
        if grant is None:
            unreviewed.append((action, resource))
            blocked.update(findings)
            continue
        reviewed.setdefault(grant.reason, []).append((action, resource))
        for finding in findings:
            reasons.setdefault(finding, [])
            if grant.reason not in reasons[finding]:
                reasons[finding].append(grant.reason)
    accepted = [Finding(rule, " ".join(texts)) for rule, texts in reasons.items() if rule not in blocked]
    return WildcardReview(accepted=accepted, reviewed=reviewed, unreviewed=unreviewed)


# The policy-bearing types cdk-nag's IAM5 judges; bucket and key policies are reviewed for the report only.
_NAG_JUDGED = {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group"}


@jsii.implements(cdk.IAspect)
class _ReviewWildcards:
    """At synthesis, record the reviewed wildcard grants of every policy under a construct and acknowledge their IAM5.

    The reasons go into the resource's template metadata (kiln.contracts.iam_wildcards.REVIEW_METADATA), where
    `kiln report` reads them back beside the grants themselves.
    """

    def __init__(self, grants: Sequence[WildcardGrant], places: Mapping[str, Any]) -> None:
        self.grants, self.places = tuple(grants), dict(places)

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or node.cfn_resource_type not in POLICY_PROPERTIES:
            return
        stack = cdk.Stack.of(node)
        documents = policy_documents(node.cfn_resource_type, stack.resolve(node._cfn_properties))
        pairs = list(dict.fromkeys(pair for document in documents for pair in wildcard_pairs(document)))
        if not pairs:
            return
        places = {name: nag_text(stack.resolve(value)) for name, value in self.places.items()}
        review = review_wildcards(pairs, self.grants, places)
        if node.cfn_resource_type in _NAG_JUDGED:
            acknowledge(node, *review.accepted)
        recorded = list(node.get_metadata(REVIEW_METADATA) or [])
        node.add_metadata(REVIEW_METADATA, recorded + review_metadata(review.reviewed))
        for action, resource in review.unreviewed:
            # cdk-nag then fails synthesis on an IAM policy's finding, `kiln report` on any policy's; this says
            # where the review belongs.
            cdk.Annotations.of(node).add_error(
                f"unreviewed IAM wildcard: {action} on {resource}; add a WildcardGrant with its reason to "
                "kiln/constructs/acknowledgements.py, or narrow the grant"
            )


def acknowledge_wildcards(construct: IConstruct, grants: Sequence[WildcardGrant], **places: Any) -> None:
    """Review the wildcard grants of every policy under CONSTRUCT against GRANTS, pair by pair.

    Covered pairs get their reasons in the template and their IAM5 findings acknowledged. PLACES fill the
    grants' {placeholders} with the values they stand for (a bucket's ARN, a function's ARN), resolved at
    synthesis, since cdk-nag names findings by logical ids known only then. A wildcard (action, resource)
    pair no grant covers is never acknowledged: cdk-nag fails synthesis on it (IAM policies) and `kiln report`
    fails on it (any policy). Reviewed scopes must not nest: each reviews its whole subtree alone.
    """
    require(construct, bool(grants), "grants", grants, "at least one reviewed WildcardGrant")
    cdk.Aspects.of(construct).add(_ReviewWildcards(grants, places))


def stack_path(resource: IConstruct) -> str:
    """Return RESOURCE's construct path below its stack (Vpc/FlowLogs/Resource)."""
    return resource.node.path.removeprefix(cdk.Stack.of(resource).node.path + "/")


def checkov_skips_for(resource_type: str, path: str, skips: Sequence[CheckovSkip]) -> list[CheckovSkip]:
    """Return the SKIPS that name a resource of RESOURCE_TYPE at PATH (below its stack)."""
    return [s for s in skips if s.resource_type == resource_type and any(re.fullmatch(p, path) for p in s.paths)]


@jsii.implements(cdk.IAspect)
class SkipReviewedCheckovChecks:
    """Write into each resource's checkov metadata the reviewed skips (acknowledgements.CHECKOV_SKIPS) that name it.

    Added to every kiln stack: checkov then reports those checks as skipped, with their reasons.
    """

    def __init__(self, skips: Sequence[CheckovSkip] = CHECKOV_SKIPS) -> None:
        for skip in skips:
            require(skip, bool(skip.reason.strip()), "reason", skip.reason, "a non-empty reason for every checkov skip")
        self.skips = tuple(skips)

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource):
            return
        matched = checkov_skips_for(node.cfn_resource_type, stack_path(node), self.skips)
        if matched:
            listed = list((node.get_metadata("checkov") or {}).get("skip", []))
            listed += [{"id": skip.check, "comment": skip.reason} for skip in matched]
            node.add_metadata("checkov", {"skip": listed})


@jsii.implements(cdk.IAspect)
class ReviewHandlerManagedPolicies:
    """Record, in a CDK handler role's review metadata, the reason for each AWS-managed policy it attaches
    (acknowledgements.MANAGED_POLICY_REVIEWS): cdk-nag raises no finding on these plain CloudFormation roles, and
    `kiln report` fails on an attachment without a reason.

    Added to every kiln stack.
    """

    def __init__(self, reviews: Sequence[ManagedPolicyReview] = MANAGED_POLICY_REVIEWS) -> None:
        self.reviews = tuple(reviews)

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or node.cfn_resource_type != "AWS::IAM::Role":
            return
        path = stack_path(node)
        matched = {
            review.reason: [(f"policy/{review.policy}", MANAGED_POLICY_RESOURCE)]
            for review in self.reviews
            if any(re.fullmatch(pattern, path) for pattern in review.paths)
        }
        if matched:
            recorded = list(node.get_metadata(REVIEW_METADATA) or [])
            node.add_metadata(REVIEW_METADATA, recorded + review_metadata(matched))
