"""Names and tags an environment's stacks carry: the one place the stacks, the reaper and `kiln ci` agree on."""

from __future__ import annotations

TAG_CLUSTER = "kiln:cluster"
TAG_ENVIRONMENT = "kiln:environment"
TAG_TTL_HOURS = "kiln:ttl-hours"
TAG_PART = "kiln:part"

# Dependents first: compute uses storage and network, storage uses network; the reaper goes last.
DELETE_ORDER = ("compute", "storage", "network", "reaper")
REAPER_PART = "reaper"
SCHEDULE_GROUP = "default"


def stack_name(cluster: str, part: str) -> str:
    """Return the CloudFormation stack name of PART of CLUSTER (or of an environment)."""
    return f"{cluster}-{part}"


def schedule_name(environment: str) -> str:
    """Return the name of ENVIRONMENT's one-time reaper schedule."""
    return f"{environment}-reaper"
