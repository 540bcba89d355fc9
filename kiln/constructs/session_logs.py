"""A Session Manager session document of the cluster's own that logs each shell to the cluster's bucket or to a
CloudWatch Logs group of its own, and encrypts the session with a key of its own.

Session Manager reads logging from the Session document a session names (--document-name), else from the account's
SSM-SessionManagerRunShell, which holds everyone's preferences: kiln never touches that one (it did not create it),
and writes its own (platforms.json, systems_manager.session_logging). The nodes' role gets what logging needs, as a
policy of this construct's own, reviewed here: an inline policy on one role (PCS, HyperPod), or a managed policy the
ParallelCluster provider attaches to the roles it makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kiln.catalog.platforms import service_fact
from kiln.constructs import acknowledgements
from kiln.constructs._checks import PropError, require
from kiln.constructs.keys import logs_key
from kiln.constructs.parallelcluster import attachable_policy
from kiln.constructs.review import acknowledge_wildcards

SESSION_LOGGING = service_fact("systems_manager", "session_logging").value
# Where the logs go in the cluster's bucket.
SESSION_LOG_PREFIX = "session-logs/"
Destination = Literal["s3", "cloudwatch"]


@dataclass(frozen=True, kw_only=True)
class SessionLogsProps:
    """Props for SessionLogs.

    document_name: the Session document's name (kiln.contracts.ssm_documents.session_document).
    destination: s3 (the bucket, under SESSION_LOG_PREFIX) or cloudwatch (a log group of this construct's).
    bucket: where s3 logs go (the cluster's bucket); required by s3, and None (the default) for cloudwatch.
    log_retention: how long the cloudwatch group keeps a session's log; default ONE_YEAR.
    retain: keep the key and the log group when the stack goes, so kept logs stay readable; default False.
    """

    document_name: str
    destination: Destination
    bucket: s3.IBucket | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR
    retain: bool = False

    def __post_init__(self) -> None:
        if self.destination not in ("s3", "cloudwatch"):
            raise PropError(f"destination: got {self.destination!r}, allowed: s3, cloudwatch")
        if (self.destination == "s3") != (self.bucket is not None):
            raise PropError("bucket: needed with destination s3, and only then")


class SessionLogs(Construct):
    """The cluster's Session document (Standard_Stream: a shell), its key and, for CloudWatch, its log group."""

    def __init__(self, scope: Construct, construct_id: str, props: SessionLogsProps) -> None:
        super().__init__(scope, construct_id)
        require(self, bool(props.document_name), "document_name", props.document_name, "a document name")
        self._props = props
        removal = RemovalPolicy.RETAIN if props.retain else RemovalPolicy.DESTROY
        # CloudWatch Logs may use it for this account's groups (logs_key); Session Manager's session encryption uses
        # it through IAM: the nodes decrypt (attach_node_policy), whoever starts a session generates data keys.
        self.key = logs_key(
            self, "Key", description="kiln: Session Manager session encryption and session logs", retain=props.retain
        )
        self.log_group: logs.LogGroup | None = None
        inputs: dict[str, object] = {
            "s3BucketName": "",
            "s3KeyPrefix": "",
            "s3EncryptionEnabled": False,
            "cloudWatchLogGroupName": "",
            "cloudWatchEncryptionEnabled": False,
            "cloudWatchStreamingEnabled": False,
            "kmsKeyId": self.key.key_arn,
            "runAsEnabled": False,
            "runAsDefaultUser": "",
            "idleSessionTimeout": "20",
            "shellProfile": {"linux": "", "windows": ""},
        }
        if props.destination == "s3":
            assert props.bucket is not None
            inputs |= {
                "s3BucketName": props.bucket.bucket_name,
                "s3KeyPrefix": SESSION_LOG_PREFIX.rstrip("/"),
                "s3EncryptionEnabled": True,
            }
        else:
            self.log_group = logs.LogGroup(
                self, "Logs", encryption_key=self.key, retention=props.log_retention, removal_policy=removal
            )
            inputs |= {
                "cloudWatchLogGroupName": self.log_group.log_group_name,
                "cloudWatchEncryptionEnabled": True,
                "cloudWatchStreamingEnabled": True,
            }
        self.document = ssm.CfnDocument(
            self,
            "Document",
            name=props.document_name,
            document_type=SESSION_LOGGING["document_type"],
            document_format="JSON",
            update_method="NewVersion",
            content={
                "schemaVersion": "1.0",
                "description": "kiln: this cluster's Session Manager shells, logged and encrypted",
                "sessionType": SESSION_LOGGING["session_type"],
                "inputs": inputs,
            },
        )

    @property
    def document_name(self) -> str:
        return self._props.document_name

    def node_statements(self) -> list[iam.PolicyStatement]:
        """Return what SSM Agent on a node needs to log a session here and decrypt its data."""
        actions = SESSION_LOGGING["node_actions"]
        statements = [iam.PolicyStatement(actions=list(actions["session_encryption"]), resources=[self.key.key_arn])]
        if self.log_group is not None:
            stack = Stack.of(self)
            groups = stack.format_arn(
                service="logs", resource="log-group", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
            )
            describe = [a for a in actions["cloudwatch"] if a == "logs:DescribeLogGroups"]
            statements += [
                iam.PolicyStatement(actions=describe, resources=[groups]),
                iam.PolicyStatement(
                    actions=[a for a in actions["cloudwatch"] if a not in describe],
                    resources=[self.log_group.log_group_arn],
                ),
            ]
        else:
            bucket = self._props.bucket
            assert bucket is not None
            put, configuration = actions["s3"]
            statements += [
                iam.PolicyStatement(actions=[put], resources=[bucket.arn_for_objects(f"{SESSION_LOG_PREFIX}*")]),
                iam.PolicyStatement(actions=[configuration], resources=[bucket.bucket_arn]),
            ]
        return statements

    def attach_node_policy(self, role: iam.IRole) -> iam.Policy:
        """Attach the node statements to ROLE as a policy of this construct's, reviewed here; return it (PCS's node
        role, HyperPod's execution role: SSM Agent on those nodes acts with it)."""
        policy = iam.Policy(self, "NodePolicy", statements=self.node_statements(), roles=[role])
        self._review(policy)
        return policy

    def attachable_node_policy(self) -> iam.ManagedPolicy:
        """Return the node statements as a managed policy the ParallelCluster provider may attach (attachable_policy:
        it attaches a cluster's AdditionalIamPolicies only by such ARNs), reviewed here; it makes the nodes' roles."""
        policy = attachable_policy(
            self,
            "NodeManagedPolicy",
            description=f"kiln: SSM Agent logs {self._props.document_name} sessions and decrypts their data",
            statements=self.node_statements(),
        )
        self._review(policy)
        return policy

    def _review(self, policy: iam.Policy | iam.ManagedPolicy) -> None:
        if self._props.bucket is not None:
            acknowledge_wildcards(policy, (acknowledgements.SESSION_LOG_OBJECTS,), bucket=self._props.bucket.bucket_arn)
        else:
            acknowledge_wildcards(policy, (acknowledgements.SESSION_LOG_GROUPS,))
