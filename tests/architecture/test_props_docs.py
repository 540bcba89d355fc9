"""Every props dataclass of the construct library documents every field and its default, in one checkable form.

The convention: the class docstring has one entry per field, a line `name: what it is` at the body's indent, continued
on lines indented deeper. The entry of a field with a default says `default`; a literal default (a number, a string,
True or False) is written as it is, one taken from a constant, a factory or None is described in words: "default
none" goes on to say what happens then (`default none: ...` or `default none (...)`). An entry names a field that
exists.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import textwrap
from dataclasses import dataclass, field

import pytest

import kiln.constructs

ENTRY = re.compile(r"^(?P<name>[a-z_][a-z0-9_]*): ")
# "default none" that stops there: the reader is left to guess what happens without the field.
BARE_NONE = re.compile(r"default:? none(?![:(]| \()", re.IGNORECASE)


def _props_classes() -> list[type]:
    """Every *Props dataclass of a kiln.constructs module, and every dataclass the package exports (the props' parts:
    node groups, capacity, volumes)."""
    exported = set(kiln.constructs.__all__)
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(kiln.constructs.__path__):
        if info.ispkg:  # grafana_code: Lambda code, no constructs
            continue
        module = importlib.import_module(f"kiln.constructs.{info.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and dataclasses.is_dataclass(value)
                and (name.endswith("Props") or name in exported)
            ):
                found[f"{module.__name__}.{name}"] = value
    return [found[key] for key in sorted(found)]


def _entries(doc: str) -> dict[str, str]:
    """Return the docstring's entries by field name, each with its continuation lines."""
    entries: dict[str, str] = {}
    current = None
    for line in inspect.cleandoc(doc).splitlines()[1:]:
        match = ENTRY.match(line)
        if match:
            current = match["name"]
            entries[current] = line
        elif current is not None and line.startswith((" ", "\t")):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


def _defaults(cls: type) -> dict[str, ast.expr | None]:
    """Return each field's default as its source expression; None for a required field. A field(...) default is its
    default= or default_factory= expression."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    defaults: dict[str, ast.expr | None] = {}
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            value = statement.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                value = next((k.value for k in value.keywords if k.arg in ("default", "default_factory")), None)
            defaults[statement.target.id] = value
    return defaults


def _literal(expression: ast.expr) -> str | int | float | bool | None:
    """Return the default EXPRESSION's value when it is a literal number, string or boolean, else None."""
    try:
        value = ast.literal_eval(expression)
    except ValueError:
        return None
    return value if isinstance(value, str | int | float | bool) else None


def docstring_problems(cls: type) -> list[str]:
    """Return one line for each way CLS's docstring misses the convention."""
    entries = _entries(cls.__doc__ or "")
    defaults = _defaults(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    problems = [f"{cls.__name__}.{name}: no entry" for name in names if name not in entries]
    problems += [f"{cls.__name__}: entry {name!r} is not a field" for name in entries if name not in names]
    for name in names:
        entry, default = entries.get(name), defaults.get(name)
        if entry is None or default is None:
            continue
        if "default" not in entry.lower():
            problems.append(f"{cls.__name__}.{name}: its default is not documented")
            continue
        if BARE_NONE.search(entry):
            problems.append(f"{cls.__name__}.{name}: its entry says 'default none' but not what happens then")
        literal = _literal(default)
        if literal is not None and literal != "":
            spelled = {str(literal)} | ({f"{literal:,}"} if type(literal) is int else set())
            if not any(text in entry for text in spelled):
                problems.append(f"{cls.__name__}.{name}: its entry does not say the default {literal!r}")
    return problems


def test_the_walk_finds_the_props_and_their_parts() -> None:
    names = {cls.__name__ for cls in _props_classes()}
    assert {"PcsClusterProps", "EksTrainingClusterProps", "TrainingVpcProps", "EnvironmentReaperProps"} <= names
    assert {"PcsNodeGroup", "AcceleratedNodeGroup", "CapacityOption", "NodeBootstrap", "LustreVolume"} <= names


@pytest.mark.parametrize("cls", _props_classes(), ids=lambda cls: cls.__name__)
def test_every_props_docstring_documents_every_field_and_its_default(cls: type) -> None:
    assert docstring_problems(cls) == []


@dataclass(frozen=True, kw_only=True)
class _Undocumented:
    """Props for a construct whose docstring has drifted.

    name: documented.
    size: the default is a number, but the entry says another one; default 10.
    mode: an entry that says nothing of its value.
    gone: a field that no longer exists.
    extra: further settings; default none.
    """

    name: str
    size: int = 20
    mode: str = "fast"
    labels: dict[str, str] = field(default_factory=dict)
    extra: tuple[str, ...] = ()


def test_the_check_finds_a_missing_entry_a_missing_or_wrong_default_and_a_stale_entry() -> None:
    assert docstring_problems(_Undocumented) == [
        "_Undocumented.labels: no entry",
        "_Undocumented: entry 'gone' is not a field",
        "_Undocumented.size: its entry does not say the default 20",
        "_Undocumented.mode: its default is not documented",
        "_Undocumented.extra: its entry says 'default none' but not what happens then",
    ]
