"""docs/design.md's index of the house rules: each test it names exists, and every architecture test is named."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import ROOT

DESIGN = ROOT / "docs" / "design.md"
INDEX_TITLE = "### The house rules, each with its test"
HERE = Path(__file__).resolve().parent
TEST_ID = re.compile(r"`(tests/[A-Za-z0-9_/]+\.py)::(test_[A-Za-z0-9_]+)`")


def index_entries(text: str) -> list[tuple[str, str]]:
    """Return (module path, test name) for every test the index in TEXT names, in order."""
    section = text[text.index(INDEX_TITLE) :]
    end = section.find("\n### ", len(INDEX_TITLE))
    return TEST_ID.findall(section if end < 0 else section[:end])


def defined_tests(path: Path) -> set[str]:
    """Return the names of the test functions defined at the top of PATH."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def missing(entries: list[tuple[str, str]], root: Path) -> list[str]:
    """Return each ENTRY whose module or test does not exist under ROOT."""
    return [
        f"{module}::{test}"
        for module, test in entries
        if not (root / module).is_file() or test not in defined_tests(root / module)
    ]


ENTRIES = index_entries(DESIGN.read_text())


def test_every_test_the_index_names_exists() -> None:
    assert len(ENTRIES) > 20 and missing(ENTRIES, ROOT) == []


def test_every_architecture_test_module_is_in_the_index() -> None:
    named = {module for module, _ in ENTRIES}
    modules = {str(path.relative_to(ROOT)) for path in HERE.glob("test_*.py") if path != Path(__file__).resolve()}
    assert modules and modules - named == set()


def test_the_index_check_sees_a_renamed_test(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_kept():\n    pass\n")
    row = "| rule | `tests/test_x.py::test_kept`, `tests/test_x.py::test_gone` |"
    text = f"{INDEX_TITLE}\n\n{row}\n\n### Next\n`tests/y.py::test_z`"
    entries = index_entries(text)
    assert entries == [("tests/test_x.py", "test_kept"), ("tests/test_x.py", "test_gone")]
    assert missing(entries, tmp_path) == ["tests/test_x.py::test_gone"]
