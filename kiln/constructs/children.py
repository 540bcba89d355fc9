"""A construct's neighbours in the tree, typed: the L1 (Cfn) resource behind an L2, for the property overrides,
attributes and metadata the L2 does not offer; a named child, or the parent, of a construct CDK makes inside one of its
own."""

from __future__ import annotations

from typing import TypeVar

import aws_cdk as cdk
from constructs import IConstruct

from kiln.contracts.errors import Failure

CfnT = TypeVar("CfnT", bound=cdk.CfnElement)
ChildT = TypeVar("ChildT", bound=IConstruct)


class UnexpectedTree(Failure, TypeError):
    """The construct tree is not what kiln builds or CDK makes (a construct without the L1, child or parent kiln
    reads): kiln's own failure, one line naming the path; a TypeError too, as the lookup's was."""


def l1_of(construct: IConstruct | None, kind: type[CfnT]) -> CfnT:
    """Return CONSTRUCT's default child, the L1 of class KIND it wraps; raise UnexpectedTree when it has none of that
    class (a construct imported from attributes has no L1 at all) or is absent (an optional L2 property, such as a
    function's role)."""
    if construct is None:
        raise UnexpectedTree(f"no construct to find a {kind.__name__} behind")
    child = construct.node.default_child
    if not isinstance(child, kind):
        raise UnexpectedTree(f"{construct.node.path} has no {kind.__name__} behind it (found {type(child).__name__})")
    return child


def child_of(construct: IConstruct, child_id: str, kind: type[ChildT]) -> ChildT:
    """Return CONSTRUCT's child CHILD_ID, of class KIND; raise UnexpectedTree when it has no such child of that
    class."""
    child = construct.node.try_find_child(child_id)
    if not isinstance(child, kind):
        found = type(child).__name__
        raise UnexpectedTree(f"{construct.node.path} has no {kind.__name__} {child_id!r} (found {found})")
    return child


def parent_of(construct: IConstruct, kind: type[ChildT]) -> ChildT:
    """Return CONSTRUCT's scope, of class KIND; raise UnexpectedTree when it has none of that class."""
    parent = construct.node.scope
    if not isinstance(parent, kind):
        raise UnexpectedTree(f"{construct.node.path} is not inside a {kind.__name__} (found {type(parent).__name__})")
    return parent
