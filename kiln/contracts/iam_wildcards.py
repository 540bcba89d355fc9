"""Wildcards in the policies of a CloudFormation template, and the reviews kiln records beside them.

Standard library only: the constructs record reviews at synthesis (kiln.constructs.review) and
`kiln report` reads templates back, so both name a grant the same way, as cdk-nag does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A resource's metadata key for its reviewed wildcard grants: [{"reason": str, "pairs": [[action, resource]]}].
REVIEW_METADATA = "kiln:wildcards"

# The resource types whose properties hold policy documents, and where.
_ROLE_POLICIES = "Policies"
POLICY_PROPERTIES = {
    "AWS::IAM::Policy": ("PolicyDocument",),
    "AWS::IAM::ManagedPolicy": ("PolicyDocument",),
    "AWS::IAM::Role": (_ROLE_POLICIES,),
    "AWS::IAM::User": (_ROLE_POLICIES,),
    "AWS::IAM::Group": (_ROLE_POLICIES,),
    "AWS::S3::BucketPolicy": ("PolicyDocument",),
    "AWS::KMS::Key": ("KeyPolicy",),
    "AWS::SQS::QueuePolicy": ("PolicyDocument",),
    "AWS::SNS::TopicPolicy": ("PolicyDocument",),
}


def nag_text(value: Any) -> str:
    """Render a resolved CloudFormation value the way cdk-nag names it in finding ids."""
    if isinstance(value, str):
        # IAM policy variables (${aws:userid}) read as <aws:userid> in finding ids.
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", value)
    if isinstance(value, dict) and len(value) == 1:
        ((kind, body),) = value.items()
        if kind == "Ref":
            return f"<{body}>"
        if kind == "Fn::GetAtt":
            return f"<{body[0]}.{body[1]}>" if isinstance(body, list) else f"<{body}>"
        if kind == "Fn::Join":
            return str(body[0]).join(nag_text(part) for part in body[1])
        if kind == "Fn::ImportValue":
            return nag_text(body)
        if kind == "Fn::Sub":
            template, variables = (body, {}) if isinstance(body, str) else body
            return re.sub(
                r"\$\{([^}]+)\}", lambda m: nag_text(variables[m[1]]) if m[1] in variables else f"<{m[1]}>", template
            )
    raise ValueError(f"cannot name {value!r} as cdk-nag does")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard_pairs(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return every (action, resource) an Allow statement of DOCUMENT grants where either holds a '*'.

    A statement without Resource (a trust policy) grants on no resource; Deny statements grant nothing.
    """
    pairs = []
    for statement in _listed(document.get("Statement", [])):
        if statement.get("Effect") != "Allow":
            continue
        for action in _listed(statement.get("Action", [])):
            for resource in _listed(statement.get("Resource", [])):
                text = nag_text(resource)
                if "*" in action or "*" in text:
                    pairs.append((action, text))
    return pairs


def _property(properties: Mapping[str, Any], name: str) -> Any:
    """Return property NAME as a template spells it (PolicyDocument) or as a CDK L1 holds it (policyDocument)."""
    return properties.get(name, properties.get(name[0].lower() + name[1:]))


def policy_documents(resource_type: str, properties: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return the policy documents of a resource of RESOURCE_TYPE with (resolved) PROPERTIES."""
    documents: list[Mapping[str, Any]] = []
    for name in POLICY_PROPERTIES.get(resource_type, ()):
        value = _property(properties, name)
        if name == _ROLE_POLICIES:
            documents.extend(_property(policy, "PolicyDocument") for policy in value or [])
        elif isinstance(value, Mapping):
            documents.append(value)
    return documents


def review_metadata(reviews: Mapping[str, Sequence[tuple[str, str]]]) -> list[dict[str, Any]]:
    """Return the REVIEW_METADATA value for REVIEWS: each reason with the (action, resource) pairs it covers."""
    return [{"reason": reason, "pairs": [list(pair) for pair in pairs]} for reason, pairs in reviews.items()]


@dataclass(frozen=True)
class WildcardUse:
    """One wildcard grant in a template: where it is, what it grants, and its recorded reason (None: unreviewed)."""

    logical_id: str
    resource_type: str
    action: str
    resource: str
    reason: str | None


def template_wildcards(template: Mapping[str, Any]) -> Iterator[WildcardUse]:
    """Yield every wildcard (action, resource) pair the policies of TEMPLATE grant, with its recorded reason."""
    for logical_id, resource in template.get("Resources", {}).items():
        kind = resource.get("Type", "")
        reasons = {
            tuple(pair): review["reason"]
            for review in resource.get("Metadata", {}).get(REVIEW_METADATA, [])
            for pair in review["pairs"]
        }
        seen = set()
        for document in policy_documents(kind, resource.get("Properties", {})):
            for pair in wildcard_pairs(document):
                if pair not in seen:
                    seen.add(pair)
                    yield WildcardUse(logical_id, kind, *pair, reasons.get(pair))


# An AWS-managed policy's ARN, as CloudFormation joins it: its actions are AWS's, so kiln reviews the attachment.
_AWS_MANAGED = ":iam::aws:policy/"
# cdk-nag's id of the finding an AWS-managed policy raises, whose acknowledgement carries the attachment's reason.
_NAG_MANAGED = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"
MANAGED_POLICY_RESOURCE = "(the actions AWS's policy grants)"


def managed_policy_uses(template: Mapping[str, Any]) -> Iterator[WildcardUse]:
    """Yield every AWS-managed policy TEMPLATE's roles, users and groups attach, as a use of `policy/NAME` with the
    reason cdk-nag's acknowledgement, or kiln's review metadata (CDK's handler roles), records for it (None:
    unreviewed)."""
    for logical_id, resource in template.get("Resources", {}).items():
        arns = _listed(_property(resource.get("Properties", {}), "ManagedPolicyArns") or [])
        suppressed = {
            rule.get("id", "").removeprefix("AwsSolutions::"): rule.get("reason")
            for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
        }
        reviewed = {
            pair[0]: review["reason"]
            for review in resource.get("Metadata", {}).get(REVIEW_METADATA, [])
            for pair in review["pairs"]
            if pair[1] == MANAGED_POLICY_RESOURCE
        }
        for arn in arns:
            text = nag_text(arn)
            if _AWS_MANAGED not in text:
                continue
            name = text.split(_AWS_MANAGED, 1)[1]
            reason = suppressed.get(_NAG_MANAGED.format(name=name)) or reviewed.get(f"policy/{name}")
            yield WildcardUse(logical_id, resource.get("Type", ""), f"policy/{name}", MANAGED_POLICY_RESOURCE, reason)
