"""Names a cluster's stacks carry, and a CI environment's (their tags are kiln.contracts.tags): the one place the
stacks, the reaper, `kiln ci` and preflight agree on. The reaper's Lambda code keeps a copy of what it uses
(kiln_reaper/contract.py: the Lambda has no kiln), and tests/contracts/test_environment.py holds that copy equal to
this module and kiln.contracts.tags."""

from __future__ import annotations

from datetime import datetime, timezone

# Dependents first: compute uses storage and network, storage uses network; the reaper goes last.
DELETE_ORDER = ("compute", "storage", "network", "reaper")
REAPER_PART = "reaper"
SCHEDULE_GROUP = "default"
# What each bucket kiln owns is for; an environment's buckets are <environment>-<purpose>-<account>, so grants
# can name them before they exist.
BUCKET_PURPOSES = ("data", "data-logs", "lifecycle", "lifecycle-logs")
# An environment name is a cluster name (31 characters at most): <cluster>-<run slug of at most 12>. A cluster
# name this long or shorter is never cut, so grants on <cluster>-* cover all its environments.
MAX_ENVIRONMENT_NAME = 31
MAX_RUN_SLUG = 12
MAX_WHOLE_CLUSTER_NAME = MAX_ENVIRONMENT_NAME - MAX_RUN_SLUG - 1


def stack_name(cluster: str, part: str) -> str:
    """Return the CloudFormation stack name of PART of CLUSTER (or of an environment)."""
    return f"{cluster}-{part}"


def environment_bucket_name(environment: str, purpose: str, account: str) -> str:
    """Return the name of ENVIRONMENT's PURPOSE bucket (one of BUCKET_PURPOSES) in ACCOUNT: unique per account."""
    if purpose not in BUCKET_PURPOSES:
        raise ValueError(f"purpose: got {purpose!r}; allowed: {', '.join(BUCKET_PURPOSES)}")
    return f"{environment}-{purpose}-{account}"


def reaper_role_name(environment: str) -> str:
    """Return the name of the role ENVIRONMENT's reaper function runs as."""
    return f"{environment}-reaper"


def invoke_role_name(environment: str) -> str:
    """Return the name of the role EventBridge Scheduler invokes ENVIRONMENT's reaper with."""
    return f"{environment}-reaper-invoke"


def schedule_name(environment: str) -> str:
    """Return the name of ENVIRONMENT's one-time reaper schedule."""
    return f"{environment}-reaper"


def alarm_topic_name(environment: str) -> str:
    """Return the name of the SNS topic ENVIRONMENT's reaper publishes to when its teardown keeps failing."""
    return f"{environment}-reaper-alarm"


def at_expression(when: datetime) -> str:
    """Return EventBridge Scheduler's one-time expression for WHEN (UTC, whole seconds)."""
    return f"at({when.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S})"


def parse_at_expression(expression: str) -> datetime | None:
    """Return the UTC time of an at(...) expression, or None when EXPRESSION is not one."""
    if not (expression.startswith("at(") and expression.endswith(")")):
        return None
    try:
        return datetime.strptime(expression[3:-1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
