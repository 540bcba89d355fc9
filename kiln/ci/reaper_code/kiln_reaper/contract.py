"""What the reaper's Lambda code shares with the rest of kiln: a copy of the names, tags and schedule expression it
uses from kiln.contracts (environment.py, tags.py), because the Lambda has no kiln to import.
tests/contracts/test_environment.py holds every name here equal to the contract's; change the contract, then this
copy."""

from __future__ import annotations

from datetime import datetime, timezone

TAG_ENVIRONMENT = "kiln:environment"

# Dependents first: compute uses storage and network, storage uses network; the reaper goes last.
DELETE_ORDER = ("compute", "storage", "network", "reaper")
SCHEDULE_GROUP = "default"


def stack_name(cluster: str, part: str) -> str:
    """Return the CloudFormation stack name of PART of CLUSTER (or of an environment)."""
    return f"{cluster}-{part}"


def at_expression(when: datetime) -> str:
    """Return EventBridge Scheduler's one-time expression for WHEN (UTC, whole seconds)."""
    return f"at({when.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S})"
