"""Prop validation shared by the constructs: one line naming the props or construct, the field, what was received
and what is allowed; deploy-time tokens are skipped."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

import aws_cdk as cdk
from constructs import Construct

from kiln.catalog.names import NODE_GROUP_NAME_RULE, is_node_group_name
from kiln.contracts.errors import InputError

# An ARN's partition as the props' ARN checks match it: aws, aws-cn, aws-us-gov, ...
ARN_PARTITION = r"aws[a-z-]*"


def unresolved(value: Any) -> bool:
    """Return True when VALUE is a CDK token only known at deploy time."""
    return cdk.Token.is_unresolved(value)


class PropError(InputError, ValueError):
    """A construct prop outside what is allowed: one line naming the props or construct, the field, what was received
    and what is allowed. A ValueError too, as CDK props refuse."""


def owner_name(owner: object) -> str:
    """Return how an error names OWNER: a construct by its class and path (PcsCluster[Compute/Cluster]), a string as
    it is, anything else (props) by its class (PcsClusterProps)."""
    if isinstance(owner, Construct):
        return f"{type(owner).__name__}[{owner.node.path}]"
    if isinstance(owner, str):
        return owner
    return type(owner).__name__


def field_name(owner: object, name: str) -> str:
    """Return field NAME of OWNER as errors name it: PcsClusterProps.size."""
    return f"{owner_name(owner)}.{name}"


def require_in(owner: object, name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise PropError naming OWNER's field NAME unless VALUE (when resolved) is one of ALLOWED."""
    allowed = list(allowed)
    if not unresolved(value) and value not in allowed:
        raise PropError(f"{field_name(owner, name)}: got {value!r}; allowed: {', '.join(map(str, allowed))}")


def require(owner: object, condition: bool, name: str, value: Any, allowed: str) -> None:
    """Raise PropError naming OWNER's field NAME, what was received and what is allowed, unless CONDITION."""
    if not condition:
        refuse(owner, name, value, allowed)


def refuse(owner: object, name: str, value: Any, allowed: str) -> NoReturn:
    """Raise PropError naming OWNER's field NAME, what was received and what is allowed: require's refusal, for a
    check that narrows a type (a value that must be given) where it stands."""
    raise PropError(f"{field_name(owner, name)}: got {value!r}; allowed: {allowed}")


def require_node_group(owner: object, name: str, min_count: int, max_count: int, *, what: str = "name") -> None:
    """Check a node group's name (Slurm partition rules, called WHAT in errors) and its scaling bounds."""
    require(owner, is_node_group_name(name), what, name, NODE_GROUP_NAME_RULE)
    require(
        owner,
        0 <= min_count <= max_count and max_count >= 1,
        "min_count/max_count",
        (min_count, max_count),
        "0 <= min_count <= max_count, max_count >= 1",
    )
