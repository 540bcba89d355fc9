"""What each package may import (docs/design.md, "Two flows, one direction each"), checked on the source."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.imports import imports_of
from tests.support.paths import ROOT

KILN = ROOT / "kiln"
DESIGN = ROOT / "docs" / "design.md"
# The allow-list: docs/design.md's table under this line, one row per package or module.
LAYER_TABLE = "What each package may import."
# `kiln` in a row's cell names the package root alone (kiln/bootstrap/wheel.py finds the wheel's sources from it),
# never everything under it.
ROOT_PACKAGE = "kiln"
# The Lambda code runs without kiln and makes its own clients; every other session is kiln.aws.session's.
SESSION_MAKERS = ("boto3", "botocore.session")
LAMBDA_CODE = (KILN / "ci" / "reaper_code", KILN / "constructs" / "grafana_code")
# The spec's cross-field rules, one module per section of the spec: a section imports the sections' shared helpers,
# never another section (only the package's __init__ gathers the sections, in check's order).
SPEC_RULES = KILN / "spec" / "rules"
SPEC_RULES_SHARED = "kiln.spec.rules.common"
# The compute constructs take a NodeBootstrap; only BootstrapAssets renders.
COMPUTE_CONSTRUCTS = ("pcs.py", "parallelcluster.py", "hyperpod.py", "eks.py")
RENDERING = ("kiln.bootstrap.render", "kiln.bootstrap.config")


def layer_table(text: str) -> dict[str, tuple[str, ...]]:
    """Return the allow-list in TEXT (docs/design.md): each row's packages or modules and the names it may import."""
    lines = text[text.index(LAYER_TABLE) :].splitlines()
    rows: dict[str, tuple[str, ...]] = {}
    for line in lines[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        first, allowed = (cell.strip() for cell in line.strip().strip("|").split("|")[:2])
        if first == "package or module" or set(first) <= set("-: "):
            continue
        for key in re.findall(r"`([^`]+)`", first):
            rows[key] = tuple(re.findall(r"`([^`]+)`", allowed))
    return rows


TABLE = layer_table(DESIGN.read_text())


def module_name(path: Path) -> str:
    """Return PATH's dotted module name (a package's __init__.py is the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(name: str) -> bool:
    return (ROOT / name.replace(".", "/")).is_dir()


def row_of(module: str, table: dict[str, tuple[str, ...]]) -> str:
    """Return MODULE's row in TABLE: the most specific package or module it lies in."""
    return max((key for key in table if _under(module, (key,))), key=len)


def may_import(row: str, name: str, table: dict[str, tuple[str, ...]]) -> bool:
    """Return whether a module of ROW may import NAME: the standard library, its own package (a module row: only
    itself), or a name its row allows, with what lies under it (`kiln` alone: the root package itself)."""
    if name.split(".")[0] in sys.stdlib_module_names or name == "__future__":
        return True
    if name == row or (_is_package(row) and _under(name, (row,))):
        return True
    return any(name == entry if entry == ROOT_PACKAGE else _under(name, (entry,)) for entry in table[row])


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules(package: str) -> list[Path]:
    return sorted((KILN / package.split(".", 1)[1].replace(".", "/")).rglob("*.py"))


def _offences(table: dict[str, tuple[str, ...]]) -> set[str]:
    return {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(KILN.rglob("*.py"))
        for name in imports_of(path)
        if not may_import(row_of(module_name(path), table), name, table)
    }


def test_every_module_imports_only_what_its_row_of_the_layer_table_allows() -> None:
    assert len(TABLE) > 25 and _offences(TABLE) == set()


def test_every_name_the_layer_table_allows_is_imported_by_its_row() -> None:
    # The table says what the code does, no more: an allowance none of a row's modules uses is stale.
    used: dict[str, set[str]] = {row: set() for row in TABLE}
    for path in sorted(KILN.rglob("*.py")):
        row = row_of(module_name(path), TABLE)
        for name in imports_of(path):
            used[row] |= {entry for entry in TABLE[row] if name == entry or _under(name, (entry,))}
    stale = {f"{row}: {entry}" for row, entries in TABLE.items() for entry in entries if entry not in used[row]}
    rows_without_modules = {row for row in TABLE if not any(_under(module_name(p), (row,)) for p in KILN.rglob("*.py"))}
    assert stale == set() and rows_without_modules == set()


def test_every_package_has_a_row_of_its_own() -> None:
    # Only kiln/__init__.py falls to the root's row: a new package gets a row saying what it may import, and why.
    fallen = {module_name(path) for path in KILN.rglob("*.py") if row_of(module_name(path), TABLE) == ROOT_PACKAGE}
    assert fallen == {ROOT_PACKAGE}


def test_each_spec_rule_section_imports_the_shared_helpers_and_no_other_section() -> None:
    sections = sorted(path for path in SPEC_RULES.glob("*.py") if path.stem != "__init__")
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sections
        for name in imports_of(path)
        if _under(name, ("kiln.spec.rules",)) and name != SPEC_RULES_SHARED
    }
    gathered = {name for name in imports_of(SPEC_RULES / "__init__.py") if _under(name, ("kiln.spec.rules",))}
    assert len(sections) > 1 and offenders == set()
    # The package's __init__ gathers the sections (`from kiln.spec.rules import compute, ...`) and nothing else.
    assert gathered == {"kiln.spec.rules"}


def test_only_the_aws_layer_makes_a_session_or_a_client() -> None:
    # One region rule, one retry configuration and --profile hold only if every command's session is aws_session's:
    # no other module imports what makes one (boto3, botocore.session); they take the session they are given.
    makers = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in KILN.rglob("*.py")
        if not any(path.is_relative_to(code) for code in LAMBDA_CODE)
        for name in imports_of(path)
        if _under(name, SESSION_MAKERS)
    }
    assert makers == {"kiln/aws/session.py: boto3", "kiln/aws/session.py: botocore.session"}


def test_compute_constructs_never_render_or_read_a_bootstrap_config() -> None:
    offenders = {
        f"{name}: {module}"
        for name in COMPUTE_CONSTRUCTS
        for module in imports_of(KILN / "constructs" / name)
        if _under(module, RENDERING)
    }
    assert offenders == set()


def test_no_package_loads_its_names_lazily() -> None:
    # Each name has one module to import it from: no package defines a module __getattr__ (PEP 562).
    lazy = {
        str(path.relative_to(ROOT))
        for path in KILN.rglob("__init__.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    }
    assert lazy == set()


def test_construct_tests_build_from_plain_props_without_a_spec() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted((ROOT / "tests" / "constructs").glob("*.py"))
        for name in imports_of(path)
        if _under(name, ("kiln.spec", "kiln.node_config"))
    }
    examples = {
        path.name
        for path in (ROOT / "tests" / "constructs").glob("*.py")
        if '"examples" /' in path.read_text() or "examples/" in path.read_text()
    }
    assert offenders == set() and examples == set()


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    # The checks above must be able to fail: a nested import is found like a top-level one.
    module = tmp_path / "bad.py"
    module.write_text("import os\n\ndef f():\n    from kiln.spec.models import ClusterSpec\n    import aws_cdk\n")
    names = imports_of(module)
    assert names == {"os", "kiln.spec.models", "aws_cdk"}
    assert not may_import("kiln.bootstrap", "kiln.spec.models", TABLE) and not may_import(
        "kiln.local", "aws_cdk", TABLE
    )
    assert may_import("kiln.local", "os", TABLE) and may_import("kiln.catalog.refresh", "kiln.aws.session", TABLE)
    assert not may_import("kiln.catalog.exporters", "kiln.catalog.names", TABLE)


def test_the_layer_table_is_read_as_design_writes_it() -> None:
    table = layer_table(
        "What each package may import. Prose.\n\n| package or module | may import | why |\n| --- | --- | --- |\n"
        "| `kiln.a`, `kiln.b.c` | `x`, `kiln.d` | because `kiln.e` |\n| `kiln.f` | — | nothing |\n\n| other | table |\n"
    )
    assert table == {"kiln.a": ("x", "kiln.d"), "kiln.b.c": ("x", "kiln.d"), "kiln.f": ()}
    assert row_of("kiln.b.c", table) == "kiln.b.c" and row_of("kiln.a.z", table) == "kiln.a"
    # The live table finds a module's most specific row.
    assert (
        row_of("kiln.aws.session", TABLE) == "kiln.aws.session" and row_of("kiln.aws.remote.nodes", TABLE) == "kiln.aws"
    )
    # Taking an allowance away makes the check fail where the code uses it.
    narrowed = {**TABLE, "kiln.jobs": tuple(e for e in TABLE["kiln.jobs"] if e != "yaml")}
    assert any(offence.endswith(": yaml") for offence in _offences(narrowed))


def test_spec_to_bootstrap_translation_loads_without_cdk() -> None:
    # Every module of kiln.node_config, the local cluster, the command line, and what `kiln validate` imports of the
    # stacks' package (zones): none of them starts aws-cdk-lib.
    modules = sorted(f"kiln.node_config.{p.stem}" for p in _modules("kiln.node_config") if p.stem != "__init__")
    program = (
        f"import json, sys, {', '.join(modules)}, kiln.local.provision, kiln.local.cluster, kiln.cli.main\n"
        "import kiln.stacks.zones\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'jsii', 'constructs'))))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == []


def test_kiln_diff_judges_a_parallelcluster_update_without_cdk() -> None:
    # backend_refusals reads ParallelCluster's update policies from kiln.changes, never from the construct: no Node.js.
    program = (
        "import json, sys\n"
        "from kiln.cli.diff import backend_refusals\n"
        "def template(size):\n"
        "    config = {'HeadNode': {'InstanceType': size}}\n"
        "    cluster = {'ClusterName': 'c', 'ClusterConfiguration': config}\n"
        "    return {'s': {'Resources': {'C': {'Type': 'Custom::PclusterCluster', 'Properties': cluster}}}}\n"
        "lines = backend_refusals(template('m5.large'), template('m5.xlarge'))\n"
        "cdk = sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'jsii', 'constructs'))\n"
        "print(json.dumps([lines, cdk]))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    [line], cdk = json.loads(done.stdout)
    assert line.startswith("s: ParallelCluster c: HeadNode/InstanceType ") and "update policy UNSUPPORTED" in line
    assert cdk == []


def test_contracts_use_the_standard_library_only() -> None:
    for path in _modules("kiln.contracts"):
        for name in imports_of(path):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or _under(name, ("kiln.contracts",)) or name == "__future__", (
                f"{path.relative_to(ROOT)} imports {name}"
            )


# Modules in kiln/cli that are not a command of their own: the parser and its registry, the error mapping, the
# options more than one command takes, `python -m kiln.cli`, and `kiln ci identity` (a subcommand of kiln ci).
CLI_SUPPORT = {"__init__", "__main__", "main", "errors", "options", "ci_identity"}
# Node-side commands: a node runs them from kiln's wheel, without the command layer.
NODE_COMMANDS = {"kiln/launcher/cli.py", "kiln/metrics/cli.py"}


def test_every_command_is_one_module_of_kiln_cli_in_the_one_registry() -> None:
    from kiln.cli.main import COMMANDS

    elsewhere = {
        str(path.relative_to(ROOT))
        for path in KILN.rglob("*.py")
        if (path.stem == "cli" or path.stem.endswith("_cli")) and path.parent != KILN / "cli"
    }
    assert elsewhere == NODE_COMMANDS
    modules = {path.stem for path in (KILN / "cli").glob("*.py")} - CLI_SUPPORT
    assert {command.__name__ for command in COMMANDS} == {f"kiln.cli.{stem}" for stem in modules}
    assert all(callable(command.register) for command in COMMANDS)


def test_nothing_below_the_commands_imports_them() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in KILN.rglob("*.py")
        if path.parent != KILN / "cli"
        for name in imports_of(path)
        if _under(name, ("kiln.cli",))
    }
    assert offenders == set()


def test_no_module_is_loose_at_kilns_root() -> None:
    # Commands live in kiln/cli, the review tools in kiln/review, the host helpers in kiln/host.
    assert {path.name for path in KILN.glob("*.py")} == {"__init__.py"}
