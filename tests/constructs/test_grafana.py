"""GrafanaWorkspace: the workspace and what its role may query, the provisioning function and its custom resource,
its reviews (cdk-nag, checkov), and the function's code run for real against a stand-in Grafana on 127.0.0.1."""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_cdk import CfnParameter
from aws_cdk.assertions import Template
from botocore.stub import ANY, Stubber

from kiln.catalog.exporters import SCRAPE_INTERVAL_S
from kiln.constructs import GrafanaWorkspace, GrafanaWorkspaceProps, acknowledgements
from kiln.constructs import grafana as grafana_module
from kiln.constructs.grafana import (
    GRAFANA_CODE,
    HANDLER,
    PROMETHEUS_QUERY_ACTIONS,
    PROVISIONER_ACTIONS,
)
from kiln.constructs.grafana_code.kiln_grafana import contract, grafana_api, handler, provision
from kiln.dashboards import dashboard_names, load_dashboard
from kiln.review.scan import run_checkov
from kiln.stacks.app import new_app
from kiln.stacks.synth import lint_template, nag_report
from tests.support.constructs import (
    ENV,
    get_att,
    logical_id,
    policy_rows,
    ref,
    role_policies,
    stack,
    synth_as_kiln,
    trust_statements,
)

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

ACCOUNT = ENV.account
STACK_NAME = "llm-dashboards"
AMP_ID = "ws-0123abcd-4567-89ef-0123-456789abcdef"
AMP_ARN = f"arn:aws:aps:us-west-2:{ACCOUNT}:workspace/{AMP_ID}"
AMP_ENDPOINT = f"https://aps-workspaces.us-west-2.amazonaws.com/workspaces/{AMP_ID}/"
KEY_ARN = f"arn:aws:kms:us-west-2:{ACCOUNT}:key/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


@dataclass(frozen=True)
class Built:
    grafana: GrafanaWorkspace
    template: Template
    outdir: Path

    def resource(self, construct) -> dict:
        return self.template.to_json()["Resources"][logical_id(construct)]


def _build(outdir: Path, **props: Any) -> Built:
    app = new_app(str(outdir))
    st = stack(STACK_NAME, app)
    values = {"name": "llm", "prometheus_workspace_arn": AMP_ARN, "prometheus_endpoint": AMP_ENDPOINT, **props}
    workspace = GrafanaWorkspace(st, "Grafana", GrafanaWorkspaceProps(**values))
    (template,) = synth_as_kiln(app, outdir, [st]).values()
    return Built(grafana=workspace, template=template, outdir=outdir)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A workspace reading a Prometheus workspace under its own key, with every dashboard, synthesized with cdk-nag."""
    return _build(tmp_path_factory.mktemp("grafana"), prometheus_key_arn=KEY_ARN)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A workspace with defaults but for two dashboards, SAML beside IAM Identity Center and Grafana 9.4, its code
    taken from a copy of GRAFANA_CODE that Python has run from."""
    code = tmp_path_factory.mktemp("checkout") / "grafana_code"
    shutil.copytree(GRAFANA_CODE, code, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (code / "kiln_grafana" / "__pycache__").mkdir()
    (code / "kiln_grafana" / "__pycache__" / "handler.cpython-314.pyc").write_bytes(b"\x00bytecode")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grafana_module, "GRAFANA_CODE", code)
        return _build(
            tmp_path_factory.mktemp("grafana-plain"),
            dashboards=("slurm", "gpu"),
            authentication_providers=("AWS_SSO", "SAML"),
            grafana_version="9.4",
        )


# --- the workspace and its role --------------------------------------------------------------------------------


def test_the_workspace_is_customer_managed_in_this_account_and_reads_prometheus(built: Built) -> None:
    workspace = built.grafana.workspace
    assert built.grafana.node.default_child is workspace  # the main L1 is "Resource"
    resource = built.resource(workspace)
    assert resource["Type"] == "AWS::Grafana::Workspace"
    assert resource["Properties"] == {
        "Name": "llm",
        "Description": "kiln dashboards of llm",
        "AccountAccessType": "CURRENT_ACCOUNT",
        "AuthenticationProviders": ["AWS_SSO"],
        "PermissionType": "CUSTOMER_MANAGED",
        "RoleArn": get_att(built.grafana.role.node.default_child, "Arn"),
        "DataSources": ["PROMETHEUS"],
        "GrafanaVersion": "10.4",
    }
    # Its role's policy exists before Grafana first queries with it.
    policy = built.grafana.role.node.find_child("DefaultPolicy").node.default_child
    assert resource["DependsOn"] == [logical_id(policy)]


def test_the_other_choices_reach_the_workspace(plain: Built) -> None:
    properties = plain.resource(plain.grafana.workspace)["Properties"]
    assert properties["AuthenticationProviders"] == ["AWS_SSO", "SAML"]
    assert properties["GrafanaVersion"] == "9.4"


def test_only_grafana_of_this_account_assumes_the_workspace_role(built: Built) -> None:
    role = built.grafana.role.node.default_child
    assert trust_statements(built.template, role) == [
        {
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
            "Effect": "Allow",
            "Principal": {"Service": "grafana.amazonaws.com"},
        }
    ]
    properties = built.resource(role)["Properties"]
    assert not {"ManagedPolicyArns", "Policies", "PermissionsBoundary", "RoleName"} & properties.keys()


def test_the_workspace_role_may_only_query_the_one_prometheus_workspace(built: Built, plain: Built) -> None:
    assert PROMETHEUS_QUERY_ACTIONS == ("aps:GetLabels", "aps:GetMetricMetadata", "aps:GetSeries", "aps:QueryMetrics")
    via_aps = json.dumps({"StringEquals": {"kms:ViaService": "aps.us-west-2.amazonaws.com"}}, sort_keys=True)
    (document,) = role_policies(built.template, built.grafana.role.node.default_child)
    assert policy_rows(document) == {(a, json.dumps(AMP_ARN), None) for a in PROMETHEUS_QUERY_ACTIONS} | {
        ("kms:Decrypt", json.dumps(KEY_ARN), via_aps)
    }
    # Without a key of its own, the workspace role touches no key.
    (document,) = role_policies(plain.template, plain.grafana.role.node.default_child)
    assert policy_rows(document) == {(a, json.dumps(AMP_ARN), None) for a in PROMETHEUS_QUERY_ACTIONS}


# --- the provisioning function ---------------------------------------------------------------------------------


def test_the_function_runs_the_provisioner_with_its_own_logs_and_no_reserved_concurrency(built: Built) -> None:
    grafana = built.grafana
    function = built.resource(grafana.provisioner.node.default_child)
    assert {k: v for k, v in function["Properties"].items() if k != "Code"} == {
        "Runtime": "python3.14",
        "Handler": "kiln_grafana.handler.main",
        "Timeout": 300,
        "MemorySize": 256,
        "Role": get_att(grafana.provisioner_role.node.default_child, "Arn"),
        "LoggingConfig": {"LogGroup": ref(grafana.log_group.node.default_child)},
        "Description": "kiln: data source and dashboards of Grafana workspace llm",
    }
    assert HANDLER == "kiln_grafana.handler.main" and contract.TIMEOUT_S == 300
    logs = built.resource(grafana.log_group.node.default_child)
    assert logs["Properties"] == {"RetentionInDays": 365}
    assert (logs["DeletionPolicy"], logs["UpdateReplacePolicy"]) == ("Delete", "Delete")


def test_the_function_may_only_manage_its_service_account_tokens_on_this_workspace(built: Built) -> None:
    grafana = built.grafana
    role = grafana.provisioner_role.node.default_child
    assert trust_statements(built.template, role) == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]
    assert PROVISIONER_ACTIONS == (
        "grafana:CreateWorkspaceServiceAccount",
        "grafana:CreateWorkspaceServiceAccountToken",
        "grafana:DeleteWorkspaceServiceAccountToken",
        "grafana:ListWorkspaceServiceAccounts",
    )
    workspace_arn = {
        "Fn::Join": [
            "",
            [
                f"arn:aws:grafana:us-east-1:{ACCOUNT}:/workspaces/",
                get_att(grafana.workspace, "Id"),
            ],
        ]
    }
    log_group = get_att(grafana.log_group.node.default_child, "Arn")
    (document,) = role_policies(built.template, role)
    writes = ("logs:CreateLogStream", "logs:PutLogEvents")
    assert policy_rows(document) == {
        (a, json.dumps(workspace_arn, sort_keys=True), None) for a in PROVISIONER_ACTIONS
    } | {(a, json.dumps(log_group, sort_keys=True), None) for a in writes}
    assert not {"ManagedPolicyArns", "Policies", "PermissionsBoundary"} & built.resource(role)["Properties"].keys()
    # Two roles, two policies; CloudFormation invokes the function with the deploying role, so no resource policy.
    assert len(built.template.find_resources("AWS::IAM::Role")) == 2
    assert len(built.template.find_resources("AWS::IAM::Policy")) == 2
    assert not built.template.find_resources("AWS::Lambda::Permission")


def _staged(built: Built) -> tuple[str, set[str]]:
    """Return the function's asset hash and the files staged for it, relative to the asset's root."""
    code = built.resource(built.grafana.provisioner.node.default_child)["Properties"]["Code"]
    digest = code["S3Key"].removesuffix(".zip")
    assets = json.loads((built.outdir / f"{STACK_NAME}.assets.json").read_text())
    source = assets["files"][digest]["source"]
    assert source["packaging"] == "zip"
    root = built.outdir / source["path"]
    return digest, {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_the_asset_is_only_the_kiln_grafana_package_and_never_bytecode(built: Built, plain: Built) -> None:
    sources = {f"kiln_grafana/{p.name}" for p in (GRAFANA_CODE / "kiln_grafana").glob("*.py")}
    assert {"kiln_grafana/__init__.py", "kiln_grafana/handler.py"} <= sources
    digest, files = _staged(built)
    assert files == sources
    # A checkout that has run the code stages the same asset, so it redeploys nothing.
    assert _staged(plain) == (digest, files)


def test_the_function_code_needs_only_the_standard_library_and_boto3() -> None:
    allowed = set(sys.stdlib_module_names) | {"boto3", "botocore"}
    for path in sorted((GRAFANA_CODE / "kiln_grafana").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                # Relative imports stay inside the package Lambda runs.
                names = [] if node.level else [node.module or ""]
            else:
                continue
            assert {name.split(".")[0] for name in names} <= allowed, f"{path.name}: {names}"


def test_lambda_imports_the_handler_from_the_asset_root_without_kiln() -> None:
    program = (
        f"import sys; sys.path.insert(0, {str(GRAFANA_CODE)!r}); import kiln_grafana.handler as h; "
        "print(h.main.__module__, sorted(m for m in sys.modules if m == 'kiln' or m.startswith('kiln.')))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["kiln_grafana.handler", "[]"]


# --- the custom resource -----------------------------------------------------------------------------------------


def test_the_custom_resource_carries_every_chosen_dashboard_and_their_digest(built: Built) -> None:
    grafana = built.grafana
    resource = built.resource(grafana.provisioning.node.default_child)
    assert resource["Type"] == "Custom::KilnGrafanaDashboards"
    bodies = [(name, contract.compact(load_dashboard(name))) for name in dashboard_names()]
    assert resource["Properties"] == {
        "ServiceToken": get_att(grafana.provisioner.node.default_child, "Arn"),
        "ServiceTimeout": "600",
        "WorkspaceId": get_att(grafana.workspace, "Id"),
        "WorkspaceEndpoint": get_att(grafana.workspace, "Endpoint"),
        "PrometheusUrl": AMP_ENDPOINT,
        "PrometheusRegion": "us-west-2",  # the Prometheus workspace's, from its ARN
        "ScrapeIntervalSeconds": str(SCRAPE_INTERVAL_S),  # how often kiln scrapes, for $__rate_interval
        "Dashboards": [{"Name": name, "Body": body} for name, body in bodies],
        "DashboardsDigest": contract.dashboards_digest(bodies),
    }
    assert grafana.dashboards_digest == contract.dashboards_digest(bodies)
    # It runs once the function may do its work; deleting it deletes nothing (the workspace takes the dashboards).
    policy = grafana.provisioner_role.node.find_child("DefaultPolicy").node.default_child
    assert logical_id(policy) in resource["DependsOn"]
    assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Delete", "Delete")


def test_only_the_chosen_dashboards_go_in_the_order_given(plain: Built) -> None:
    properties = plain.resource(plain.grafana.provisioning.node.default_child)["Properties"]
    assert [d["Name"] for d in properties["Dashboards"]] == ["slurm", "gpu"]
    assert [json.loads(d["Body"])["uid"] for d in properties["Dashboards"]] == ["kiln-slurm", "kiln-gpu"]


def test_a_changed_dashboard_changes_the_custom_resource(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _build(tmp_path / "before", dashboards=("gpu",))

    def edited(name: str) -> dict:
        dashboard = load_dashboard(name)
        dashboard["panels"][1]["title"] = "GPUs answering"
        return dashboard

    monkeypatch.setattr(grafana_module, "load_dashboard", edited)
    after = _build(tmp_path / "after", dashboards=("gpu",))
    old = before.resource(before.grafana.provisioning.node.default_child)["Properties"]
    new = after.resource(after.grafana.provisioning.node.default_child)["Properties"]
    assert old["DashboardsDigest"] != new["DashboardsDigest"]
    assert old["Dashboards"] != new["Dashboards"]


def test_an_update_request_stays_far_below_lambdas_asynchronous_payload_limit(built: Built) -> None:
    # CloudFormation invokes the function asynchronously (256 KiB at most), with old and new properties on Update.
    properties = built.resource(built.grafana.provisioning.node.default_child)["Properties"]
    assert 2 * len(json.dumps(properties)) < 200 * 1024


def test_the_prometheus_region_may_be_given_or_come_from_a_token_arn(tmp_path: Path) -> None:
    given = _build(tmp_path / "given", prometheus_region="eu-west-1", dashboards=("efa",))
    properties = given.resource(given.grafana.provisioning.node.default_child)["Properties"]
    assert properties["PrometheusRegion"] == "eu-west-1"
    app = new_app(str(tmp_path / "token"))
    st = stack("tokens", app)
    arn = CfnParameter(st, "AmpArn").value_as_string
    workspace = GrafanaWorkspace(
        st, "Grafana", GrafanaWorkspaceProps(name="llm", prometheus_workspace_arn=arn, prometheus_endpoint=AMP_ENDPOINT)
    )
    assert st.resolve(workspace.prometheus_region) == {"Fn::Select": [3, {"Fn::Split": [":", {"Ref": "AmpArn"}]}]}


# --- reviews -----------------------------------------------------------------------------------------------------


def test_cdk_nag_finds_nothing_and_nothing_is_acknowledged(built: Built, plain: Built) -> None:
    for each in (built, plain):
        report = nag_report(each.outdir)
        assert report.violations == []
        assert report.acknowledged == []


def test_cfn_lint_finds_no_error_or_warning(built: Built) -> None:
    assert lint_template(built.outdir / f"{STACK_NAME}.template.json", "us-east-1") == ([], [])


GRAFANA_SKIPS = {
    (skip.resource_type, skip.check): skip.reason
    for skip in acknowledgements.CHECKOV_SKIPS
    if any("DashboardProvisioner" in path for path in skip.paths)
}


def _stripped(template: dict) -> dict:
    bare = copy.deepcopy(template)
    for resource in bare["Resources"].values():
        resource.get("Metadata", {}).pop("checkov", None)
    return bare


@pytest.mark.slow
def test_checkov_fails_nothing_and_skips_exactly_the_reviewed_checks(built: Built, tmp_path: Path) -> None:
    template = built.template.to_json()
    (tmp_path / "made.template.json").write_text(json.dumps(template))
    (tmp_path / "stripped.template.json").write_text(json.dumps(_stripped(template)))
    results = {path.name: result for path, result in run_checkov(sorted(tmp_path.glob("*.json"))).items()}
    made, stripped = results["made.template.json"], results["stripped.template.json"]
    assert [f"{f.check_id} on {f.resource}: {f.check_name}" for f in made.failed] == []
    assert made.passed > 20
    resources = {logical_id(built.grafana.provisioner.node.default_child): "AWS::Lambda::Function"}
    resources[logical_id(built.grafana.log_group.node.default_child)] = "AWS::Logs::LogGroup"
    skipped = {(f.check_id, f.resource, f.reason) for f in made.skipped}
    assert skipped == {
        (check, f"{kind}.{logical}", GRAFANA_SKIPS[kind, check])
        for logical, kind in resources.items()
        for (skip_kind, check) in GRAFANA_SKIPS
        if skip_kind == kind
    }
    assert sorted(check for _, check in GRAFANA_SKIPS) == ["CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117", "CKV_AWS_158"]
    # Each exception is needed: without kiln's checkov metadata exactly the skipped checks fail.
    assert {(f.check_id, f.resource) for f in stripped.failed} == {(c, r) for c, r, _ in skipped}


# --- props ---------------------------------------------------------------------------------------------------

# A refused prop names the props class first.
PROPS = r"^GrafanaWorkspaceProps\."


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"name": "llm dashboards"}, PROPS + r"name: got 'llm dashboards'; allowed: 1 to 255 letters"),
        ({"name": ""}, PROPS + r"name: got ''"),
        ({"prometheus_workspace_arn": "ws-123"}, PROPS + r"prometheus_workspace_arn: got 'ws-123'; allowed: arn:"),
        ({"prometheus_endpoint": "http://aps.example/"}, PROPS + r"prometheus_endpoint: got 'http://aps.example/'"),
        ({"prometheus_region": "Oregon"}, PROPS + r"prometheus_region: got 'Oregon'; allowed: a region name"),
        ({"prometheus_key_arn": "alias/amp"}, PROPS + r"prometheus_key_arn: got 'alias/amp'; allowed: arn:"),
        (
            {"authentication_providers": ()},
            PROPS + r"authentication_providers: got \(\); allowed: one or both of AWS_SSO",
        ),
        (
            {"authentication_providers": ("OIDC",)},
            PROPS + r"authentication_providers: got 'OIDC'; allowed: AWS_SSO, SAML$",
        ),
        (
            {"dashboards": ()},
            PROPS + r"dashboards: got \(\); allowed: one or more of cluster, efa, gpu, slurm, each once$",
        ),
        ({"dashboards": ("gpu", "gpu")}, PROPS + r"dashboards: got \('gpu', 'gpu'\)"),
        ({"dashboards": ("gpus",)}, PROPS + r"dashboards: got 'gpus'; allowed: cluster, efa, gpu, slurm$"),
        ({"grafana_version": "8.4"}, PROPS + r"grafana_version: got '8.4'; allowed: 9.4, 10.4$"),
    ],
)
def test_bad_props_are_refused_naming_what_is_allowed(props: dict, message: str) -> None:
    values = {"name": "llm", "prometheus_workspace_arn": AMP_ARN, "prometheus_endpoint": AMP_ENDPOINT, **props}
    with pytest.raises(ValueError, match=message):
        GrafanaWorkspaceProps(**values)


def test_the_defaults_are_documented_values() -> None:
    props = GrafanaWorkspaceProps(name="llm", prometheus_workspace_arn=AMP_ARN, prometheus_endpoint=AMP_ENDPOINT)
    assert props.authentication_providers == ("AWS_SSO",)
    assert props.dashboards == ("cluster", "efa", "gpu", "slurm")
    assert props.grafana_version == "10.4"
    assert (props.prometheus_region, props.prometheus_key_arn) == (None, None)


# --- the function's code against a stand-in Grafana ------------------------------------------------------------

WORKSPACE_ID = "g-0123456789"
ENDPOINT = f"{WORKSPACE_ID}.grafana-workspace.us-east-1.amazonaws.com"
ACCOUNT_ID = "sa-1-kiln"
TOKEN_ID = "tok-7"  # noqa: S105 - a stub's id
TOKEN_KEY = "glsa_not_a_real_token_0123456789"  # noqa: S105 - a stub's token


@dataclass
class Recorded:
    method: str
    path: str
    authorization: str | None
    body: Any


@dataclass
class FakeGrafana:
    """What the stand-in answers and what it was asked."""

    port: int = 0
    data_source_exists: bool = False
    # uid -> statuses to answer, in turn, to that dashboard's POSTs; the last one answers every POST after.
    dashboard_statuses: dict[str, list[int]] = field(default_factory=dict)
    data_source_status: int = 200
    redirect_dashboards: bool = False
    requests: list[Recorded] = field(default_factory=list)
    responses: list[dict] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def grafana_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.startswith("/api/")]


def _handler_class(fake: FakeGrafana) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass

        def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> Recorded:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            recorded = Recorded(self.command, self.path, self.headers.get("Authorization"), body)
            fake.requests.append(recorded)
            return recorded

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            recorded = self._record()
            if recorded.path == f"/api/datasources/uid/{contract.DATA_SOURCE_UID}":
                if fake.data_source_exists:
                    self._answer(200, {"id": 3, "uid": contract.DATA_SOURCE_UID, "name": contract.DATA_SOURCE_NAME})
                else:
                    self._answer(404, {"message": "Data source not found"})
            else:
                self._answer(404, {"message": "Not found"})

        def do_POST(self) -> None:  # noqa: N802
            recorded = self._record()
            if recorded.path == "/api/datasources":
                status = fake.data_source_status
                self._answer(status, {"message": "Datasource added" if status == 200 else "Permission denied"})
            elif recorded.path == "/api/dashboards/db":
                if fake.redirect_dashboards:
                    self._answer(302, {}, {"Location": f"{fake.url}/elsewhere"})
                    return
                uid = recorded.body["dashboard"]["uid"]
                statuses = fake.dashboard_statuses.get(uid, [200])
                status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                if status == 200:
                    self._answer(200, {"status": "success", "uid": uid, "version": 2})
                else:
                    self._answer(status, {"message": f"Dashboard {uid}: invalid panel", "status": "error"})
            else:
                self._answer(404, {"message": "Not found"})

        def do_PUT(self) -> None:  # noqa: N802
            recorded = self._record()
            if recorded.path.startswith("/cloudformation-response"):
                fake.responses.append(recorded.body)
                self._answer(200, {})
            elif recorded.path == f"/api/datasources/uid/{contract.DATA_SOURCE_UID}":
                self._answer(fake.data_source_status, {"message": "Datasource updated"})
            else:
                self._answer(404, {"message": "Not found"})

    return Handler


@pytest.fixture
def fake_grafana() -> Iterator[FakeGrafana]:
    """A stand-in for the workspace's Grafana HTTP API and CloudFormation's response URL, on 127.0.0.1."""
    fake = FakeGrafana()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(fake))
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def grafana_client() -> Iterator[tuple[Any, Stubber]]:
    """A boto3 grafana client whose calls a botocore Stubber answers (moto has no Amazon Managed Grafana)."""
    client = boto3.client(
        "grafana",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 - a stub never signs
    )
    with Stubber(client) as stubber:
        yield client, stubber


def _expect_account(stubber: Stubber, *, existing: list[dict] | None = None) -> None:
    stubber.add_response(
        "list_workspace_service_accounts",
        {"serviceAccounts": existing or [], "workspaceId": WORKSPACE_ID},
        {"workspaceId": WORKSPACE_ID},
    )
    if existing is None:
        stubber.add_response(
            "create_workspace_service_account",
            {"id": ACCOUNT_ID, "name": contract.SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": WORKSPACE_ID},
            {"workspaceId": WORKSPACE_ID, "name": "kiln-provisioner", "grafanaRole": "ADMIN"},
        )


def _expect_token(stubber: Stubber) -> None:
    stubber.add_response(
        "create_workspace_service_account_token",
        {
            "serviceAccountToken": {"id": TOKEN_ID, "name": "kiln-provision-x", "key": TOKEN_KEY},
            "serviceAccountId": ACCOUNT_ID,
            "workspaceId": WORKSPACE_ID,
        },
        {"workspaceId": WORKSPACE_ID, "serviceAccountId": ACCOUNT_ID, "name": ANY, "secondsToLive": 600},
    )


def _expect_token_deleted(stubber: Stubber) -> None:
    stubber.add_response(
        "delete_workspace_service_account_token",
        {"tokenId": TOKEN_ID, "serviceAccountId": ACCOUNT_ID, "workspaceId": WORKSPACE_ID},
        {"workspaceId": WORKSPACE_ID, "serviceAccountId": ACCOUNT_ID, "tokenId": TOKEN_ID},
    )


def _expect_whole_run(stubber: Stubber) -> None:
    """A run that finds its service account, makes its token and deletes it at the end."""
    _expect_account(stubber)
    _expect_token(stubber)
    _expect_token_deleted(stubber)


def _properties(names: tuple[str, ...] = ("cluster", "efa", "gpu", "slurm")) -> dict:
    """The custom resource's properties as CloudFormation hands them to the function."""
    bodies = [(name, contract.compact(load_dashboard(name))) for name in names]
    return {
        "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:provisioner",
        "ServiceTimeout": "600",
        "WorkspaceId": WORKSPACE_ID,
        "WorkspaceEndpoint": ENDPOINT,
        "PrometheusUrl": AMP_ENDPOINT,
        "PrometheusRegion": "us-west-2",
        "ScrapeIntervalSeconds": "30",
        "Dashboards": [{"Name": name, "Body": body} for name, body in bodies],
        "DashboardsDigest": contract.dashboards_digest(bodies),
    }


def _event(fake: FakeGrafana, request: str = "Create", properties: dict | None = None) -> dict:
    event = {
        "RequestType": request,
        "ResponseURL": f"{fake.url}/cloudformation-response?X-Amz-Signature=abc",
        "StackId": f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/{STACK_NAME}/1",
        "RequestId": "req-1",
        "LogicalResourceId": "GrafanaDashboards5433CC54",
        "ResourceType": "Custom::KilnGrafanaDashboards",
        "ResourceProperties": properties if properties is not None else _properties(),
    }
    if request != "Create":
        event["PhysicalResourceId"] = f"{WORKSPACE_ID}-dashboards"
    return event


def _run(fake: FakeGrafana, client: Any, event: dict) -> dict:
    answer = handler.main(event, None, grafana=client, grafana_url=fake.url)
    assert fake.responses == [answer]  # CloudFormation heard exactly what the function returned
    return answer


EXPECTED_DATA_SOURCE = {
    "uid": "kiln-amp",
    "name": "kiln Amazon Managed Service for Prometheus",
    "type": "prometheus",
    "access": "proxy",
    "url": AMP_ENDPOINT,
    "isDefault": False,
    "jsonData": {
        "httpMethod": "POST",
        "sigV4Auth": True,
        "sigV4AuthType": "ec2_iam_role",
        "sigV4Region": "us-west-2",
        "timeInterval": "30s",
    },
}


def _expected_dashboard(name: str) -> dict:
    dashboard = load_dashboard(name)
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    variable["current"] = {"selected": True, "text": contract.DATA_SOURCE_NAME, "value": "kiln-amp"}
    return dashboard


def test_create_makes_the_account_and_token_saves_the_data_source_and_every_dashboard_then_deletes_the_token(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    answer = _run(fake_grafana, client, _event(fake_grafana))
    stubber.assert_no_pending_responses()
    digest = _properties()["DashboardsDigest"]
    assert answer == {
        "Status": "SUCCESS",
        "Reason": "data source and 4 dashboards saved",
        "PhysicalResourceId": f"{WORKSPACE_ID}-dashboards",
        "StackId": f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/{STACK_NAME}/1",
        "RequestId": "req-1",
        "LogicalResourceId": "GrafanaDashboards5433CC54",
        "Data": {"DataSourceUid": "kiln-amp", "Dashboards": "kiln-cluster kiln-efa kiln-gpu kiln-slurm"},
    }
    calls = fake_grafana.grafana_requests()
    assert [(r.method, r.path) for r in calls] == [
        ("GET", "/api/datasources/uid/kiln-amp"),
        ("POST", "/api/datasources"),
    ] + [("POST", "/api/dashboards/db")] * 4
    assert {r.authorization for r in calls} == {f"Bearer {TOKEN_KEY}"}
    assert calls[1].body == EXPECTED_DATA_SOURCE
    for call, name in zip(calls[2:], ("cluster", "efa", "gpu", "slurm"), strict=True):
        assert call.body == {
            "dashboard": _expected_dashboard(name),
            "overwrite": True,
            "message": f"kiln {digest[:12]}",
        }
        # Every panel then queries kiln's data source through the variable.
        panels = [p for p in call.body["dashboard"]["panels"] if p["type"] != "row"]
        assert {p["datasource"]["uid"] for p in panels} == {"${datasource}"}


def test_update_reuses_the_service_account_and_updates_the_data_source(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    others = [{"id": f"sa-{i}", "name": f"team-{i}", "isDisabled": "false", "grafanaRole": "EDITOR"} for i in range(2)]
    stubber.add_response(
        "list_workspace_service_accounts",
        {"serviceAccounts": others, "workspaceId": WORKSPACE_ID, "nextToken": "page-2"},
        {"workspaceId": WORKSPACE_ID},
    )
    ours = {"id": ACCOUNT_ID, "name": "kiln-provisioner", "isDisabled": "false", "grafanaRole": "ADMIN"}
    stubber.add_response(
        "list_workspace_service_accounts",
        {"serviceAccounts": [ours], "workspaceId": WORKSPACE_ID},
        {"workspaceId": WORKSPACE_ID, "nextToken": "page-2"},
    )
    _expect_token(stubber)
    _expect_token_deleted(stubber)
    fake_grafana.data_source_exists = True
    answer = _run(fake_grafana, client, _event(fake_grafana, "Update", _properties(("gpu",))))
    stubber.assert_no_pending_responses()
    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", f"{WORKSPACE_ID}-dashboards")
    calls = fake_grafana.grafana_requests()
    assert [(r.method, r.path) for r in calls] == [
        ("GET", "/api/datasources/uid/kiln-amp"),
        ("PUT", "/api/datasources/uid/kiln-amp"),
        ("POST", "/api/dashboards/db"),
    ]
    assert calls[1].body == EXPECTED_DATA_SOURCE


def test_a_failed_dashboard_fails_the_resource_naming_it_and_its_status_and_the_token_is_still_deleted(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    fake_grafana.dashboard_statuses["kiln-gpu"] = [400]
    answer = _run(fake_grafana, client, _event(fake_grafana))
    stubber.assert_no_pending_responses()  # the token went, too
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == (
        "dashboard gpu (kiln-gpu): Grafana answered HTTP 400 to POST: Dashboard kiln-gpu: invalid panel"
    )
    assert "\n" not in answer["Reason"] and TOKEN_KEY not in json.dumps(answer)
    # It stopped at the failed dashboard.
    posted = [r.body["dashboard"]["uid"] for r in fake_grafana.grafana_requests() if r.path == "/api/dashboards/db"]
    assert posted == ["kiln-cluster", "kiln-efa", "kiln-gpu"]


def test_a_refused_data_source_fails_the_resource_naming_it_and_its_status(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    fake_grafana.data_source_status = 403
    answer = _run(fake_grafana, client, _event(fake_grafana))
    stubber.assert_no_pending_responses()
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == "data source kiln-amp: Grafana answered HTTP 403 to POST: Permission denied"
    assert not [r for r in fake_grafana.grafana_requests() if r.path == "/api/dashboards/db"]


def test_delete_touches_neither_grafana_nor_its_service_accounts(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    answer = _run(fake_grafana, client, _event(fake_grafana, "Delete"))
    stubber.assert_no_pending_responses()  # no call was expected, and none was made (Stubber refuses those)
    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", f"{WORKSPACE_ID}-dashboards")
    assert fake_grafana.grafana_requests() == []


def test_a_service_account_without_admin_is_refused_before_any_token_exists(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_account(
        stubber,
        existing=[{"id": ACCOUNT_ID, "name": "kiln-provisioner", "isDisabled": "false", "grafanaRole": "VIEWER"}],
    )
    answer = _run(fake_grafana, client, _event(fake_grafana))
    stubber.assert_no_pending_responses()
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == (
        f"service account kiln-provisioner of workspace {WORKSPACE_ID}: its role is VIEWER, not ADMIN; "
        "delete it and deploy again"
    )
    assert fake_grafana.grafana_requests() == []


def test_a_refused_token_fails_the_resource_with_awss_answer(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_account(stubber)
    stubber.add_client_error(
        "create_workspace_service_account_token",
        service_error_code="AccessDeniedException",
        service_message="not authorized to perform grafana:CreateWorkspaceServiceAccountToken",
        http_status_code=403,
    )
    answer = _run(fake_grafana, client, _event(fake_grafana))
    stubber.assert_no_pending_responses()
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == (
        "token of service account kiln-provisioner: AccessDeniedException: "
        "not authorized to perform grafana:CreateWorkspaceServiceAccountToken"
    )
    assert fake_grafana.grafana_requests() == []


def test_a_token_that_will_not_delete_does_not_fail_a_finished_provisioning(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber], capsys: pytest.CaptureFixture[str]
) -> None:
    client, stubber = grafana_client
    _expect_account(stubber)
    _expect_token(stubber)
    stubber.add_client_error("delete_workspace_service_account_token", service_error_code="ThrottlingException")
    answer = _run(fake_grafana, client, _event(fake_grafana, properties=_properties(("efa",))))
    stubber.assert_no_pending_responses()
    assert answer["Status"] == "SUCCESS"
    assert "token kiln-provision-x: not deleted" in capsys.readouterr().out


def test_a_dashboard_that_is_not_json_fails_the_resource_naming_it(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, _ = grafana_client
    properties = _properties(("gpu",))
    properties["Dashboards"][0]["Body"] = "{not json"
    answer = _run(fake_grafana, client, _event(fake_grafana, properties=properties))
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("dashboard gpu: its body is not JSON: ")


def test_grafana_redirects_are_not_followed_with_the_token(
    fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]
) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    fake_grafana.redirect_dashboards = True
    answer = _run(fake_grafana, client, _event(fake_grafana, properties=_properties(("gpu",))))
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("dashboard gpu (kiln-gpu): Grafana answered HTTP 302 to POST")
    assert not [r for r in fake_grafana.requests if r.path == "/elsewhere"]


def test_a_busy_grafana_is_asked_again(fake_grafana: FakeGrafana, grafana_client: tuple[Any, Stubber]) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    fake_grafana.dashboard_statuses["kiln-gpu"] = [503, 200]
    waits: list[float] = []
    settings = provision.Settings.from_properties(_properties(("gpu",)))
    data = provision.provision(settings, client, grafana_url=fake_grafana.url, api_options={"sleep": waits.append})
    assert data == {"DataSourceUid": "kiln-amp", "Dashboards": "kiln-gpu"}
    assert [r.path for r in fake_grafana.grafana_requests()].count("/api/dashboards/db") == 2
    assert waits == [2.0]


def test_an_unreachable_grafana_fails_naming_what_was_asked_and_the_token_is_deleted(
    grafana_client: tuple[Any, Stubber],
) -> None:
    client, stubber = grafana_client
    _expect_whole_run(stubber)
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there now
    settings = provision.Settings.from_properties(_properties(("gpu",)))
    with pytest.raises(provision.ProvisioningFailed, match=r"^data source kiln-amp: Grafana did not answer: GET "):
        provision.provision(
            settings, client, grafana_url=f"http://127.0.0.1:{port}", api_options={"sleep": lambda _: None}
        )
    stubber.assert_no_pending_responses()


def test_production_talks_to_the_workspace_over_https_only() -> None:
    settings = provision.Settings.from_properties(_properties(("gpu",)))
    assert settings.grafana_url == f"https://{ENDPOINT}"
    for url in ("http://example.com", "ftp://127.0.0.1", "file:///etc/passwd", "http://10.0.0.1:3000"):
        with pytest.raises(ValueError, match="allowed: https://HOST, or http:// to this machine"):
            grafana_api.GrafanaApi(url, TOKEN_KEY)
    with pytest.raises(ValueError, match="^CloudFormation response URL: got 'http://s3.amazonaws.com/x'"):
        handler.send_response("http://s3.amazonaws.com/x", {})


def test_certificates_are_verified(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    fake = FakeGrafana()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(fake))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        api = grafana_api.GrafanaApi(
            f"https://127.0.0.1:{server.server_address[1]}", TOKEN_KEY, attempts=1, timeout_s=10
        )
        # A self-signed certificate is no certificate: nothing reaches the server, the token least of all.
        with pytest.raises(grafana_api.GrafanaUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            api.request("GET", "/api/health")
        assert fake.requests == []
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize("interval", ["", "0", "30s", "-5"])
def test_a_scrape_interval_that_is_not_whole_seconds_is_refused_naming_it(interval: str) -> None:
    properties = {**_properties(("gpu",)), "ScrapeIntervalSeconds": interval}
    expected = "missing ScrapeIntervalSeconds" if not interval else f"ScrapeIntervalSeconds: got '{interval}'"
    with pytest.raises(provision.ProvisioningFailed, match=re.escape(expected)):
        provision.Settings.from_properties(properties)
