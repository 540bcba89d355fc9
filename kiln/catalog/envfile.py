"""Read the KILN_NAME='value' files the bootstrap writes (bundle.env, the image manifest), as lib.sh's
load_env_file reads them: nothing is executed, and a line of another shape is an error (standard library only)."""

from __future__ import annotations

import re

_LINE = re.compile(r"(KILN_[A-Z0-9_]+)=(.*)")


def parse_env_file(text: str, *, source: str = "env file") -> dict[str, str]:
    """Return NAME -> value of TEXT; comments and blank lines are skipped, one pair of single quotes is removed."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"{source}:{number}: expected KILN_NAME='value', got: {line}")
        name, value = match.groups()
        if len(value) >= 2 and value.startswith("'") and value.endswith("'"):
            value = value[1:-1]
        values[name] = value
    return values
