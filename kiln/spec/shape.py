"""Turn pydantic's validation errors into spec problems a person can act on."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from kiln.spec.models import PATTERN_RULES
from kiln.spec.problems import Path, Problem, shown

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


def _describe(root: type[BaseModel], loc: Path, error: dict[str, Any]) -> str:
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
        problems.append(Problem(path=loc, message=_describe(root, loc, error)))
    return problems
