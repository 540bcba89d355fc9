"""The construct library knows nothing of the spec or the app's stacks, and accepts only reviewed nag findings."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

CONSTRUCTS = ROOT / "kiln" / "constructs"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_construct_module_imports_the_spec_or_the_stacks() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted(CONSTRUCTS.glob("*.py"))
        for name in _imports(path)
        if name.split(".")[:2] in (["kiln", "spec"], ["kiln", "stacks"])
    }
    assert offenders == set()


def test_the_boundary_check_sees_a_spec_import(tmp_path: Path) -> None:
    # The check above must be able to fail: a module importing the spec is found.
    module = tmp_path / "bad.py"
    module.write_text("from kiln.spec.models import ClusterSpec\nimport kiln.stacks.app\n")
    assert _imports(module) == {"kiln.spec.models", "kiln.stacks.app"}


def test_cdk_nag_findings_are_acknowledged_only_from_the_reviewed_list() -> None:
    """Rule ids and reasons live in nag_rules.py; no other construct module spells one out."""
    spelled = {
        path.name
        for path in CONSTRUCTS.glob("*.py")
        if path.name not in ("nag_rules.py", "_checks.py") and "AwsSolutions-" in path.read_text()
    }
    assert spelled == set()
