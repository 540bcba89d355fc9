"""Construct ids derived from user-given names: readable, stable and collision-safe."""

from __future__ import annotations

import hashlib


def hashed_id(prefix: str, user_name: str) -> str:
    """Return a PascalCase construct id for USER_NAME, with a short hash so similar names never collide."""
    digest = hashlib.sha256(user_name.encode()).hexdigest()[:8]
    readable = "".join(part.capitalize() for part in user_name.replace("_", "-").split("-") if part)
    return f"{prefix}{readable}{digest}"
