"""What each package may import (docs/design.md, "Two flows, one direction each"), checked on the source."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

KILN = ROOT / "kiln"
# The CDK and the AWS SDK, and kiln's own AWS layer (kiln.aws) built on the SDK.
THIRD_PARTY_CLOUD = ("aws_cdk", "constructs", "cdk_nag", "jsii", "boto3", "botocore", "kiln.aws")
# The command modules (kiln.cli) and the packages behind them (kiln ci, preflight, ami, connect, ...): the top of the
# layers.
FACES = ("kiln.cli", "kiln.ci", "kiln.preflight", "kiln.ami", "kiln.connect", "kiln.hyperpod", "kiln.jobs")
# Package -> import prefixes it must never use (functions' own imports included).
FORBIDDEN = {
    "kiln.catalog": ("kiln.spec", "kiln.bootstrap", "kiln.node_config", "kiln.constructs", "kiln.stacks", "kiln.local")
    + ("pydantic",)
    + THIRD_PARTY_CLOUD,
    "kiln.spec": ("kiln.bootstrap", "kiln.node_config", "kiln.constructs", "kiln.stacks", "kiln.local")
    + THIRD_PARTY_CLOUD,
    "kiln.bootstrap": ("kiln.spec", "kiln.node_config", "kiln.constructs", "kiln.stacks", "kiln.local", "pydantic")
    + THIRD_PARTY_CLOUD,
    # spec -> the nodes' bootstrap configuration, above kiln.spec and kiln.bootstrap and without the CDK: the stacks,
    # the local cluster and the commands (`kiln validate`, report, bootstrap, ci, app.py) import it, never it them.
    "kiln.node_config": ("kiln.constructs", "kiln.stacks", "kiln.local", "kiln.cli", "pydantic")
    + FACES
    + THIRD_PARTY_CLOUD,
    # The construct library sees its props and what lies below it (contracts, catalog, bootstrap's NodeBootstrap):
    # never a face, so a construct user needs none of kiln's commands.
    "kiln.constructs": ("kiln.spec", "kiln.node_config", "kiln.stacks", "kiln.local", "kiln.aws", "pydantic") + FACES,
    # The stacks translate the spec into constructs; the faces run them, never the other way.
    "kiln.stacks": FACES,
    # The local cluster reads the spec through kiln.node_config, never the stacks: it runs without the CDK.
    "kiln.local": ("kiln.constructs", "kiln.stacks", "kiln.cli") + THIRD_PARTY_CLOUD,
    # Preflight asks AWS with boto3 and reads the spec; it never synthesizes, so it starts in a second.
    "kiln.preflight": ("kiln.constructs", "kiln.stacks", "kiln.local", "aws_cdk", "constructs", "cdk_nag", "jsii"),
    # `kiln job` writes manifests from the spec and the catalog; it never synthesizes, so it starts in a second.
    "kiln.jobs": ("kiln.constructs", "kiln.stacks", "kiln.local", "aws_cdk", "constructs", "cdk_nag", "jsii"),
    # `kiln hyperpod` and `kiln leftovers` ask AWS with boto3; they never synthesize either.
    "kiln.hyperpod": ("kiln.constructs", "kiln.stacks", "kiln.local", "aws_cdk", "constructs", "cdk_nag", "jsii"),
    # What a deploy does, judged on templates and ParallelCluster configurations alone: `kiln validate --before`
    # and `kiln diff`'s verdicts need no CDK, no Node.js and no AWS call.
    "kiln.changes": ("kiln.spec", "kiln.bootstrap", "kiln.constructs", "kiln.stacks", "kiln.local", "pydantic")
    + THIRD_PARTY_CLOUD
    + FACES,
    # What the layers agree on: the standard library and itself (test_contracts_use_the_standard_library_only).
    "kiln.contracts": ("kiln.spec", "kiln.bootstrap", "kiln.node_config", "kiln.constructs", "kiln.stacks")
    + ("kiln.local", "kiln.ci")
    + ("kiln.preflight", "kiln.ami", "kiln.catalog", "pydantic", "yaml", "jinja2")
    + THIRD_PARTY_CLOUD,
    # The reaper's Lambda code: what the Lambda runtime has (stdlib, boto3), nothing of kiln's beyond itself.
    "kiln.ci.reaper_code": ("kiln", "aws_cdk", "constructs", "cdk_nag", "jsii", "pydantic", "yaml", "jinja2"),
    # The Grafana provisioning Lambda's code, likewise.
    "kiln.constructs.grafana_code": ("kiln", "aws_cdk", "constructs", "cdk_nag", "jsii", "pydantic", "yaml", "jinja2"),
}
# Node-side kiln-metrics: the standard library, prometheus_client (install_exporters adds it), itself, and the
# exporters' names and ports and the region's shape from the catalog (standard library only, in kiln's wheel).
METRICS_MAY_IMPORT = ("prometheus_client", "kiln.metrics", "kiln.catalog.exporters", "kiln.catalog.names")
# Dev-side tools inside a node-side package, with what they alone may import: nodes never import them.
EXEMPT = {"kiln/catalog/refresh.py": ("boto3", "botocore", "kiln.aws")}
# Single modules of the standard library alone: the constructs and `kiln report` share the wildcard review.
STDLIB_ONLY = (
    "kiln/contracts/iam_wildcards.py",
    "kiln/dashboards/__init__.py",
    "kiln/catalog/exporters.py",
    "kiln/catalog/platforms.py",
)
# Single modules of the standard library and kiln.contracts (itself the standard library alone): checkov runs in
# its own venv, so the scan module imports nothing of it; its errors are kiln's kinds (kiln.contracts.errors).
# The host helpers (kiln/host) likewise: every layer that writes files or needs Node.js may import them.
STDLIB_AND_CONTRACTS = ("kiln/review/scan.py", "kiln/host/safe_output.py", "kiln/host/node_runtime.py")
# The one AWS-error module: botocore, the standard library and the kinds of error; no boto3 (it makes no session)
# and nothing of the layers above, so every layer that asks AWS may import it.
AWS_ERRORS_MAY_IMPORT = ("botocore", "kiln.contracts.errors")
# The AWS layer (kiln/aws: the session, the errors, the remote transports) sits below the commands: boto3, botocore,
# the contracts and itself. No spec (the region rule takes anything with a region), no catalog, never a layer above.
AWS_LAYER_MAY_IMPORT = ("boto3", "botocore", "kiln.contracts", "kiln.aws")
# The Lambda code runs without kiln and makes its own clients; every other session is kiln.aws.session's.
SESSION_MAKERS = ("boto3", "botocore.session")
LAMBDA_CODE = (KILN / "ci" / "reaper_code", KILN / "constructs" / "grafana_code")
# The spec's cross-field rules, one module per section of the spec: the standard library, the catalog, the contracts,
# kiln.spec's models and problems, and the sections' shared helpers; never another section's module (only the
# package's __init__ gathers the sections, in check's order).
SPEC_RULES = KILN / "spec" / "rules"
SPEC_RULES_MAY_IMPORT = ("kiln.catalog", "kiln.contracts", "kiln.spec.models", "kiln.spec.problems")
SPEC_RULES_SHARED = "kiln.spec.rules.common"
# The compute constructs take a NodeBootstrap; only BootstrapAssets renders.
COMPUTE_CONSTRUCTS = ("pcs.py", "parallelcluster.py", "hyperpod.py", "eks.py")
RENDERING = ("kiln.bootstrap.render", "kiln.bootstrap.config")


def imports_of(path: Path) -> set[str]:
    """Every module PATH imports, at any depth of the file (absolute imports only: kiln uses no others)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules(package: str) -> list[Path]:
    return sorted((KILN / package.split(".", 1)[1].replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("package", FORBIDDEN)
def test_package_imports_only_what_its_layer_may(package: str) -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _modules(package)
        for name in imports_of(path)
        if _under(name, FORBIDDEN[package]) and not _under(name, EXEMPT.get(str(path.relative_to(ROOT)), ()))
    }
    assert _modules(package) and offenders == set()


def test_metrics_imports_only_the_standard_library_and_prometheus_client() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _modules("kiln.metrics")
        for name in imports_of(path)
        if name.split(".")[0] not in sys.stdlib_module_names and not _under(name, METRICS_MAY_IMPORT)
    }
    assert _modules("kiln.metrics") and offenders == set()


@pytest.mark.parametrize("module", STDLIB_ONLY)
def test_module_imports_only_the_standard_library(module: str) -> None:
    names = imports_of(ROOT / module)
    assert names and {n for n in names if n.split(".")[0] not in sys.stdlib_module_names} == set()


@pytest.mark.parametrize("module", STDLIB_AND_CONTRACTS)
def test_module_imports_only_the_standard_library_and_the_contracts(module: str) -> None:
    names = imports_of(ROOT / module)
    others = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names and not _under(n, ("kiln.contracts",))}
    assert names and others == set()


def test_each_spec_rule_section_imports_the_layers_below_and_the_shared_helpers_only() -> None:
    sections = sorted(path for path in SPEC_RULES.glob("*.py") if path.stem != "__init__")
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sections
        for name in imports_of(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not _under(name, SPEC_RULES_MAY_IMPORT)
        and name != SPEC_RULES_SHARED
    }
    gathered = {
        name
        for name in imports_of(SPEC_RULES / "__init__.py")
        if name.split(".")[0] not in sys.stdlib_module_names and not _under(name, SPEC_RULES_MAY_IMPORT)
    }
    assert len(sections) > 1 and offenders == set()
    # The package's __init__ gathers the sections (`from kiln.spec.rules import compute, ...`) and nothing else.
    assert gathered == {"kiln.spec.rules"}


def test_the_aws_error_module_imports_botocore_and_the_standard_library_only() -> None:
    names = imports_of(KILN / "aws" / "errors.py")
    stdlib = {n for n in names if n.split(".")[0] in sys.stdlib_module_names}
    others = {n for n in names - stdlib if not _under(n, AWS_ERRORS_MAY_IMPORT)}
    assert "botocore.exceptions" in names and others == set()


def test_the_aws_layer_imports_boto3_botocore_and_the_contracts_only() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _modules("kiln.aws")
        for name in imports_of(path)
        if name.split(".")[0] not in sys.stdlib_module_names and not _under(name, AWS_LAYER_MAY_IMPORT)
    }
    assert {"session.py", "errors.py", "transport.py"} <= {path.name for path in _modules("kiln.aws")}
    assert offenders == set()


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
    assert _under("kiln.spec.models", FORBIDDEN["kiln.bootstrap"]) and _under("aws_cdk", FORBIDDEN["kiln.local"])


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
