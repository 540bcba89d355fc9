"""One exception hierarchy, one AWS-error module, one mapping to what a command prints and its exit code.

Found on the source, so a new exception class, a new `raise` or a new `except ValueError` in a command cannot escape.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import functools
import inspect
from collections.abc import Callable
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from kiln.aws import errors as aws_errors
from kiln.ci.reaper_code.kiln_reaper import teardown
from kiln.cli.errors import one_line_failures
from kiln.contracts.errors import EXIT_FAILURE, EXIT_INPUT, Failure, InputError, KilnError
from kiln.spec.problems import Problem, SpecError
from tests.support.paths import ROOT

KILN = ROOT / "kiln"
# Code that cannot import kiln keeps its own exceptions: node-side packages (in the node wheel, without
# kiln.contracts) and the Lambda functions' code (stdlib and boto3 only). The catalog's dev-side refresh is kiln's.
OWN_EXCEPTIONS = (
    "kiln/catalog",
    "kiln/launcher",
    "kiln/metrics",
    "kiln/ci/reaper_code",
    "kiln/constructs/grafana_code",
)
NOT_NODE_SIDE = ("kiln/catalog/refresh.py",)
ROOTS = {"KilnError", "InputError", "Failure"}


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _kiln_side(path: Path) -> bool:
    name = _relative(path)
    return name in NOT_NODE_SIDE or not name.startswith(OWN_EXCEPTIONS)


@functools.cache
def _sources() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((path, ast.parse(path.read_text(), filename=str(path))) for path in sorted(KILN.rglob("*.py")))


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


Classes = dict[str, list[tuple[str, tuple[str, ...]]]]


def _classes() -> Classes:
    """Every class kiln defines: name -> where each class of that name is, and its bases' names."""
    found: Classes = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((_relative(path), tuple(map(_base_name, node.bases))))
    return found


def _ancestors(name: str, classes: Classes) -> set[str]:
    """The bases of every class named NAME, theirs and so on, by name (builtins included)."""
    seen: set[str] = set()
    todo = [base for _, bases in classes.get(name, []) for base in bases]
    while todo:
        base = todo.pop()
        if base not in seen:
            seen.add(base)
            todo.extend(b for _, bases in classes.get(base, []) for b in bases)
    return seen


def _is_exception(name: str, classes: Classes) -> bool:
    ancestors = _ancestors(name, classes)
    builtin = [getattr(builtins, base, None) for base in ancestors]
    return bool(ancestors & ROOTS) or any(isinstance(b, type) and issubclass(b, BaseException) for b in builtin)


def _exceptions(classes: Classes) -> dict[str, str]:
    """Every exception class: name -> its file (one class of each name, so a name is one class)."""
    found = {name: [path for path, _ in defined] for name, defined in classes.items() if _is_exception(name, classes)}
    assert {name for name, paths in found.items() if len(paths) > 1} == set()
    return {name: paths[0] for name, paths in found.items()}


def _kiln_exceptions() -> dict[str, set[str]]:
    """Every exception class of kiln's own code (OWN_EXCEPTIONS aside): name -> its ancestors' names."""
    classes = _classes()
    return {
        name: _ancestors(name, classes)
        for name, path in _exceptions(classes).items()
        if name not in ROOTS and _kiln_side(ROOT / path)
    }


def _raised() -> set[tuple[str, str]]:
    """(file, class name) of every `raise NAME(...)` in kiln's own code."""
    found = set()
    for path, tree in _sources():
        if _kiln_side(path):
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                    found.add((_relative(path), _base_name(node.exc.func)))
    return found


def test_every_exception_of_kiln_is_an_input_error_or_a_failure() -> None:
    exceptions = _kiln_exceptions()
    assert len(exceptions) > 30  # the walk finds them: SpecError, RemoteError, UnsafeOutput, ...
    outside = {name for name, ancestors in exceptions.items() if not ancestors & ROOTS}
    assert outside == set(), "derive these from kiln.contracts.errors.InputError or Failure"
    # A base of both kinds (LockError: an unreadable lock, a failed download) is a KilnError that is never raised.
    neither = {name for name, ancestors in exceptions.items() if not ancestors & {"InputError", "Failure"}}
    assert neither == {"LockError"}
    raised = {name for _, name in _raised()}
    assert raised & neither == set()


def test_what_kiln_raises_of_its_own_is_one_kind() -> None:
    exceptions = _kiln_exceptions()
    both = {name for name, ancestors in exceptions.items() if {"InputError", "Failure"} <= ancestors}
    assert both == set()
    # Classes by name (a lower-case name is a function that returns one, or `type(error)` keeping a kind).
    others = {
        name
        for _, name in _raised()
        if name[:1].isupper() and name not in exceptions and name not in ROOTS and not hasattr(builtins, name)
    }
    # argparse's own argument error (argparse says it, exit 2) and PyYAML's, which the spec loader turns into a
    # problem line.
    assert others == {"ArgumentTypeError", "ConstructorError"}


def test_the_construct_library_and_the_stacks_raise_kilns_kinds_only() -> None:
    # A refused prop is a PropError and a spec the stacks cannot build an UnbuildableSpec: kiln's InputError (one
    # line, exit 2) and a ValueError too, as the CDK's refusals are. A bare builtin would be a traceback.
    builtin = {
        f"{path}: {name}"
        for path, name in _raised()
        if path.startswith(("kiln/constructs/", "kiln/stacks/")) and hasattr(builtins, name)
    }
    assert builtin == set()
    assert {("kiln/stacks/compute.py", "UnbuildableSpec"), ("kiln/constructs/_checks.py", "PropError")} <= _raised()


def test_the_exemptions_are_what_cannot_import_kiln() -> None:
    exempt = {name for name, path in _exceptions(_classes()).items() if not _kiln_side(ROOT / path)}
    assert exempt == {
        "UnknownInstanceType",  # kiln.catalog: node-side, in the node wheel
        "UnknownPlatformFact",
        "UsageError",  # kiln.launcher
        "LaunchError",
        "Timeout",  # kiln.launcher.bounded: a child that did not answer, caught by each check that starts one
        "Refused",  # kiln.launcher.drain_request: a request root's side does not act on, said in its answer
        "CommandError",  # kiln.metrics
        "TeardownFailed",  # the reaper's Lambda code; `kiln ci down` says it as a Failure
        "GrafanaUnreachable",  # the Grafana provisioner's Lambda code
        "ProvisioningFailed",
    }


def _command_modules() -> list[Path]:
    """kiln's command modules (node-side commands keep their own: they cannot import kiln.cli.errors)."""
    return sorted(path for path in (KILN / "cli").glob("*.py") if _kiln_side(path))


def _catches_value_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(name, ast.Name) and name.id == "ValueError" for name in caught)


def _parses_a_number(block: ast.Try) -> bool:
    """Whether BLOCK's body is one int(...) or float(...) of an argument's text: Python's own ValueError."""
    if len(block.body) != 1 or not isinstance(block.body[0], (ast.Assign, ast.Return)):
        return False
    call = block.body[0].value
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("int", "float")


def test_no_command_catches_a_bare_value_error() -> None:
    modules = _command_modules()
    assert KILN / "cli" / "main.py" in modules and KILN / "cli" / "ci_identity.py" in modules and len(modules) > 10
    offenders = {
        f"{_relative(path)}:{handler.lineno}"
        for path in modules
        for block in ast.walk(ast.parse(path.read_text()))
        if isinstance(block, ast.Try) and not _parses_a_number(block)
        for handler in block.handlers
        if _catches_value_error(handler)
    }
    assert offenders == set(), (
        "raise an InputError subclass where the ValueError comes from, and let the mapping say it"
    )


def test_the_check_sees_a_value_error_handler(tmp_path: Path) -> None:
    # The check above must be able to fail: a handler around kiln's own call is found, one around int() is not.
    around_a_call = "try:\n    run(args)\nexcept (OSError, ValueError):\n    pass\n"
    around_int = "try:\n    n = int(text)\nexcept ValueError:\n    n = 0\n"
    module = ast.parse(around_a_call + around_int)
    blocks = [node for node in ast.walk(module) if isinstance(node, ast.Try)]
    assert [_parses_a_number(b) for b in blocks] == [False, True]
    assert all(_catches_value_error(b.handlers[0]) for b in blocks)


def _client_error(code: str, message: str = "no", operation: str = "DescribeThings") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


ERROR_CODE_CASES = [
    _client_error("AccessDenied"),
    _client_error("ThrottlingException", "slow down"),
    _client_error(""),
    ClientError({"Error": {"Message": "no code"}}, "DescribeThings"),
    ClientError({}, "DescribeThings"),
    ClientError({"Error": {"Code": 404}}, "HeadBucket"),
]


def test_the_reaper_keeps_its_own_error_code_equal_to_kilns() -> None:
    # The Lambda's code imports nothing of kiln: its copy must stay the same function, word for word.
    assert inspect.getsource(teardown.error_code) == inspect.getsource(aws_errors.error_code)
    assert [teardown.error_code(e) for e in ERROR_CODE_CASES] == [aws_errors.error_code(e) for e in ERROR_CODE_CASES]
    assert [aws_errors.error_code(e) for e in ERROR_CODE_CASES] == [
        "AccessDenied",
        "ThrottlingException",
        "",
        "",
        "",
        "404",
    ]


def test_only_the_reapers_own_code_uses_its_error_code() -> None:
    users = {
        _relative(path)
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").endswith("kiln_reaper.teardown")
        and "error_code" in {alias.name for alias in node.names}
    }
    assert users == set()


def test_aws_call_says_the_call_in_one_line_in_the_callers_kind() -> None:
    class Refused(Failure):
        pass

    with pytest.raises(aws_errors.AwsCallFailed) as denied, aws_errors.aws_call("ec2:DescribeImages"):
        raise _client_error("UnauthorizedOperation", "You are not\nauthorized", "DescribeImages")
    assert str(denied.value) == (
        "ec2:DescribeImages was denied (UnauthorizedOperation): allow it for the AWS identity running kiln; "
        "AWS said: You are not authorized"
    )
    assert denied.value.__cause__ is None and denied.value.__suppress_context__
    unreachable = pytest.raises(Refused, match=r"^s3:ListBucket: Could not connect to the endpoint URL")
    with unreachable, aws_errors.aws_call("s3:ListBucket", Refused):
        raise EndpointConnectionError(endpoint_url="https://s3.example")
    with pytest.raises(aws_errors.NoCredentials), aws_errors.aws_call("sts:GetCallerIdentity", Refused):
        raise NoCredentialsError()


def _run(handler: Callable[[argparse.Namespace], int], **options: object) -> int:
    return one_line_failures("kiln thing", handler, **options)(argparse.Namespace())


def _raising(error: BaseException) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise error

    return handler


def test_the_mapping_says_each_kind_in_one_line_with_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    spec = SpecError("c.yaml", [Problem(path=("name",), message="a"), Problem(path=("region",), message="b")])
    cases: list[tuple[BaseException, int, str]] = [
        (spec, EXIT_INPUT, "c.yaml: name: a\nc.yaml: region: b\n"),
        (InputError("--ttl 0h: too short"), EXIT_INPUT, "kiln thing: --ttl 0h: too short\n"),
        (Failure("the stack would not delete"), EXIT_FAILURE, "kiln thing: the stack would not delete\n"),
        # A message that already names the command is the whole line (an output path's refusal).
        (InputError("kiln thing --out: refusing /"), EXIT_INPUT, "kiln thing --out: refusing /\n"),
        (
            NoCredentialsError(),
            EXIT_FAILURE,
            "kiln thing: no AWS credentials: set or refresh them (environment, profile, SSO or instance role) for "
            "the account to use\n",
        ),
        (
            aws_errors.NoCredentials(_client_error("ExpiredToken", operation="GetCallerIdentity")),
            EXIT_FAILURE,
            "kiln thing: no AWS credentials (AWS rejected those found: ExpiredToken on GetCallerIdentity): set or "
            "refresh them (environment, profile, SSO or instance role) for the account to use\n",
        ),
        (
            _client_error("RequestLimitExceeded"),
            EXIT_FAILURE,
            "kiln thing: DescribeThings was throttled by AWS (RequestLimitExceeded) even after retries: wait a minute "
            "and run again\n",
        ),
        (
            EndpointConnectionError(endpoint_url="https://ec2.example"),
            EXIT_FAILURE,
            'kiln thing: Could not connect to the endpoint URL: "https://ec2.example"\n',
        ),
    ]
    for error, code, said in cases:
        assert _run(_raising(error)) == code
        assert capsys.readouterr() == ("", said), error


def test_the_mapping_takes_what_a_command_says_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    # kiln diff: exit 1 is a refused change, so a failure exits 2; it says what works offline.
    assert _run(_raising(NoCredentialsError()), failed_exit=2, otherwise="compare offline") == 2
    assert capsys.readouterr().err.endswith("for the account to use, or compare offline\n")
    assert _run(_raising(Failure("cannot compare")), failed_exit=2) == 2
    # kiln local and kiln job say `error:` as argparse does; kiln local says a refused file in one line, exit 1.
    assert _run(_raising(InputError("no cluster")), error_word=True) == 2
    assert _run(_raising(PermissionError(13, "Permission denied", "/x")), error_word=True, os_error_exit=1) == 1
    assert capsys.readouterr().err.splitlines() == [
        "kiln thing: cannot compare",
        "kiln thing: error: no cluster",
        "kiln thing: error: [Errno 13] Permission denied: '/x'",
    ]
    # Without os_error_exit an OSError is not the command's to say, and nothing but kiln's own errors is.
    with pytest.raises(PermissionError):
        _run(_raising(PermissionError(13, "Permission denied")))
    with pytest.raises(ValueError, match="a bug"):
        _run(_raising(ValueError("a bug")))


def test_the_kinds_are_the_exit_codes_the_commands_document() -> None:
    assert (EXIT_INPUT, EXIT_FAILURE) == (2, 1)
    assert issubclass(InputError, KilnError) and issubclass(Failure, KilnError)
    assert not issubclass(InputError, Failure) and not issubclass(Failure, InputError)
