"""Prop validation shared by the constructs: clear ValueErrors, tokens skipped."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import IConstruct


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


def acknowledge(construct: IConstruct, reasons: dict[str, str]) -> None:
    """Acknowledge cdk-nag AwsSolutions findings on CONSTRUCT and below, each with its reason.

    Keys are rule ids such as AwsSolutions-IAM5 or AwsSolutions-IAM5[Resource::*]. The pack
    prefix is added here: without it CDK files the acknowledgement as an annotation and the
    finding vanishes from the validation report instead of being listed as acknowledged.
    """
    for rule, reason in reasons.items():
        require(bool(reason.strip()), "reason", reason, "a non-empty reason for every acknowledgement")
        cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"{NAG_PACK}::{rule}", reason=reason))


def grant_principal(grantee: iam.IGrantable) -> iam.IPrincipal:
    """Return the principal behind GRANTEE."""
    return grantee.grant_principal
