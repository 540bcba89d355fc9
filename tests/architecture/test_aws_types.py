"""Sessions and clients carry the AWS layer's types (kiln.aws.session), never Any; their stubs are dev-only."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from tests.support.imports import imports_of
from tests.support.paths import ROOT

KILN = ROOT / "kiln"
# The Lambda code runs without kiln (and without the stubs): its clients stay as they are.
LAMBDA_CODE = (KILN / "ci" / "reaper_code", KILN / "constructs" / "grafana_code")
# What kiln names a session or a client: a parameter or field of one of these names holds one.
AWS_NAMES = frozenset(
    {"session", "client", "ec2", "s3", "ssm", "eks", "cloudformation", "cfn", "sagemaker", "fsx", "iam"}
    | {"service_quotas", "sts", "scheduler", "imagebuilder", "tagging", "amp", "kms"}
)
# A function that makes or returns a session or clients: aws_session, ec2_client, _teardown_clients.
AWS_MAKERS = re.compile(r"(^|_)(session|clients?)$")
STUBS = "mypy_boto3_"


def _is_any(annotation: ast.expr | None) -> bool:
    """Return whether ANNOTATION is Any, alone or in a union (`Any | None`, "Any", typing.Any)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _is_any(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.BinOp):
        return _is_any(annotation.left) or _is_any(annotation.right)
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any"
    )


def any_sessions(path: Path) -> set[str]:
    """Return `file:line name` for each session or client of PATH annotated Any: parameters, fields, returns."""
    found: set[str] = set()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                if arg.arg in AWS_NAMES and _is_any(arg.annotation):
                    found.add(f"{where}:{arg.lineno} {arg.arg}")
            if AWS_MAKERS.search(node.name) and _is_any(node.returns):
                found.add(f"{where}:{node.lineno} {node.name}() ->")
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in AWS_NAMES
            and _is_any(node.annotation)
        ):
            found.add(f"{where}:{node.lineno} {node.target.id}")
    return found


def _kiln_sources() -> list[Path]:
    return [p for p in sorted(KILN.rglob("*.py")) if not any(p.is_relative_to(code) for code in LAMBDA_CODE)]


def test_no_session_or_client_is_annotated_any() -> None:
    offenders = set().union(*(any_sessions(path) for path in _kiln_sources()))
    assert offenders == set()


def test_the_check_finds_a_session_or_client_annotated_any(tmp_path: Path) -> None:
    # The check above must be able to fail: a parameter, a field, a string annotation, a union and a maker's return.
    module = tmp_path / "bad.py"
    module.write_text(
        "from typing import Any\n\n"
        "def f(session: Any, *, ec2: 'Any | None' = None, region: Any = None) -> None: ...\n\n"
        "class Clients:\n    s3: Any\n    name: Any\n\n"
        "def ec2_client(region: str) -> Any: ...\n\n"
        "def good(session: Session) -> Any: ...\n"
    )
    assert any_sessions(module) == {"bad.py:3 session", "bad.py:3 ec2", "bad.py:6 s3", "bad.py:9 ec2_client() ->"}


def test_the_stubs_are_read_by_the_type_checker_only() -> None:
    # kiln imports mypy_boto3_* only under `if TYPE_CHECKING:`: the modules that annotate with them load without
    # them, so a user's install of kiln needs no stubs.
    modules = ["kiln.aws.session", "kiln.aws.remote.transport", "kiln.preflight.aws", "kiln.connect.run"]
    modules += ["kiln.ci.ready", "kiln.hyperpod.software", "kiln.ami.listing", "kiln.catalog.refresh", "kiln.cli.main"]
    program = (
        f"import json, sys, {', '.join(modules)}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({STUBS!r}) or m.endswith('-stubs'))))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == []
    guarded = {
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in _kiln_sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
        if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith(STUBS)
    }
    anywhere = {
        str(path.relative_to(ROOT)) for path in _kiln_sources() for name in imports_of(path) if name.startswith(STUBS)
    }
    assert anywhere and {entry.split(":")[0] for entry in guarded} == anywhere
    top_level = {
        f"{path.relative_to(ROOT)}: {alias.name if isinstance(node, ast.Import) else node.module}"
        for path in _kiln_sources()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if (alias.name if isinstance(node, ast.Import) else node.module or "").startswith(STUBS)
    }
    assert top_level == set()


def test_every_stub_kiln_reads_is_a_pinned_dev_dependency() -> None:
    # Each mypy_boto3_<service> kiln's annotations name is pinned in pyproject.toml's dev list, with boto3's stubs.
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pinned = {re.split(r"[=<>\[]", entry)[0].lower().replace("-", "_") for entry in dev if "==" in entry}
    read = {name.split(".")[0] for path in _kiln_sources() for name in imports_of(path) if name.startswith(STUBS)}
    assert read and read <= pinned and {"boto3_stubs", "botocore_stubs"} <= pinned
