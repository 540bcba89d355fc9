"""PrometheusWorkspace: its key, logs and removal policy, its URLs, and grants scoped to the one workspace.

cdk-nag, cfn-lint and checkov over a workspace beside an EKS collector: test_eks_observability.py.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from kiln.constructs import (
    ImportedPrometheusWorkspace,
    IPrometheusWorkspace,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
)
from kiln.constructs.prometheus import QUERY_ACTIONS, REMOTE_WRITE_ACTIONS
from tests.support.constructs import get_att, logical_id, stack

REGION = "us-east-1"
IMPORTED_ARN = "arn:aws:aps:us-east-1:111111111111:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
IMPORTED_ENDPOINT = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef"
VIA_AMP = {"StringEquals": {"kms:ViaService": f"aps.{REGION}.amazonaws.com"}}


def _role(st: cdk.Stack, name: str) -> iam.Role:
    return iam.Role(st, name, assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))


@pytest.fixture(scope="module")
def built() -> dict:
    """One stack: a retained workspace with logs, a disposable one without, an imported one; a grantee of each grant."""
    st = stack("Metrics")
    kept = PrometheusWorkspace(st, "Kept", PrometheusWorkspaceProps(alias="llm-eks"))
    disposable = PrometheusWorkspace(
        st, "Disposable", PrometheusWorkspaceProps(alias="ci-run", retain=False, logging=False)
    )
    imported_key = kms.Key.from_key_arn(
        st, "ImportedKey", "arn:aws:kms:us-east-1:111111111111:key/0123abcd-4567-89ef-0123-456789abcdef"
    )
    imported = PrometheusWorkspace.from_workspace_attributes(
        st, "Imported", workspace_arn=IMPORTED_ARN, prometheus_endpoint=IMPORTED_ENDPOINT, key=imported_key
    )
    plain = PrometheusWorkspace.from_workspace_attributes(
        st, "Plain", workspace_arn=IMPORTED_ARN, prometheus_endpoint=IMPORTED_ENDPOINT + "/"
    )
    roles = {name: _role(st, name) for name in ("Writer", "Reader", "ImportedWriter", "PlainReader")}
    kept.grant_remote_write(roles["Writer"])
    kept.grant_query(roles["Reader"])
    imported.grant_remote_write(roles["ImportedWriter"])
    plain.grant_query(roles["PlainReader"])
    return {
        "stack": st,
        "kept": kept,
        "disposable": disposable,
        "imported": imported,
        "plain": plain,
        "imported_key": imported_key,
        "roles": roles,
        "template": Template.from_stack(st),
    }


def _resource(template: Template, construct) -> dict:
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return template.to_json()["Resources"][logical_id(construct)]


def _statements(built: dict, role: str) -> list[dict]:
    """Return the statements of the policies attached to ROLE, with each Action as a list."""
    role_id = logical_id(built["roles"][role].node.default_child)
    statements = []
    for policy in built["template"].find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                statements.append({**statement, "Action": actions if isinstance(actions, list) else [actions]})
    return statements


def _resolve(built: dict, value):
    return built["stack"].resolve(value)


def test_workspace_is_encrypted_with_its_own_rotating_key_and_logs_to_its_own_group(built) -> None:
    template, kept = built["template"], built["kept"]
    workspace = _resource(template, kept.workspace)
    assert workspace["Type"] == "AWS::APS::Workspace"
    assert kept.workspace.node.id == "Resource"
    props = workspace["Properties"]
    assert props["Alias"] == "llm-eks"
    assert props["KmsKeyArn"] == get_att(kept.key.node.default_child, "Arn")
    key = _resource(template, kept.key)
    assert key["Properties"]["EnableKeyRotation"] is True
    # The key policy is CDK's default: this account's IAM decides; AMP takes its grants as the deploying role.
    (statement,) = key["Properties"]["KeyPolicy"]["Statement"]
    assert (statement["Action"], statement["Resource"]) == ("kms:*", "*")
    assert props["LoggingConfiguration"] == {"LogGroupArn": get_att(kept.log_group.node.default_child, "Arn")}
    group = _resource(template, kept.log_group)["Properties"]
    assert group["RetentionInDays"] == 365
    assert group["KmsKeyId"] == get_att(kept.logs_key.node.default_child, "Arn")
    assert kept.logs_key is not kept.key


def test_retained_workspace_keeps_its_key_and_logs_and_a_disposable_one_goes_with_its_stack(built) -> None:
    template, kept, disposable = built["template"], built["kept"], built["disposable"]
    for construct in (kept.workspace, kept.key, kept.logs_key, kept.log_group):
        resource = _resource(template, construct)
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain"), construct
    for construct in (disposable.workspace, disposable.key):
        resource = _resource(template, construct)
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Delete", "Delete"), construct
    assert _resource(template, disposable.workspace)["Properties"]["KmsKeyArn"] == get_att(
        disposable.key.node.default_child, "Arn"
    )
    assert disposable.log_group is None and disposable.logs_key is None
    assert "LoggingConfiguration" not in _resource(template, disposable.workspace)["Properties"]


def test_workspace_exposes_its_arn_id_and_prometheus_urls(built) -> None:
    kept = built["kept"]
    workspace_id = logical_id(kept.workspace)
    assert _resolve(built, kept.workspace_arn) == {"Fn::GetAtt": [workspace_id, "Arn"]}
    assert _resolve(built, kept.workspace_id) == {"Fn::GetAtt": [workspace_id, "WorkspaceId"]}
    endpoint = {"Fn::GetAtt": [workspace_id, "PrometheusEndpoint"]}
    assert _resolve(built, kept.prometheus_endpoint) == endpoint
    assert _resolve(built, kept.remote_write_url) == {"Fn::Join": ["", [endpoint, "api/v1/remote_write"]]}
    assert _resolve(built, kept.query_url) == {"Fn::Join": ["", [endpoint, "api/v1/query"]]}
    assert isinstance(kept, IPrometheusWorkspace)


def test_remote_write_grant_is_one_action_on_this_workspace_and_its_key_through_amp_only(built) -> None:
    kept = built["kept"]
    statements = _statements(built, "Writer")
    assert statements == [
        {"Action": list(REMOTE_WRITE_ACTIONS), "Effect": "Allow", "Resource": get_att(kept.workspace, "Arn")},
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Condition": VIA_AMP,
            "Effect": "Allow",
            "Resource": get_att(kept.key.node.default_child, "Arn"),
        },
    ]
    assert REMOTE_WRITE_ACTIONS == ("aps:RemoteWrite",)


def test_query_grant_reads_this_workspace_only(built) -> None:
    kept = built["kept"]
    statements = _statements(built, "Reader")
    assert statements == [
        {"Action": sorted(QUERY_ACTIONS), "Effect": "Allow", "Resource": get_att(kept.workspace, "Arn")},
        {
            "Action": ["kms:Decrypt"],
            "Condition": VIA_AMP,
            "Effect": "Allow",
            "Resource": get_att(kept.key.node.default_child, "Arn"),
        },
    ]
    assert set(QUERY_ACTIONS) == {"aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata"}


def test_no_grant_holds_a_wildcard(built) -> None:
    for role in built["roles"]:
        for statement in _statements(built, role):
            assert "*" not in json.dumps(statement["Action"]) + json.dumps(statement["Resource"]), statement


def test_imported_workspace_grants_and_urls_name_it_exactly(built) -> None:
    imported, plain = built["imported"], built["plain"]
    assert isinstance(imported, ImportedPrometheusWorkspace) and isinstance(imported, IPrometheusWorkspace)
    assert imported.workspace_arn == IMPORTED_ARN
    assert imported.workspace_id == "ws-0123abcd-4567-89ef-0123-456789abcdef"
    # With or without the trailing slash AMP reports, the URLs come out the same.
    for workspace in (imported, plain):
        assert workspace.prometheus_endpoint == IMPORTED_ENDPOINT + "/"
        assert workspace.remote_write_url == IMPORTED_ENDPOINT + "/api/v1/remote_write"
        assert workspace.query_url == IMPORTED_ENDPOINT + "/api/v1/query"
    assert _statements(built, "ImportedWriter") == [
        {"Action": ["aps:RemoteWrite"], "Effect": "Allow", "Resource": IMPORTED_ARN},
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Condition": VIA_AMP,
            "Effect": "Allow",
            "Resource": built["imported_key"].key_arn,
        },
    ]
    # A workspace under AMP's own key: no key to grant.
    assert _statements(built, "PlainReader") == [
        {"Action": sorted(QUERY_ACTIONS), "Effect": "Allow", "Resource": IMPORTED_ARN}
    ]


@pytest.mark.parametrize(
    ("alias", "message"),
    [("", "alias: got ''; allowed: 1 to 100 characters"), ("x" * 101, "allowed: 1 to 100 characters")],
)
def test_invalid_alias_is_refused(alias: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        PrometheusWorkspaceProps(alias=alias)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            {"workspace_arn": "arn:aws:s3:::bucket", "prometheus_endpoint": IMPORTED_ENDPOINT},
            "workspace_arn: got 'arn:aws:s3:::bucket'; allowed: a workspace ARN",
        ),
        (
            {"workspace_arn": IMPORTED_ARN, "prometheus_endpoint": "http://aps.example/"},
            "prometheus_endpoint: got 'http://aps.example/'; allowed: the workspace's https:// endpoint",
        ),
    ],
)
def test_invalid_imported_attributes_are_refused(attributes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrometheusWorkspace.from_workspace_attributes(stack("Bad"), "Bad", **attributes)
