"""The reaper's Lambda code carries a copy of what it uses of kiln.contracts (environment, tags; the Lambda has no
kiln): every name in the copy must equal the contract's, and the copy holds nothing the Lambda does not use."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType

import pytest

from kiln.ci.reaper_code.kiln_reaper import contract as lambda_copy
from kiln.contracts import environment, tags
from tests.support.paths import ROOT

LAMBDA_PACKAGE = ROOT / "kiln" / "ci" / "reaper_code" / "kiln_reaper"


def public_names(module: ModuleType) -> set[str]:
    """Return the names MODULE defines at its top level (constants and functions), imports left out."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return {name for name in names if not name.startswith("_")}


def differences(copy: ModuleType, *contracts: ModuleType) -> list[str]:
    """Return one line per name of COPY that no module of CONTRACTS defines, or that the first one defining it
    defines otherwise (functions compared by source)."""
    found = []
    for name in sorted(public_names(copy)):
        mine = getattr(copy, name)
        owner = next((module for module in contracts if name in public_names(module)), None)
        if owner is None:
            found.append(f"{name}: not in {', '.join(module.__name__ for module in contracts)}")
        elif callable(mine):
            if inspect.getsource(mine) != inspect.getsource(getattr(owner, name)):
                found.append(f"{name}: its source differs")
        elif mine != getattr(owner, name):
            found.append(f"{name}: {mine!r} != {getattr(owner, name)!r}")
    return found


def test_the_lambda_copy_equals_the_contract() -> None:
    assert public_names(lambda_copy) == {
        "TAG_ENVIRONMENT",
        "DELETE_ORDER",
        "SCHEDULE_GROUP",
        "stack_name",
        "at_expression",
    }
    assert differences(lambda_copy, environment, tags) == []


def test_the_comparison_finds_a_changed_value_and_a_changed_function(tmp_path: Path) -> None:
    drifted = tmp_path / "drifted.py"
    drifted.write_text(inspect.getsource(lambda_copy).replace('"default"', '"kiln"').replace("{part}", "{part}-x"))
    spec = importlib.util.spec_from_file_location("drifted", drifted)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert differences(module, environment, tags) == [
        "SCHEDULE_GROUP: 'kiln' != 'default'",
        "stack_name: its source differs",
    ]


def test_the_copy_holds_only_what_the_lambda_uses() -> None:
    used: set[str] = set()
    for path in LAMBDA_PACKAGE.glob("*.py"):
        if path.name == "contract.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "contract" and node.level == 1:
                used |= {alias.name for alias in node.names}
    assert used == public_names(lambda_copy)


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(hours=5, minutes=30)])
def test_both_write_the_same_schedule_expression(offset: timedelta) -> None:
    when = datetime(2026, 11, 23, 12, 30, 5, tzinfo=timezone(offset))
    assert lambda_copy.at_expression(when) == environment.at_expression(when)
    assert environment.parse_at_expression(lambda_copy.at_expression(when)) == when
