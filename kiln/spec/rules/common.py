"""What several sections' rules share: a problem at a path, the fields refusals name, map keys as path parts."""

from __future__ import annotations

from kiln.catalog.names import is_plain_word
from kiln.spec.problems import Path, Problem

BACKEND = ("compute", "backend")
ORCHESTRATOR = ("compute", "orchestrator")


def problem_at(path: Path, message: str, *related: Path) -> Problem:
    return Problem(path=path, message=message, related=related)


def key_part(key: object) -> str:
    """Return a mapping KEY as a field path part that renders on one line (repr() when it would not)."""
    return key if isinstance(key, str) and is_plain_word(key) else repr(key)
