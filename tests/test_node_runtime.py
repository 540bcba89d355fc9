"""One place decides which Node.js kiln runs (kiln/host/node_runtime.py): for jsii, the CDK CLI, every command."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kiln.ci.deploy import DeployFailed, check_cdk_version, deploy_stacks
from kiln.host import node_runtime
from kiln.host.node_runtime import CDK_CLI_VERSION, NodeUnavailable, cdk_command, choose_node
from tests.support.paths import NODE_BIN, ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

needs_pinned_node = pytest.mark.skipif(not (NODE_BIN / "node").exists(), reason="node_modules missing: `make setup`")

# What jsii prints, line by line as Python bytes, when it runs on Node 20 (the 11-line banner, shortened).
BANNER = "Node 20 is end-of-life and not supported anymore by this software since 2026-10-30."


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def _fake_node(directory: Path, version: str, *, ran: Path | None = None) -> Path:
    """A `node` that answers --version with VERSION (and notes in RAN that it ran)."""
    note = f"echo ran >> {ran}\n" if ran else ""
    return _script(directory / "node", f'#!/bin/sh\n{note}[ "$1" = --version ] && echo {version} && exit 0\nexit 1\n')


def _decoys(directory: Path) -> Path:
    """node, npx and cdk that print the Node 20 banner and fail: first on PATH, they catch any spawn that kiln's
    choice did not steer (jsii's `node`, a CDK CLI's `#!/usr/bin/env node`)."""
    for name in ("node", "npx", "cdk"):
        _script(directory / name, f'#!/bin/sh\necho "decoy {name}: {BANNER}" >&2\nexit 1\n')
    return directory


# --- the choice ---------------------------------------------------------------------------------------------------


def test_the_pinned_node_wins_without_asking_the_path(tmp_path: Path) -> None:
    pinned = _script(tmp_path / "pinned" / "node", "#!/bin/sh\nexit 0\n")
    _fake_node(tmp_path / "path", "v20.20.2", ran=tmp_path / "ran")
    choice = choose_node({"PATH": str(tmp_path / "path")}, tmp_path / "pinned")
    assert choice.node == pinned and choice.pinned
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("version", ["v22.23.3", "v24.1.0"])
def test_without_the_pinned_node_a_supported_node_on_path_is_used(tmp_path: Path, version: str) -> None:
    node = _fake_node(tmp_path / "path", version)
    choice = choose_node({"PATH": str(tmp_path / "path")}, tmp_path / "no-pinned")
    assert choice.node == node and not choice.pinned


@pytest.mark.parametrize(
    ("version", "words"),
    [("v20.20.2", "Node.js v20.20.2 at "), ("v25.0.0", "Node.js v25.0.0 at "), ("", "Node.js no version at ")],
)
def test_an_unsupported_node_is_one_line_that_says_make_setup(tmp_path: Path, version: str, words: str) -> None:
    node = _fake_node(tmp_path / "path", version) if version else _script(tmp_path / "path" / "node", "#!/bin/sh\n")
    with pytest.raises(NodeUnavailable) as caught:
        choose_node({"PATH": str(tmp_path / "path")}, tmp_path / "no-pinned")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{words}{node} is not one the CDK supports (22 or 24): run `make setup`")


def test_no_node_at_all_is_one_line_that_says_make_setup(tmp_path: Path) -> None:
    with pytest.raises(NodeUnavailable, match=r"^no Node.js for the CDK: run `make setup` in the kiln checkout"):
        choose_node({"PATH": str(tmp_path)}, tmp_path / "no-pinned")


def test_require_node_points_jsii_and_the_path_at_the_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = _script(tmp_path / "bin" / "node", "#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(node_runtime, "PINNED_NODE_BIN", tmp_path / "bin")
    monkeypatch.setattr(node_runtime, "_chosen", None)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("JSII_NODE", "node")
    assert node_runtime.require_node().node == pinned
    assert os.environ["JSII_NODE"] == str(pinned)
    assert os.environ["PATH"] == f"{tmp_path / 'bin'}:/usr/bin:/bin"
    node_runtime.require_node()  # decided once; the PATH does not grow
    assert os.environ["PATH"] == f"{tmp_path / 'bin'}:/usr/bin:/bin"


def test_the_cdk_cli_is_kiln_cdk_then_the_local_then_the_checkouts_then_npx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_runtime, "PINNED_NODE_BIN", tmp_path / "checkout")
    npx = _script(tmp_path / "path" / "npx", "#!/bin/sh\n")
    environ = {"PATH": str(tmp_path / "path")}
    assert cdk_command({**environ, "KILN_CDK": "my cdk"}, tmp_path) == ["my", "cdk"]
    assert cdk_command(environ, tmp_path) == [str(npx), "--yes", f"aws-cdk@{CDK_CLI_VERSION}"]
    checkout = _script(tmp_path / "checkout" / "cdk", "#!/bin/sh\n")
    assert cdk_command(environ, tmp_path) == [str(checkout)]
    local = _script(tmp_path / "node_modules" / ".bin" / "cdk", "#!/bin/sh\n")
    assert cdk_command(environ, tmp_path) == [str(local)]
    monkeypatch.setattr(node_runtime, "PINNED_NODE_BIN", tmp_path / "no-checkout")
    with pytest.raises(NodeUnavailable, match=r"^no CDK CLI: run `make setup`"):
        cdk_command({"PATH": ""}, tmp_path / "elsewhere")


# --- a failing CDK CLI is text ------------------------------------------------------------------------------------


def test_a_failing_cdk_cli_is_told_in_decoded_text(tmp_path: Path) -> None:
    # A CLI that fails after a banner: its last line with words in it, with UTF-8 and a byte that is not UTF-8.
    said = tmp_path / "said"
    said.write_bytes(
        b"!!!!!!!!\n!!  " + BANNER.encode() + b"  !!\n!!!!!!!!\nError: caf\xc3\xa9 \xff gone\n!!!!!!!!\n\n"
    )
    failing = _script(tmp_path / "cdk", f"#!/bin/sh\ncat {said} >&2\nexit 3\n")
    with pytest.raises(DeployFailed) as caught:
        check_cdk_version([str(failing)], dict(os.environ))
    message = str(caught.value)
    assert message == (
        f"CDK CLI {failing} failed (exit 3): Error: caf\u00e9 \ufffd gone: `npm install aws-cdk@{CDK_CLI_VERSION}` "
        "here, or set KILN_CDK"
    )


def test_a_deploys_output_streams_as_the_cli_wrote_it(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assembly = tmp_path / "assembly"
    assembly.mkdir()
    manifest = {"artifacts": {"s": {"type": "aws:cloudformation:stack"}}}
    (assembly / "manifest.json").write_text(json.dumps(manifest))
    cdk = _script(tmp_path / "cdk", f"#!/bin/sh\necho '{BANNER}' >&2\necho 'the stack failed' >&2\nexit 1\n")
    with pytest.raises(DeployFailed, match=r"^s: deploy failed after \d+ s \(cdk exit 1\)"):
        deploy_stacks(assembly, cdk=[str(cdk)], workdir=tmp_path, progress=lambda line: None)
    err = capfd.readouterr().err
    assert err.splitlines() == [BANNER, "the stack failed"]


# --- every spawn and every CDK import goes through node_runtime -------------------------------------------------

KILN = ROOT / "kiln"
NODE_PROGRAMS = ("node", "npx", "cdk")
SPAWNERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "posix_spawn", "posix_spawnp"}
    | {f"exec{s}" for s in ("l", "le", "lp", "lpe", "v")}
    | {f"exec{s}" for s in ("ve", "vp", "vpe")}
    | {f"spawn{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
}
CDK_PACKAGES = ("aws_cdk", "constructs", "cdk_nag", "jsii")
LIBRARY_LAYERS = ("kiln.constructs", "kiln.stacks")  # they import the CDK; the commands that use them choose Node


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(KILN.rglob("*.py")) + [ROOT / "app.py"]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = (path, ast.parse(path.read_text(), filename=str(path)))
    return found


def _is_spawn(call: ast.Call, aliases: dict[str, str]) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr in SPAWNERS.get(aliases.get(func.value.id, func.value.id), set())
    if isinstance(func, ast.Name) and func.id in aliases and "." in aliases[func.id]:
        module, name = aliases[func.id].rsplit(".", 1)
        return name in SPAWNERS.get(module, set())
    return False


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it is, for `import subprocess as sp` and `from subprocess import run`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name): a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names}
    return names


def _names_node_program(text: str) -> bool:
    words = text.split()
    return bool(words) and words[0].rsplit("/", 1)[-1] in NODE_PROGRAMS


def _enclosing_functions(tree: ast.Module) -> dict[ast.AST, ast.AST]:
    """Each node -> the innermost function around it (the module for module-level code)."""
    owner: dict[ast.AST, ast.AST] = {}

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            owner[child] = scope
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope)

    visit(tree, tree)
    return owner


def spawn_offences(tree: ast.Module) -> list[str]:
    """Where TREE spawns node, npx or the CDK CLI, steers jsii, or looks them up: each as `line: what`."""
    aliases, owner, offences = _aliases(tree), _enclosing_functions(tree), []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_spawn(n, aliases)):
        program = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        first = program.elts[0] if isinstance(program, (ast.List, ast.Tuple)) and program.elts else program
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and _names_node_program(first.value):
            offences.append(f"{call.lineno}: spawns {first.value!r}")
            continue
        # A spawn in a function that handles the CDK CLI's command (`cdk`, `npx`) spawns it, however it got there.
        scope = owner[call]
        if scope is tree:
            continue
        identifiers = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
        identifiers |= {a.arg for n in ast.walk(scope) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
        cdk_names = sorted(i for i in identifiers if "cdk" in i.lower() or "npx" in i.lower())
        if cdk_names:
            offences.append(f"{call.lineno}: spawns next to {', '.join(cdk_names)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in ("JSII_NODE", "JSII_RUNTIME"):
            offences.append(f"{node.lineno}: sets jsii's {node.value}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "which"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in NODE_PROGRAMS
        ):
            offences.append(f"{node.lineno}: looks up {node.args[0].value!r}")
    return sorted(offences, key=lambda offence: (int(offence.split(":")[0]), offence))


def test_no_module_but_node_runtime_spawns_node_npx_or_the_cdk_cli() -> None:
    offences = [
        f"{path.relative_to(ROOT)}:{offence}"
        for name, (path, tree) in _modules().items()
        if name != "kiln.host.node_runtime"
        for offence in spawn_offences(tree)
    ]
    assert offences == []


def test_the_spawn_check_sees_the_ways_to_spawn_them() -> None:
    source = textwrap.dedent(
        """
        import subprocess
        from subprocess import Popen as P
        import os, shutil

        def direct():
            subprocess.run(["npx", "cdk", "deploy"])

        def aliased():
            P(["/usr/bin/node", "x.js"])

        def through_a_variable(cdk):
            command = [*cdk, "deploy"]
            subprocess.run(command)

        def steered():
            os.environ["JSII_NODE"] = shutil.which("node")

        def unrelated(host):
            subprocess.run(["ssh", host, "hostname"])
        """
    )
    assert spawn_offences(ast.parse(source)) == [
        "7: spawns 'npx'",
        "10: spawns '/usr/bin/node'",
        "14: spawns next to cdk",
        "17: looks up 'node'",
        "17: sets jsii's JSII_NODE",
    ]


def _imported(node: ast.stmt, modules: set[str]) -> set[str]:
    """The modules (with their packages) an import statement loads; `from kiln.stacks import app` loads its module."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names = [node.module]
        names += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
    else:
        return set()
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 2)}


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """BODY's statements in the order they run, into if/try/with/for/class blocks, not into functions (they run when
    called) or `if TYPE_CHECKING:` (never)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        blocks = [getattr(node, field, None) for field in ("body", "orelse", "finalbody")]
        blocks += [handler.body for handler in getattr(node, "handlers", [])]
        nested = [block for block in blocks if isinstance(block, list) and block and isinstance(block[0], ast.stmt)]
        out += [node] if not nested else [n for block in nested for n in _flat(block)]
    return out


def cdk_starters(modules: dict[str, tuple[Path, ast.Module]]) -> set[str]:
    """The modules whose import starts jsii (they import the CDK on import, themselves or through another)."""
    names = set(modules)
    loads = {
        name: set().union(set(), *(_imported(n, names) for n in _flat(tree.body)))
        for name, (_, tree) in modules.items()
    }
    starters: set[str] = set()
    while more := {
        name
        for name, imported in loads.items()
        if name not in starters and any(i.split(".")[0] in CDK_PACKAGES or i in starters for i in imported)
    }:
        starters |= more
    return starters


def _calls_require_node(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "require_node"
        for n in ast.walk(node)
    )


def import_offences(modules: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    """Imports that start jsii before `require_node()` ran in the same function (or module body): `module:line: what`.

    The construct and stack layers and the modules that load the CDK on import (kiln.stacks.synth,
    kiln.review.report) are what the commands import; the commands choose the Node first."""
    starters, names = cdk_starters(modules), set(modules)
    offences = []
    for name, (_, tree) in modules.items():
        if name.startswith(LIBRARY_LAYERS) or (name in starters and name != "app"):
            continue
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope_name, body in [("<module>", tree.body)] + [(f.name, f.body) for f in functions]:
            chosen = False
            for statement in _flat(body):
                loads = _imported(statement, names)
                starting = sorted(i for i in loads if i.split(".")[0] in CDK_PACKAGES or i in starters)
                if starting and not chosen:
                    offences.append(f"{name}:{statement.lineno}: {scope_name} imports {starting[-1]}")
                chosen = chosen or _calls_require_node(statement)
    return offences


def test_every_command_chooses_node_before_it_loads_the_cdk() -> None:
    modules = _modules()
    starters = cdk_starters(modules)
    assert {"kiln.stacks.synth", "kiln.review.report", "kiln.stacks.app", "kiln.constructs", "app"} <= starters
    # `kiln` itself and `kiln validate` start without Node.js; a command loads the CDK when it runs.
    assert {n for n in starters if n == "kiln.stacks" or n.startswith("kiln.node_config")} == set()
    assert {n for n in starters if n == "kiln.cli" or n.startswith("kiln.cli.")} == set()
    assert import_offences(modules) == []


def test_the_import_check_sees_a_command_that_loads_the_cdk_first(tmp_path: Path) -> None:
    modules = _modules()
    source = textwrap.dedent(
        """
        def late(args):
            from kiln.stacks.synth import synthesize
            from kiln.host.node_runtime import require_node

            require_node()

        def early(args):
            from kiln.host.node_runtime import require_node

            require_node()
            from kiln.stacks.app import new_app

        def module_of_stacks(args):
            from kiln.stacks import app
        """
    )
    modules["kiln.faces_under_test"] = (tmp_path / "x.py", ast.parse(source))
    assert [o for o in import_offences(modules) if o.startswith("kiln.faces_under_test")] == [
        "kiln.faces_under_test:3: late imports kiln.stacks.synth",
        "kiln.faces_under_test:15: module_of_stacks imports kiln.stacks.app",
    ]


# --- the commands, end to end: no banner, one line without a Node ----------------------------------------------


def _kiln(argv: list[str], cwd: Path, env: dict[str, str], *, prelude: str = "") -> subprocess.CompletedProcess:
    """Run `kiln ARGV` in a fresh interpreter (jsii not yet started), after PRELUDE."""
    code = f"import sys\n{prelude}\nfrom kiln.cli.main import main\nsys.exit(main({argv!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _clean_env(tmp_path: Path, path: str) -> dict[str, str]:
    """This process's environment without kiln's Node choice, on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JSII_", "KILN_", "AWS_", "CDK_", "GITHUB_"))}
    return {**env, "PATH": path, "HOME": str(tmp_path)}


def _assert_no_banner(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert "end-of-life" not in output and "decoy" not in output, output
    assert "b'" not in output and "Traceback" not in output, output


@needs_pinned_node
def test_report_runs_on_the_pinned_node_whatever_comes_first_on_path(tmp_path: Path) -> None:
    decoys = _decoys(tmp_path / "decoys")
    env = _clean_env(tmp_path, f"{decoys}:/usr/bin:/bin")
    result = _kiln(["report", "--no-lint", str(ROOT / "examples" / "quickstart.yaml")], tmp_path, env)
    assert result.returncode == 0, result.stderr
    _assert_no_banner(result)


STUB_CDK = """\
#!/usr/bin/env node
// The CDK CLI at the boundary of `kiln ci up`: it records the Node.js it runs on and deploys nothing.
const fs = require("fs");
const args = process.argv.slice(2);
fs.appendFileSync(process.env.STUB_CDK_LOG, JSON.stringify({ node: process.execPath, args }) + "\\n");
if (args[0] === "--version") {
  console.log("%s (build stub)");
} else if (args[0] === "deploy") {
  const outputs = args[args.indexOf("--outputs-file") + 1];
  fs.writeFileSync(outputs, JSON.stringify({ [args[1]]: { Stub: "deployed" } }));
  console.error(`stub: ${args[1]} deployed`);
} else {
  process.exit(2);
}
"""


@needs_pinned_node
def test_ci_up_runs_synthesis_and_the_cdk_cli_on_the_pinned_node(tmp_path: Path) -> None:
    decoys = _decoys(tmp_path / "decoys")
    cdk = _script(tmp_path / "stub-cdk.js", STUB_CDK % CDK_CLI_VERSION)
    log = tmp_path / "cdk-calls.jsonl"
    env = {
        **_clean_env(tmp_path, f"{decoys}:/usr/bin:/bin"),
        "KILN_CDK": str(cdk),
        "STUB_CDK_LOG": str(log),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
    }
    argv = ["ci", "up", "--spec", str(ROOT / "examples" / "quickstart.yaml"), "--run-id", "34"]
    argv += ["--skip-preflight", "--no-wait", "--workdir", str(tmp_path / "work")]
    # AWS is moto, in the command's own process: up reads CloudFormation once before it deploys.
    result = _kiln(argv, tmp_path, env, prelude="from moto import mock_aws\nmock_aws().start()")
    assert result.returncode == 0, result.stderr
    _assert_no_banner(result)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["args"][0] for c in calls] == ["--version", "deploy", "deploy", "deploy"]
    assert {Path(c["node"]).resolve() for c in calls} == {(NODE_BIN / "node").resolve()}
    assert json.loads(result.stdout)["outputs"]["quickstart-34-compute"] == {"Stub": "deployed"}


@pytest.mark.parametrize(
    "argv",
    [["report", "--no-lint", "examples/quickstart.yaml"], ["ci", "up", "--spec", "examples/quickstart.yaml"]],
    ids=["report", "ci-up"],
)
def test_without_the_pinned_node_a_command_says_make_setup_in_one_line(tmp_path: Path, argv: list[str]) -> None:
    _fake_node(tmp_path / "old", "v20.20.2")
    env = _clean_env(tmp_path, f"{tmp_path / 'old'}:/usr/bin:/bin")
    # This checkout's pinned Node, taken away.
    pinned = f"kiln.host.node_runtime.PINNED_NODE_BIN = pathlib.Path({str(tmp_path)!r})"
    prelude = f"import kiln.host.node_runtime, pathlib\n{pinned}"
    result = _kiln(argv, ROOT, env, prelude=prelude)
    assert result.returncode == 1
    command = " ".join(argv[:2]) if argv[0] == "ci" else argv[0]
    assert result.stderr.splitlines() == [
        f"kiln {command}: Node.js v20.20.2 at {tmp_path / 'old' / 'node'} is not one the CDK supports (22 or 24): "
        "run `make setup` in the kiln checkout (it installs Node 22 into node_modules), or put Node.js 22 or 24 "
        "first on PATH"
    ]
