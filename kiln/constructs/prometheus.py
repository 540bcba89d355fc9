"""PrometheusWorkspace: Amazon Managed Service for Prometheus under a key of its own, with write and query grants."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from aws_cdk import Arn, ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from kiln.constructs import acknowledgements
from kiln.constructs._checks import ARN_PARTITION, refuse, require, unresolved
from kiln.constructs.keys import logs_key
from kiln.constructs.review import acknowledge_wildcards

# Prometheus's HTTP API below a workspace's endpoint (which AMP reports with a trailing slash).
REMOTE_WRITE_PATH = "api/v1/remote_write"
QUERY_PATH = "api/v1/query"
REMOTE_WRITE_ACTIONS = ("aps:RemoteWrite",)
QUERY_ACTIONS = ("aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata")
# A workspace under a customer-managed key serves only callers who may use that key (AMP User Guide, "Encryption at
# rest"): writers have AMP generate and read data keys, readers have it read them, each through AMP alone.
REMOTE_WRITE_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
QUERY_KEY_ACTIONS = ("kms:Decrypt",)
ALIAS_MAX_LENGTH = 100
WORKSPACE_ARN = re.compile(rf"arn:{ARN_PARTITION}:aps:[a-z0-9-]+:\d{{12}}:workspace/ws-[0-9A-Za-z-]+")
WORKSPACE_ARN_RULE = "a workspace ARN such as arn:aws:aps:us-east-1:111111111111:workspace/ws-0123abcd"


@runtime_checkable
class IPrometheusWorkspace(Protocol):
    """What writers, readers and collectors need of a workspace: kiln's PrometheusWorkspace, or one from
    PrometheusWorkspace.from_workspace_attributes."""

    @property
    def workspace_arn(self) -> str: ...

    @property
    def workspace_id(self) -> str: ...

    @property
    def prometheus_endpoint(self) -> str: ...

    @property
    def remote_write_url(self) -> str: ...

    @property
    def query_url(self) -> str: ...

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant: ...

    def grant_query(self, grantee: iam.IGrantable) -> iam.Grant: ...


class _WorkspaceAccess:
    """Names, URLs and grants shared by a workspace kiln makes and one made elsewhere."""

    _workspace_arn: str
    _workspace_id: str
    _prometheus_endpoint: str
    # The workspace's customer-managed key, where known; None: AMP's own key (or one kiln was not told of).
    key: kms.IKey | None
    # The region whose AMP may use the key for callers.
    _region: str

    @property
    def workspace_arn(self) -> str:
        return self._workspace_arn

    @property
    def workspace_id(self) -> str:
        return self._workspace_id

    @property
    def prometheus_endpoint(self) -> str:
        """The workspace's URL, ending in "/": Prometheus's HTTP API lies below it."""
        return self._prometheus_endpoint

    @property
    def remote_write_url(self) -> str:
        return f"{self.prometheus_endpoint}{REMOTE_WRITE_PATH}"

    @property
    def query_url(self) -> str:
        return f"{self.prometheus_endpoint}{QUERY_PATH}"

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let GRANTEE write samples to this workspace (and, under a key of its own, have AMP use that key)."""
        return self._grant(grantee, REMOTE_WRITE_ACTIONS, REMOTE_WRITE_KEY_ACTIONS)

    def grant_query(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let GRANTEE query this workspace: PromQL, series, labels and metric metadata."""
        return self._grant(grantee, QUERY_ACTIONS, QUERY_KEY_ACTIONS)

    def remote_write_statements(self) -> list[iam.PolicyStatement]:
        """Return grant_remote_write's permissions as statements, for a managed policy (ParallelCluster's head node)."""
        return [
            iam.PolicyStatement(**access) for access in self._access(REMOTE_WRITE_ACTIONS, REMOTE_WRITE_KEY_ACTIONS)
        ]

    def _grant(self, grantee: iam.IGrantable, actions: tuple[str, ...], key_actions: tuple[str, ...]) -> iam.Grant:
        grants = [
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=access["actions"],
                resource_arns=access["resources"],
                conditions=access.get("conditions"),
            )
            for access in self._access(actions, key_actions)
        ]
        grant = grants[0]
        for other in grants[1:]:
            grant = grant.combine(other)
        return grant

    def _access(self, actions: tuple[str, ...], key_actions: tuple[str, ...]) -> list[dict[str, Any]]:
        """Return ACTIONS on the workspace and, under a key of its own, KEY_ACTIONS on that key through AMP alone."""
        access: list[dict[str, Any]] = [{"actions": list(actions), "resources": [self.workspace_arn]}]
        if self.key is not None:
            access.append(
                {
                    "actions": list(key_actions),
                    "resources": [self.key.key_arn],
                    "conditions": {"StringEquals": {"kms:ViaService": f"aps.{self._region}.amazonaws.com"}},
                }
            )
        return access


@dataclass(frozen=True, kw_only=True)
class PrometheusWorkspaceProps:
    """Props for PrometheusWorkspace.

    alias: the workspace's alias, 1 to 100 characters (e.g. the cluster's name).
    retain: keep the workspace, its key and its logs when the stack is deleted; default True. False deletes the
        workspace with the stack and schedules its keys for deletion (KMS's 30-day waiting period).
    logging: send AMP's vended logs of the workspace (rule evaluation and alert manager events) to a log group of its
        own, encrypted with a rotating key of its own; default True.
    log_retention: how long those logs are kept; default one year.
    """

    alias: str
    retain: bool = True
    logging: bool = True
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR

    def __post_init__(self) -> None:
        if not unresolved(self.alias):
            require(
                self,
                1 <= len(self.alias) <= ALIAS_MAX_LENGTH,
                "alias",
                self.alias,
                f"1 to {ALIAS_MAX_LENGTH} characters",
            )


class PrometheusWorkspace(_WorkspaceAccess, Construct):
    """An Amazon Managed Service for Prometheus workspace, encrypted with a rotating customer-managed key of its own.

    The key's policy is CDK's default (this account's IAM policies decide who uses it): AMP creates its grants on the
    key with the deploying role's permissions (kms:CreateGrant and kms:DescribeKey, which the CDK bootstrap's
    administrator role holds), and grant_remote_write/grant_query give each caller use of the key through AMP only.
    """

    def __init__(self, scope: Construct, construct_id: str, props: PrometheusWorkspaceProps) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if props.retain else RemovalPolicy.DESTROY
        # Retained exactly when the workspace is: a deleted key would leave a kept workspace unreadable.
        self.key = kms.Key(
            self,
            "Key",
            description="kiln: encryption at rest of an Amazon Managed Service for Prometheus workspace",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        acknowledge_wildcards(self.key, (acknowledgements.KEY_ACCOUNT_ADMIN,))
        self.logs_key: kms.Key | None = None
        self.log_group: logs.LogGroup | None = None
        logging_configuration = None
        if props.logging:
            self.logs_key = logs_key(
                self, "LogsKey", description="kiln: a Prometheus workspace's vended logs", retain=props.retain
            )
            self.log_group = logs.LogGroup(
                self,
                "Logs",
                encryption_key=self.logs_key,
                retention=props.log_retention,
                removal_policy=removal,
            )
            # AMP takes the group's ARN with its ":*" suffix, as CloudFormation's Arn attribute spells it.
            logging_configuration = aps.CfnWorkspace.LoggingConfigurationProperty(
                log_group_arn=self.log_group.log_group_arn
            )
        self.workspace = aps.CfnWorkspace(
            self,
            "Resource",
            alias=props.alias,
            kms_key_arn=self.key.key_arn,
            logging_configuration=logging_configuration,
        )
        self.workspace.apply_removal_policy(removal)
        self._workspace_arn = self.workspace.attr_arn
        self._workspace_id = self.workspace.attr_workspace_id
        self._prometheus_endpoint = self.workspace.attr_prometheus_endpoint
        self._region = Stack.of(self).region

    @staticmethod
    def from_workspace_attributes(
        scope: Construct,
        construct_id: str,
        *,
        workspace_arn: str,
        prometheus_endpoint: str,
        key: kms.IKey | None = None,
    ) -> ImportedPrometheusWorkspace:
        """Refer to a workspace made outside this app (KEY: its customer-managed key, if it has one)."""
        return ImportedPrometheusWorkspace(
            scope, construct_id, workspace_arn=workspace_arn, prometheus_endpoint=prometheus_endpoint, key=key
        )


class ImportedPrometheusWorkspace(_WorkspaceAccess, Construct):
    """A workspace made elsewhere (see PrometheusWorkspace.from_workspace_attributes)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workspace_arn: str,
        prometheus_endpoint: str,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not unresolved(workspace_arn):
            require(
                self,
                WORKSPACE_ARN.fullmatch(workspace_arn) is not None,
                "workspace_arn",
                workspace_arn,
                WORKSPACE_ARN_RULE,
            )
        if not unresolved(prometheus_endpoint):
            require(
                self,
                prometheus_endpoint.startswith("https://"),
                "prometheus_endpoint",
                prometheus_endpoint,
                "the workspace's https:// endpoint",
            )
            prometheus_endpoint = prometheus_endpoint.rstrip("/") + "/"
        parts = Arn.split(workspace_arn, ArnFormat.SLASH_RESOURCE_NAME)
        workspace_id, region = parts.resource_name, parts.region
        if workspace_id is None or region is None:
            refuse(self, "workspace_arn", workspace_arn, WORKSPACE_ARN_RULE)
        self._workspace_arn = workspace_arn
        self._workspace_id = workspace_id
        self._prometheus_endpoint = prometheus_endpoint
        self.key = key
        self._region = region
