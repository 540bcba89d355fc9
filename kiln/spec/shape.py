"""Turn pydantic's validation errors into spec problems a person can act on."""

from __future__ import annotations

import copy
import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kiln.spec.models import PATTERN_RULES
from kiln.spec.problems import Path, Problem, shown
from kiln.spec.rules.common import key_part

Model = typing.TypeVar("Model", bound=BaseModel)

_TYPE_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "model_type": "must be a mapping of keys",
    "model_attributes_type": "must be a mapping of keys",
    "dict_type": "must be a mapping of keys",
    "list_type": "must be a list",
}


def _unwrap(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else annotation
    return annotation


def model_at(root: type[BaseModel], path: Path) -> type[BaseModel] | None:
    """Return the model class that describes the mapping at PATH, if there is one."""
    current: Any = root
    for part in path:
        current = _unwrap(current)
        origin = typing.get_origin(current)
        if isinstance(part, int) and origin is list:
            current = typing.get_args(current)[0]
        elif isinstance(part, str) and origin is dict:
            current = typing.get_args(current)[1]
        elif isinstance(part, str) and isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _describe(root: type[BaseModel], loc: Path, error: ErrorDetails) -> str:
    kind = error["type"]
    got = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = model_at(root, loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        hint = _did_you_mean(str(loc[-1]), allowed)
        return f"unknown key{hint or ''}" + ("" if hint else f" (allowed: {', '.join(allowed)})")
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        choices = [c.strip().strip("'") for c in str(ctx.get("expected", "")).replace(" or ", ", ").split(",")]
        choices = [c for c in choices if c]
        hint = _did_you_mean(str(got), choices) if isinstance(got, str) else ""
        return f"must be one of {', '.join(choices)} (got {shown(got)}){hint}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        rule = PATTERN_RULES.get(pattern, f"a string matching {pattern}")
        return f"must be {rule} (got {shown(got)})"
    if kind in _TYPE_WORDS:
        return f"{_TYPE_WORDS[kind]} (got {shown(got)})"
    message = str(error.get("msg", "is invalid"))
    message = message.removeprefix("Value error, ")
    return f"{message[0].lower()}{message[1:]} (got {shown(got)})"


def problems_from(root: type[BaseModel], exc: ValidationError) -> list[Problem]:
    """Return one Problem per pydantic error, with its path and a plain message."""
    problems = []
    for error in exc.errors(include_url=False):
        loc: Path = tuple(error["loc"])
        # A key that holds a newline or other unprintable text is shown as repr(), so the line stays one line.
        shown_path = tuple(part if isinstance(part, int) else key_part(part) for part in loc)
        problems.append(Problem(path=shown_path, message=_describe(root, loc, error)))
    return problems


# Stand-ins for required values a spec gave wrongly or not at all, so the cross-field rules can still
# look at everything else. Each is inert: whatever a rule says about it touches the invalid field itself
# (or names it as related) and is left out, because the user already has a line about that field.
_STAND_INS: dict[tuple[str, str], Any] = {
    ("ClusterSpec", "name"): "invalid",
    ("ClusterSpec", "compute"): {"backend": "pcs", "groups": []},
    ("Compute", "backend"): "pcs",
    ("Compute", "groups"): [],
    ("ComputeGroup", "name"): "invalid",
    ("ComputeGroup", "instance_type"): "",
}
_REPAIR_ROUNDS = 4


def _holds(node: Any, key: str | int) -> bool:
    """Return True when NODE (a mapping or list) has KEY."""
    if isinstance(node, list):
        return isinstance(key, int) and 0 <= key < len(node)
    return isinstance(node, dict) and key in node


def _container(data: Any, path: Path) -> Any:
    """Return the mapping or list at PATH inside DATA, or None when the path does not lead there."""
    node = data
    for part in path:
        if not _holds(node, part):
            return None
        node = node[part]
    return node


def _repair_one(root: type[BaseModel], data: Any, loc: Path) -> bool:
    """Make the value at LOC acceptable (default, stand-in, or an empty item); return False when it cannot."""
    parent_path, key = loc[:-1], loc[-1]
    parent = _container(data, parent_path)
    model = model_at(root, parent_path)
    if isinstance(parent, list) and isinstance(key, int) and _holds(parent, key):
        # A broken list item keeps its place (later items keep their index): it becomes an empty item.
        parent[key] = {}
        return True
    if not isinstance(parent, dict):
        return False
    field = model.model_fields.get(str(key)) if model else None
    if model is not None and field is not None and field.is_required():
        stand_in = _STAND_INS.get((model.__name__, str(key)))
        if stand_in is None:
            return False
        parent[key] = copy.deepcopy(stand_in)
        return True
    # An unknown key, an optional field (its default applies) or a dict entry: leave it out.
    parent.pop(key, None)
    return True


def without_shape_errors(root: type[Model], data: Any, exc: ValidationError) -> Model | None:
    """Return ROOT built from DATA with every invalid value replaced, or None when that cannot be done."""
    repaired = copy.deepcopy(data)
    for _ in range(_REPAIR_ROUNDS):
        for error in exc.errors(include_url=False):
            loc = _deepest_location(repaired, tuple(error["loc"]), error["type"])
            if not loc or not _repair_one(root, repaired, loc):
                return None
        try:
            return root.model_validate(repaired)
        except ValidationError as again:
            exc = again
    return None


def _deepest_location(data: Any, loc: Path, kind: str) -> Path:
    """Return LOC cut to where the problem sits in DATA (pydantic adds union members to some locations)."""
    if kind == "missing":
        return loc
    for end in range(len(loc), 0, -1):
        if _holds(_container(data, loc[: end - 1]), loc[end - 1]):
            return loc[:end]
    return ()
