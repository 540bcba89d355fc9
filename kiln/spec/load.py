"""Load and validate a cluster spec: YAML, shape, then cross-field rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from kiln.spec import rules
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Path, Problem, SpecError, shown
from kiln.spec.shape import problems_from, without_shape_errors
from kiln.spec.yaml_source import read_spec_file


def parse_spec(
    data: Any, source: str = "<spec>", lines: Mapping[Path, int] | None = None, *, deployed: bool = False
) -> ClusterSpec:
    """Validate DATA (already parsed) into a ClusterSpec or raise SpecError with every problem.

    DEPLOYED: DATA describes a cluster already deployed (`--before`), so what only a new cluster must meet (a version
    past its end of support) does not stop it.
    """
    try:
        return _parse(data, source, lines, deployed)
    except RecursionError:
        # Reading bounds a file's nesting (yaml_source.MAX_DEPTH); DATA built in code is not, and the models, the
        # shape repair and the rules all recurse. Whatever nests past Python's limit is one line, never a traceback.
        raise SpecError(source, [Problem(path=(), message=_TOO_DEEP)]) from None


_TOO_DEEP = "nests too deeply to check; a spec nests about 6 levels"


def _parse(data: Any, source: str, lines: Mapping[Path, int] | None, deployed: bool) -> ClusterSpec:
    if data is None:
        raise SpecError(source, [Problem(path=(), message="is empty; a spec needs at least name and compute")])
    if not isinstance(data, Mapping):
        raise SpecError(source, [Problem(path=(), message=f"must be a mapping of keys at the top (got {shown(data)})")])
    try:
        spec = ClusterSpec.model_validate(dict(data))
    except ValidationError as exc:
        shape = problems_from(ClusterSpec, exc)
        despite = _rules_despite(dict(data), exc, shape)
        raise SpecError(source, [*shape, *_kept(despite, deployed)], lines) from None
    problems = _kept(rules.check(spec), deployed)
    if problems:
        raise SpecError(source, problems, lines)
    return spec


def _kept(problems: list[Problem], deployed: bool) -> list[Problem]:
    return [p for p in problems if not (deployed and p.new_cluster_only)]


def _rules_despite(data: dict[str, Any], exc: ValidationError, shape: list[Problem]) -> list[Problem]:
    """Return the cross-field problems of DATA that do not rest on any field a shape problem already names."""
    stand_in = without_shape_errors(ClusterSpec, data, exc)
    if stand_in is None:
        return []
    return [p for p in rules.check(stand_in) if not any(p.touches(bad.path) for bad in shape)]


def load_spec(path: str | FsPath, *, deployed: bool = False) -> ClusterSpec:
    """Read, parse and validate the spec file at PATH (DEPLOYED: it describes a deployed cluster; see parse_spec)."""
    data, lines = read_spec_file(FsPath(path))
    spec = parse_spec(data, str(path), lines, deployed=deployed)
    spec._source_dir = FsPath(path).parent
    spec._source_file = str(path)
    spec._source_lines = dict(lines)
    return spec
