"""kiln.metrics stays node-side: the standard library, prometheus_client and itself, nothing else."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "kiln" / "metrics"
# The exporters' names and ports and the region's shape: kiln.catalog is standard library only, in kiln's wheel.
CATALOG = ("kiln.catalog.exporters", "kiln.catalog.names")
PROGRAM = """
import importlib, json, pkgutil, sys
import kiln.metrics
names = [m.name for m in pkgutil.walk_packages(kiln.metrics.__path__, "kiln.metrics.")]
for name in names:
    # __main__ would run the CLI; its one import is kiln.metrics.cli.
    if not name.endswith("__main__"):
        importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module or "")
    return names


def test_every_module_imports_only_the_stdlib_prometheus_client_kiln_metrics_and_the_catalog() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "slurm.py", "efa.py", "serve.py", "cli.py", "__main__.py"}
    offenders = {
        f"{path.name}: {name}"
        for path in modules
        for name in _imports(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] != "prometheus_client"
        and not (name == "kiln.metrics" or name.startswith("kiln.metrics."))
        and name not in CATALOG
    }
    assert offenders == set()


def test_importing_all_of_it_loads_of_kiln_only_the_catalog_and_no_toolkit_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(done.stdout)

    assert {
        "kiln.metrics.cli",
        "kiln.metrics.slurm",
        "kiln.metrics.efa",
        "kiln.metrics.serve",
        "kiln.metrics.targets",
        "kiln.metrics.agent",
    } <= set(result["imported"])
    loaded = result["modules"]
    assert [m for m in loaded if m.startswith("kiln.") and not m.startswith(("kiln.metrics", "kiln.catalog"))] == []
    toolkit = ("aws_cdk", "constructs", "cdk_nag", "jsii", "boto3", "botocore", "pydantic", "yaml", "jinja2")
    assert [m for m in loaded if m.split(".")[0] in toolkit] == []
