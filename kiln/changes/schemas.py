"""What the CloudFormation resource schemas (as cfn-lint ships them) say a resource type fixes at creation."""

from __future__ import annotations

from functools import cache
from typing import Any

from kiln.catalog.platforms import service_fact
from kiln.contracts.errors import Failure

DEFAULT_REGION = "us-east-1"


class SchemasUnavailable(Failure):
    """The resource schemas are not installed: str() is one line saying what to install."""


@cache
def _schema(resource_type: str, region: str) -> dict[str, Any] | None:
    """Return RESOURCE_TYPE's registry schema as cfn-lint ships it; None for a type it does not know (custom)."""
    try:
        from cfnlint.schema import PROVIDER_SCHEMA_MANAGER, ResourceNotFoundError
    except ImportError:
        raise SchemasUnavailable(
            "the CloudFormation resource schemas come with cfn-lint: pip install 'cfn-lint==1.58.0'"
        ) from None
    try:
        return PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
    except ResourceNotFoundError:
        return None


def has_handlers(resource_type: str, region: str = DEFAULT_REGION) -> bool:
    """Return whether RESOURCE_TYPE's schema is a registry type's, with handlers (its create-only list is whole)."""
    schema = _schema(resource_type, region)
    return schema is not None and "handlers" in schema


def documented_replacements() -> dict[str, tuple[str, ...]]:
    """Return, per resource type, the create-only properties AWS documents beyond its schema's list."""
    return {t: tuple(paths) for t, paths in service_fact("cloudformation", "replacement_properties").value.items()}


def create_only(resource_type: str, region: str = DEFAULT_REGION) -> tuple[str, ...]:
    """Return RESOURCE_TYPE's create-only property paths (/properties/...); () for a type without a schema."""
    schema = _schema(resource_type, region)
    if schema is None:
        return ()
    return tuple(schema.get("createOnlyProperties", ())) + documented_replacements().get(resource_type, ())


def name_properties(resource_type: str, region: str = DEFAULT_REGION) -> tuple[str, ...]:
    """Return the properties that give RESOURCE_TYPE a custom name: a primary identifier it takes as input, every part
    of it (a second create of the same identifier fails AlreadyExists, the registry's contract_create_create test:
    https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/contract-tests.html; a route's RouteTableId alone
    is no name, its identifier's CidrBlock is read-only), or a create-only Name / <Type>Name (a PCS node group's
    Name, a HyperPod cluster's ClusterName)."""
    schema = _schema(resource_type, region)
    if schema is None:
        return ()
    read_only = set(schema.get("readOnlyProperties", ()))
    identifier = list(schema.get("primaryIdentifier", ()))
    names = identifier if read_only.isdisjoint(identifier) else []
    own = {"name", f"{resource_type.rsplit('::', 1)[-1].lower()}name"}
    names += [
        p for p in schema.get("createOnlyProperties", ()) if p.count("/") == 2 and p.rsplit("/", 1)[-1].lower() in own
    ]
    return tuple(dict.fromkeys(p for p in names if p.count("/") == 2))


def scope_properties(resource_type: str) -> tuple[str, ...]:
    """Return the create-only properties that place a RESOURCE_TYPE inside another resource, whose names are its own
    (a PCS node group's ClusterId), as platforms.json records them; () where custom names count account-wide."""
    return tuple(service_fact("cloudformation", "name_scopes").value.get(resource_type, ()))
