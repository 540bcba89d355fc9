"""Stack names from the spec."""

from __future__ import annotations


def stack_name(cluster: str, part: str) -> str:
    """Return the CloudFormation stack name of PART of CLUSTER."""
    return f"{cluster}-{part}"
