"""No import loop between the preflight runner and its checks: each check learns what a check is from
kiln.preflight.check, and only the runner imports the checks."""

from __future__ import annotations

import ast

from kiln.preflight.check import Check
from kiln.preflight.run import all_checks
from tests.support.paths import ROOT

CHECKS = sorted((ROOT / "kiln" / "preflight" / "checks").glob("*.py"))


def _imported(path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_no_check_imports_the_runner() -> None:
    offenders = {path.name for path in CHECKS if "kiln.preflight.run" in _imported(path)}
    assert offenders == set()
    assert "kiln.preflight.run" not in _imported(ROOT / "kiln" / "preflight" / "check.py")


def test_the_runner_runs_every_check_module_once() -> None:
    modules = {path.stem for path in CHECKS if path.stem != "__init__"}
    checks = all_checks()
    assert all(isinstance(check, Check) for check in checks)
    assert sorted(check.run.__module__.rsplit(".", 1)[-1] for check in checks) == sorted(modules)
