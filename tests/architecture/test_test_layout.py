"""The tests' own layout: what tests share lives in tests/support, conftests hold only what pytest must find there,
and no test imports another test module or a conftest."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"
# Programs the tests run by path (never imported): stand-ins for a tool kiln calls.
STAND_INS = frozenset({TESTS / "ci" / "fake_cdk.py"})
# A test module or conftest named in a string argument, as __import__, importlib and monkeypatch take them.
DOTTED_TEST_MODULE = re.compile(r"^tests(?:\.\w+)*?\.(?:conftest|test_\w+)\b")


def _python_files(*roots: Path) -> list[Path]:
    return sorted(path for root in roots for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def _is_test_or_conftest(name: str) -> bool:
    """Whether the dotted module NAME is a test module (test_*) or a conftest."""
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def imported_test_modules(source: str) -> list[str]:
    """Every test module or conftest SOURCE imports, at any depth ("tests.x.test_y", "tests.x.conftest"), also by
    name in a string (`__import__("tests.x.conftest")`, `importlib.import_module`, `monkeypatch.setattr`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            texts = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            named = [DOTTED_TEST_MODULE.match(text) for text in texts]
            found += [match.group(0) for match in named if isinstance(match, re.Match)]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_or_conftest(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_test_or_conftest(node.module):
                found.append(node.module)
            elif node.module == "tests" or node.module.startswith("tests."):
                found += [f"{node.module}.{alias.name}" for alias in node.names if _is_test_or_conftest(alias.name)]
    return found


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in ("pytest.fixture", "fixture")


def conftest_strays(source: str) -> list[str]:
    """The module-level statements of a conftest that pytest does not look for there: anything but imports, the
    docstring, pytest_plugins or pytestmark, fixtures and pytest_* hooks (one line each, with its line number)."""
    strays = []
    for index, node in enumerate(ast.parse(source).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] in (
            ["pytest_plugins"],
            ["pytestmark"],
        ):
            continue
        if isinstance(node, ast.FunctionDef) and (
            node.name.startswith("pytest_") or any(_is_fixture(d) for d in node.decorator_list)
        ):
            continue
        strays.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return strays


def test_no_test_imports_a_conftest_or_another_test_module() -> None:
    """What tests share is in tests/support: importing a test module runs (and may collect) its tests twice, and
    a conftest is pytest's to load."""
    found = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _python_files(TESTS, ROOT / "benchmarks", ROOT / ".ci")
        for module in imported_test_modules(path.read_text())
    }
    assert not found, sorted(found)


def test_every_conftest_holds_only_fixtures_hooks_and_marks() -> None:
    found = {
        f"{path.relative_to(ROOT)} {stray}"
        for path in TESTS.rglob("conftest.py")
        for stray in conftest_strays(path.read_text())
    }
    assert not found, sorted(found)


def test_beside_the_tests_are_only_test_modules_conftests_and_packages() -> None:
    """A helper module beside the tests belongs in tests/support (stand-in programs run by path excepted)."""
    allowed = ("__init__.py", "conftest.py")
    found = {
        str(path.relative_to(ROOT))
        for path in _python_files(TESTS)
        if SUPPORT not in path.parents
        and path not in STAND_INS
        and not (path.name in allowed or path.name.startswith("test_"))
    }
    assert not found, sorted(found)


def test_no_sibling_imports_by_a_test_directory_on_sys_path() -> None:
    """A test directory without __init__.py is put on sys.path by pytest: a module there imported by its bare name
    (`import helpers`) is a helper module beside the tests; it belongs in tests/support, imported as tests.support.*."""
    beside = {path.stem for path in _python_files(TESTS) if SUPPORT not in path.parents and path.stem != "__init__"}
    found = set()
    for path in _python_files(TESTS):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found |= {f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in beside}
    assert not found, sorted(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from tests.conftest import ROOT\n", ["tests.conftest"]),
        ("def f():\n    from tests.bootstrap.test_render import local_config\n", ["tests.bootstrap.test_render"]),
        ("from tests.connect import test_iam\n", ["tests.connect.test_iam"]),
        ("import tests.ci.conftest\n", ["tests.ci.conftest"]),
        ('ENV = __import__("tests.bootstrap.conftest", fromlist=["x"]).ENV\n', ["tests.bootstrap.conftest"]),
        ('monkeypatch.setattr("tests.connect.test_iam.write_spec", None)\n', ["tests.connect.test_iam"]),
        ("from tests.support.specs import MINIMAL_SPEC\nfrom kiln.spec import load\n", []),
    ],
)
def test_the_import_check_sees_test_modules_and_conftests_however_imported(source: str, expected: list[str]) -> None:
    assert imported_test_modules(source) == expected


def test_the_conftest_check_passes_fixtures_hooks_and_marks_and_names_anything_else() -> None:
    source = '''"""Fixtures."""
import pytest
from tests.support.fake_aws import aws_env as aws_env
pytestmark = pytest.mark.slow
@pytest.fixture(scope="session")
def built() -> int:
    return 1
def pytest_collection_modifyitems(items) -> None:
    pass
REGION = "us-east-1"
def helper() -> None:
    pass
print("loaded")
'''
    assert conftest_strays(source) == [
        "line 10: REGION = 'us-east-1'",
        "line 11: def helper() -> None:",
        "line 13: print('loaded')",
    ]
