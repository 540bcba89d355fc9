"""The launcher stays node-side: importing all of it pulls in no CDK, boto3, pydantic, yaml or jinja2."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.launcher import SUBPROCESS_TIMEOUT_S, clean_env

FORBIDDEN = ("aws_cdk", "constructs", "cdk_nag", "jsii", "boto3", "botocore", "pydantic", "yaml", "jinja2")
ALLOWED_KILN = ("kiln", "kiln.catalog", "kiln.launcher")

PROGRAM = """
import importlib, json, pkgutil, sys
import kiln.launcher
names = [m.name for m in pkgutil.walk_packages(kiln.launcher.__path__, "kiln.launcher.")]
for name in names:
    # __main__ would run the CLI; its one import is covered by importing kiln.launcher.cli.
    if not name.endswith("__main__"):
        importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""


def test_launcher_imports_nothing_it_must_not():
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    result = json.loads(done.stdout)
    # Guard against a vacuous pass: the walk must have found the real modules.
    assert {"kiln.launcher.cli", "kiln.launcher.smoke", "kiln.launcher.check_worker"} <= set(result["imported"])
    modules = result["modules"]
    leaked = [m for m in modules if m.split(".")[0] in FORBIDDEN]
    assert leaked == []
    kiln_modules = [m for m in modules if m == "kiln" or m.startswith("kiln.")]
    outside = [m for m in kiln_modules if not any(m == a or m.startswith(a + ".") for a in ALLOWED_KILN)]
    assert outside == []
    assert "torch" in modules
