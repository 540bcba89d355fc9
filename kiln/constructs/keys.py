"""Customer-managed KMS keys: for a cluster's log groups, and for EKS secrets' envelope encryption."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from kiln.constructs import acknowledgements
from kiln.constructs.review import acknowledge_wildcards


def _key(scope: Construct, construct_id: str, *, description: str, retain: bool) -> kms.Key:
    """A key that rotates yearly; RETAIN keeps it (and what it encrypted readable) after its stack is deleted.

    Without RETAIN, deleting the stack schedules the key's deletion with KMS's 30-day waiting period.
    """
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
    )


def logs_key(scope: Construct, construct_id: str, *, description: str, retain: bool) -> kms.Key:
    """Return a key CloudWatch Logs may use for the log groups of this stack's account and region.

    RETAIN it whenever a log group it encrypts is retained, or the kept logs become unreadable.
    """
    key = _key(scope, construct_id, description=description, retain=retain)
    stack = Stack.of(key)
    log_groups = stack.format_arn(
        service="logs", resource="log-group", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
    )
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=list(acknowledgements.LOGS_KEY_USE.actions),
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
        )
    )
    acknowledge_wildcards(key, (acknowledgements.KEY_ACCOUNT_ADMIN, acknowledgements.LOGS_KEY_USE))
    return key


def secrets_key(scope: Construct, construct_id: str, *, description: str) -> kms.Key:
    """Return a key for EKS secrets' envelope encryption; it goes with its stack, as the cluster's secrets do."""
    key = _key(scope, construct_id, description=description, retain=False)
    acknowledge_wildcards(key, (acknowledgements.KEY_ACCOUNT_ADMIN,))
    return key
