"""GrafanaWorkspace: Amazon Managed Grafana that reads one Prometheus workspace, with kiln's dashboards on it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from kiln.catalog.exporters import SCRAPE_INTERVAL_S
from kiln.constructs._checks import ARN_PARTITION, require, require_in, unresolved
from kiln.constructs.functions import kiln_function
from kiln.constructs.grafana_code.kiln_grafana import contract
from kiln.dashboards import dashboard_names, load_dashboard

GRAFANA_CODE = Path(__file__).resolve().parent / "grafana_code"
HANDLER = "kiln_grafana.handler.main"
GrafanaVersion = Literal["9.4", "10.4"]
AuthenticationProvider = Literal["AWS_SSO", "SAML"]
# The provisioning function needs workspace service accounts, which Grafana 9 brought; 8.4 has none.
GRAFANA_VERSIONS: tuple[GrafanaVersion, ...] = ("9.4", "10.4")
AUTHENTICATION_PROVIDERS: tuple[AuthenticationProvider, ...] = ("AWS_SSO", "SAML")
# What Grafana's Prometheus data source asks of Amazon Managed Service for Prometheus: queries, series, labels,
# metric metadata. Nothing that writes.
PROMETHEUS_QUERY_ACTIONS = ("aps:GetLabels", "aps:GetMetricMetadata", "aps:GetSeries", "aps:QueryMetrics")
# A workspace under a customer-managed key answers only callers who may decrypt with it, through AMP.
PROMETHEUS_KEY_ACTIONS = ("kms:Decrypt",)
# What the provisioning function does with the workspace: find or create its service account, and make and delete
# one short-lived token.
PROVISIONER_ACTIONS = (
    "grafana:CreateWorkspaceServiceAccount",
    "grafana:CreateWorkspaceServiceAccountToken",
    "grafana:DeleteWorkspaceServiceAccountToken",
    "grafana:ListWorkspaceServiceAccounts",
)
# AWS::Grafana::Workspace's Name and AWS::APS::Workspace's Arn, as CloudFormation's schemas define them.
_WORKSPACE_NAME = re.compile(r"[a-zA-Z0-9-._~]{1,255}")
_PROMETHEUS_ARN = re.compile(r"arn:(aws|aws-us-gov|aws-cn):aps:([a-z0-9-]+):[0-9]+:workspace/[a-zA-Z0-9-]+")
_KEY_ARN = re.compile(rf"arn:{ARN_PARTITION}:kms:[a-z0-9-]+:[0-9]{{12}}:key/[a-zA-Z0-9-]+")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]")


@dataclass(frozen=True, kw_only=True)
class GrafanaWorkspaceProps:
    """Props for GrafanaWorkspace.

    name: the workspace's name (letters, digits and - . _ ~, at most 255).
    prometheus_workspace_arn: the Amazon Managed Service for Prometheus workspace the dashboards read; the
        workspace's role may query it and nothing else.
    prometheus_endpoint: that workspace's Prometheus endpoint (AWS::APS::Workspace PrometheusEndpoint,
        https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/), the data source's URL.
    prometheus_region: the region queries are signed for; default the region in prometheus_workspace_arn.
    prometheus_key_arn: the Prometheus workspace's customer-managed KMS key, when it has one (kiln's
        PrometheusWorkspace does); the workspace's role may then decrypt with it through AMP alone. Default none
        (AMP's own key).
    authentication_providers: how users sign in; default ("AWS_SSO",), which needs IAM Identity Center enabled in
        the account. SAML needs its configuration added to the workspace after it is made.
    dashboards: which of kiln's dashboards (kiln.dashboards) to put on the workspace; default all of them.
    grafana_version: the workspace's Grafana version; default "10.4". Grafana 9 or later: provisioning uses
        service accounts.
    log_retention: how long the provisioning function's log lines are kept; default one year.
    scrape_interval_seconds: how often the exporters are scraped (the data source's minimum interval); default
        kiln's (kiln.catalog.exporters.SCRAPE_INTERVAL_S).
    """

    name: str
    prometheus_workspace_arn: str
    prometheus_endpoint: str
    prometheus_region: str | None = None
    prometheus_key_arn: str | None = None
    authentication_providers: tuple[AuthenticationProvider, ...] = ("AWS_SSO",)
    dashboards: tuple[str, ...] = dashboard_names()
    grafana_version: GrafanaVersion = "10.4"
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR
    scrape_interval_seconds: int = SCRAPE_INTERVAL_S

    def __post_init__(self) -> None:
        require(
            self,
            unresolved(self.name) or bool(_WORKSPACE_NAME.fullmatch(self.name)),
            "name",
            self.name,
            "1 to 255 letters, digits, '-', '.', '_' or '~'",
        )
        require(
            self,
            unresolved(self.prometheus_workspace_arn) or bool(_PROMETHEUS_ARN.fullmatch(self.prometheus_workspace_arn)),
            "prometheus_workspace_arn",
            self.prometheus_workspace_arn,
            "arn:<partition>:aps:<region>:<account>:workspace/<id>",
        )
        require(
            self,
            unresolved(self.prometheus_endpoint) or self.prometheus_endpoint.startswith("https://"),
            "prometheus_endpoint",
            self.prometheus_endpoint,
            "the workspace's https:// Prometheus endpoint",
        )
        if self.prometheus_region is not None:
            require(
                self,
                unresolved(self.prometheus_region) or bool(_REGION.fullmatch(self.prometheus_region)),
                "prometheus_region",
                self.prometheus_region,
                "a region name such as us-east-1",
            )
        require(
            self,
            bool(self.authentication_providers)
            and len(set(self.authentication_providers)) == len(self.authentication_providers),
            "authentication_providers",
            self.authentication_providers,
            "one or both of " + ", ".join(AUTHENTICATION_PROVIDERS) + ", each once",
        )
        if self.prometheus_key_arn is not None:
            require(
                self,
                unresolved(self.prometheus_key_arn) or bool(_KEY_ARN.fullmatch(self.prometheus_key_arn)),
                "prometheus_key_arn",
                self.prometheus_key_arn,
                "arn:<partition>:kms:<region>:<account>:key/<id>",
            )
        for provider in self.authentication_providers:
            require_in(self, "authentication_providers", provider, AUTHENTICATION_PROVIDERS)
        require(
            self,
            bool(self.dashboards) and len(set(self.dashboards)) == len(self.dashboards),
            "dashboards",
            self.dashboards,
            "one or more of " + ", ".join(dashboard_names()) + ", each once",
        )
        for dashboard in self.dashboards:
            require_in(self, "dashboards", dashboard, dashboard_names())
        require_in(self, "grafana_version", self.grafana_version, GRAFANA_VERSIONS)


def _arn_region(arn: str) -> str:
    """Return the region field of ARN (a token when ARN is one)."""
    if unresolved(arn):
        return cdk.Fn.select(3, cdk.Fn.split(":", arn))
    return arn.split(":")[3]


class GrafanaWorkspace(Construct):
    """An Amazon Managed Grafana workspace whose own role may only query one Prometheus workspace.

    When the workspace is made, and at every deploy that changes a dashboard or the Prometheus workspace, a custom
    resource gives the workspace kiln's Prometheus data source (uid kiln-amp, SigV4-signed with the workspace's
    role) and the chosen dashboards, through the workspace's Grafana HTTP API with a short-lived service account
    token it deletes when done. Deleting the stack deletes the workspace, and the dashboards with it.
    """

    def __init__(self, scope: Construct, construct_id: str, props: GrafanaWorkspaceProps) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(
                "grafana.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
            description=f"Amazon Managed Grafana workspace {props.name}: queries one Prometheus workspace",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=list(PROMETHEUS_QUERY_ACTIONS), resources=[props.prometheus_workspace_arn])
        )
        self.prometheus_region = props.prometheus_region or _arn_region(props.prometheus_workspace_arn)
        if props.prometheus_key_arn is not None:
            self.role.add_to_policy(
                iam.PolicyStatement(
                    actions=list(PROMETHEUS_KEY_ACTIONS),
                    resources=[props.prometheus_key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"aps.{self.prometheus_region}.amazonaws.com"}},
                )
            )
        self.workspace = grafana.CfnWorkspace(
            self,
            "Resource",
            name=props.name,
            description=f"kiln dashboards of {props.name}",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=list(props.authentication_providers),
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.role_arn,
            data_sources=["PROMETHEUS"],
            grafana_version=props.grafana_version,
        )
        # Grafana queries with the role from its first minute: the role's policy exists before the workspace.
        self.workspace.node.add_dependency(self.role)
        self.workspace_id = self.workspace.attr_id
        self.endpoint = self.workspace.attr_endpoint
        self.url = cdk.Fn.join("", ["https://", self.endpoint])
        self.workspace_arn = stack.format_arn(
            service="grafana",
            resource="/workspaces",
            resource_name=self.workspace_id,
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )
        self._provision(props)

    def _provision(self, props: GrafanaWorkspaceProps) -> None:
        self.log_group = logs.LogGroup(
            self, "DashboardProvisionerLogs", retention=props.log_retention, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        self.provisioner_role = iam.Role(
            self,
            "DashboardProvisionerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"kiln: puts the data source and dashboards on Grafana workspace {props.name}",
        )
        self.provisioner_role.add_to_policy(
            iam.PolicyStatement(actions=list(PROVISIONER_ACTIONS), resources=[self.workspace_arn])
        )
        self.log_group.grant_write(self.provisioner_role)
        self.provisioner = kiln_function(
            self,
            "DashboardProvisioner",
            code_dir=GRAFANA_CODE,
            handler=HANDLER,
            role=self.provisioner_role,
            timeout=cdk.Duration.seconds(contract.TIMEOUT_S),
            log_group=self.log_group,
            description=f"kiln: data source and dashboards of Grafana workspace {props.name}",
        )
        dashboards = [(name, contract.compact(load_dashboard(name))) for name in props.dashboards]
        self.dashboards_digest = contract.dashboards_digest(dashboards)
        self.provisioning = cdk.CustomResource(
            self,
            "Dashboards",
            service_token=self.provisioner.function_arn,
            resource_type="Custom::KilnGrafanaDashboards",
            # Answer within minutes, not CloudFormation's default hour, should the function die without answering.
            service_timeout=cdk.Duration.seconds(contract.TIMEOUT_S * 2),
            properties={
                contract.WORKSPACE_ID: self.workspace_id,
                contract.WORKSPACE_ENDPOINT: self.endpoint,
                contract.PROMETHEUS_URL: props.prometheus_endpoint,
                contract.PROMETHEUS_REGION: self.prometheus_region,
                contract.SCRAPE_INTERVAL: str(props.scrape_interval_seconds),
                contract.DASHBOARDS: [{"Name": name, "Body": body} for name, body in dashboards],
                # A changed dashboard changes the digest (and the body): CloudFormation sends an Update.
                contract.DASHBOARDS_DIGEST: self.dashboards_digest,
            },
        )
        # The function's grants exist before CloudFormation invokes it.
        self.provisioning.node.add_dependency(self.provisioner_role)
