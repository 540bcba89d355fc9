"""Specs as plain data: the smallest valid one, edits of a copy, what `kiln validate` says, a one-line refusal."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.cli.main import main

# The smallest valid spec as plain data (PCS, one p5 group, persistent Lustre); tests copy it before changing it.
MINIMAL_SPEC = {
    "name": "t",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "storage": {"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}},
    "compute": {"backend": "pcs", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}]},
}


def spec_problems(spec: dict) -> list[str]:
    """Return the lines `kiln validate` prints for the spec SPEC (plain data), none when it is valid."""
    from kiln.spec import SpecError, parse_spec

    try:
        parse_spec(spec, "x.yaml")
    except SpecError as error:
        return error.lines_out()
    return []


# A spec edit's marker for a key to drop (changed).
DELETE = object()


def changed(data: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """Return a copy of spec DATA with CHANGES: `a__b=value` sets data[a][b] (making dicts on the way), DELETE drops."""
    result = copy.deepcopy(dict(data))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = result
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return result


def assert_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, spec: dict, field: str, words: str
) -> None:
    """Assert that `kiln validate` refuses SPEC with exit 2 and one line that names FIELD and says WORDS."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}:")
    assert f": {field}: " in lines[0]
    assert words in lines[0]
    assert "Traceback" not in err + out
