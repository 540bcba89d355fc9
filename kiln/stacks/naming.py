"""Stable names: stack names from the spec, construct ids from user-given names."""

from __future__ import annotations

import hashlib


def stack_name(cluster: str, part: str) -> str:
    """Return the CloudFormation stack name of PART of CLUSTER."""
    return f"{cluster}-{part}"


def hashed_id(prefix: str, user_name: str) -> str:
    """Return a PascalCase construct id for a user-given name, stable and collision-safe."""
    digest = hashlib.sha256(user_name.encode()).hexdigest()[:8]
    readable = "".join(part.capitalize() for part in user_name.replace("_", "-").split("-") if part)
    return f"{prefix}{readable}{digest}"
