"""The construct library's API, as aws-cdk's design guidelines ask: props stay private, every grant_* returns the
iam.Grant it made, and a refused prop names the props or construct it belongs to."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template
from constructs import Construct

import kiln.constructs
from kiln.constructs import (
    BootstrapAssets,
    BootstrapAssetsProps,
    DataBucket,
    ImportedPrometheusWorkspace,
    PcsNodeGroup,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
)
from kiln.constructs._checks import PropError
from kiln.contracts.errors import InputError
from tests.support.bootstrap import pcs_config
from tests.support.constructs import logical_id, plain_bootstrap, stack
from tests.support.paths import ROOT

WORKSPACE_ARN = "arn:aws:aps:us-east-1:111111111111:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
WORKSPACE_ENDPOINT = (
    "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef/"
)
KEY_ARN = "arn:aws:kms:us-east-1:111111111111:key/0123abcd-4567-89ef-0123-456789abcdef"


def _imported_workspace(st: cdk.Stack) -> ImportedPrometheusWorkspace:
    key = kms.Key.from_key_arn(st, "ImportedKey", KEY_ARN)
    return PrometheusWorkspace.from_workspace_attributes(
        st, "Imported", workspace_arn=WORKSPACE_ARN, prometheus_endpoint=WORKSPACE_ENDPOINT, key=key
    )


# Each public grant_* of the library: how to make its construct in a stack, and how to call it on a grantee.
GRANTS: dict[str, Callable[[cdk.Stack, iam.IGrantable], iam.Grant]] = {
    "BootstrapAssets.grant_read": lambda st, role: BootstrapAssets(
        st, "Bootstrap", BootstrapAssetsProps(config=pcs_config())
    ).grant_read(role),
    "DataBucket.grant_read": lambda st, role: DataBucket(st, "Read").grant_read(role, "datasets/*"),
    "DataBucket.grant_read_write": lambda st, role: DataBucket(st, "ReadWrite").grant_read_write(role),
    "NodeBootstrap.grant_read": lambda st, role: plain_bootstrap(st).grant_read(role),
    "PrometheusWorkspace.grant_remote_write": lambda st, role: PrometheusWorkspace(
        st, "Write", PrometheusWorkspaceProps(alias="write")
    ).grant_remote_write(role),
    "PrometheusWorkspace.grant_query": lambda st, role: PrometheusWorkspace(
        st, "Query", PrometheusWorkspaceProps(alias="query")
    ).grant_query(role),
    "ImportedPrometheusWorkspace.grant_remote_write": lambda st, role: _imported_workspace(st).grant_remote_write(role),
    "ImportedPrometheusWorkspace.grant_query": lambda st, role: _imported_workspace(st).grant_query(role),
}


def _sorted_actions(statement: dict) -> dict:
    """STATEMENT with its actions in the order CloudFormation templates list them (CDK sorts them)."""
    actions = statement["Action"]
    return statement | {"Action": sorted(actions) if isinstance(actions, list) else actions}


def _library_grants() -> set[str]:
    """Every public grant_* method of a public class the kiln.constructs modules define (inherited ones included)."""
    found = set()
    for info in pkgutil.iter_modules(kiln.constructs.__path__):
        if info.ispkg:  # grafana_code: Lambda code, no constructs
            continue
        module = importlib.import_module(f"kiln.constructs.{info.name}")
        for name, cls in vars(module).items():
            protocol = getattr(cls, "_is_protocol", False)
            if not inspect.isclass(cls) or cls.__module__ != module.__name__ or name.startswith("_") or protocol:
                continue
            found |= {f"{name}.{method}" for method, _ in inspect.getmembers(cls) if method.startswith("grant_")}
    return found


def test_every_grant_of_the_library_is_checked_here() -> None:
    assert _library_grants() == set(GRANTS)


@pytest.mark.parametrize("name", sorted(GRANTS))
def test_each_grant_returns_the_iam_grant_whose_principal_statements_the_grantee_got(name: str) -> None:
    st = stack("Grants")
    role = iam.Role(st, "Grantee", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    grant = GRANTS[name](st, role)
    assert isinstance(grant, iam.Grant) and grant.success
    made = [_sorted_actions(st.resolve(statement.to_statement_json())) for statement in grant.principal_statements]
    template = Template.from_stack(st)
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": logical_id(role.node.default_child)}]
    ]
    assert made and [_sorted_actions(statement) for statement in policy["Statement"]] == made


def test_no_construct_keeps_its_props_public() -> None:
    """Constructs keep what they were given as self._props; their public surface is resources and attributes."""
    public = [
        f"{path.name}:{number}"
        for path in sorted((ROOT / "kiln" / "constructs").glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bself\.props\b", line)
    ]
    assert public == []


def test_a_refused_prop_names_its_props_class() -> None:
    with pytest.raises(PropError) as refused:
        PcsNodeGroup(name="GPU", instance_type="p5.48xlarge")
    message = str(refused.value)
    assert message.startswith("PcsNodeGroup.name: got 'GPU'; allowed: ")
    assert "\n" not in message
    assert isinstance(refused.value, InputError) and isinstance(refused.value, ValueError)


def test_a_refused_prop_found_by_the_construct_names_the_construct_and_its_path() -> None:
    st = stack("Metrics")
    with pytest.raises(PropError) as refused:
        PrometheusWorkspace.from_workspace_attributes(
            st, "Elsewhere", workspace_arn="arn:aws:aps:us-east-1:1:ws", prometheus_endpoint=WORKSPACE_ENDPOINT
        )
    assert str(refused.value).startswith(
        "ImportedPrometheusWorkspace[Metrics/Elsewhere].workspace_arn: got 'arn:aws:aps:us-east-1:1:ws'; allowed: "
    )


def test_owner_names_read_as_the_errors_print_them() -> None:
    from kiln.constructs._checks import field_name, owner_name

    construct = Construct(stack("Named"), "Thing")
    assert owner_name(construct) == "Construct[Named/Thing]"
    assert owner_name(PcsNodeGroup(name="gpu", instance_type="p5.48xlarge")) == "PcsNodeGroup"
    assert field_name("file_system_dns_name", "region") == "file_system_dns_name.region"
