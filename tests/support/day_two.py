"""The day-two proof (issue 33): synthesize a spec before and after a change, and say what deploying it does.

A change passes when it deploys as an update (`assert_updates`), or when it is refused with one line per reason
(`assert_refused`). kiln.changes decides, from the resource schemas' create-only properties: what the deploy does to
each resource (`Plan.actions`: create, update, replace, same, delete), which creates CloudFormation refuses (a
replacement that keeps its custom name, a resource created under a name an old one holds in the same scope), which
exports it refuses to change or remove, and which stateful resources start empty or are dropped.

    from tests.support.specs import changed
    from tests.stacks.day_two import assert_refused, assert_updates, example

    def test_a_tags_change_is_an_update() -> None:
        before = example("quickstart")
        assert_updates(before, changed(before, tags={"team": "research"}))

`changed` (tests.support.specs) takes dotted paths as keyword arguments (`storage__lustre__efa=True`) and DELETE to drop
a key.
Synthesis runs in this process and is cached per spec, so a test module pays for each distinct spec once.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import yaml

from kiln.changes import Plan, assembly_dependencies, assembly_templates, plan
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster
from kiln.stacks.ci_mode import ci_environment
from kiln.stacks.feature_flags import FEATURE_FLAGS
from tests.support.paths import ROOT


def example(stem: str) -> dict[str, Any]:
    """Return the spec data of examples/STEM.yaml."""
    return yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())


@lru_cache(maxsize=64)
def _synthesized(spec_json: str, context_json: str) -> tuple[Path, str]:
    outdir = Path(tempfile.mkdtemp(prefix="kiln-day-two-"))
    spec = parse_spec(json.loads(spec_json))
    # The examples' data: their relative paths (bootstrap.steps) are below examples/, as when loaded from there.
    spec._source_dir = ROOT / "examples"
    app = cdk.App(
        outdir=str(outdir),
        context={**FEATURE_FLAGS, **json.loads(context_json)},
        builtin_cloud_formation_validation=False,
    )
    # As app.py builds it (a spec with ci.ttl_hours is its own short-lived environment); cdk-nag adds metadata only.
    build_cluster(app, spec, nag=False, ci=ci_environment(spec))
    app.synth()
    return outdir, spec.region or "us-east-1"


def assembly(data: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> Path:
    """Return the cloud assembly of spec DATA (with CONTEXT over kiln's feature flags), synthesized once."""
    return _synthesized(json.dumps(data, sort_keys=True), json.dumps(context or {}, sort_keys=True))[0]


def templates(data: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Return the templates of spec DATA by stack name (a fresh copy each call: callers may change it)."""
    return copy.deepcopy(assembly_templates(assembly(data, context)))


def dependencies(data: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> dict[str, tuple[str, ...]]:
    """Return, per stack of spec DATA, the stacks it depends on."""
    return assembly_dependencies(assembly(data, context))


def deploy_plan(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    before_context: Mapping[str, Any] | None = None,
    after_context: Mapping[str, Any] | None = None,
) -> Plan:
    """Return what deploying spec AFTER over a cluster deployed from spec BEFORE does."""
    region = _synthesized(json.dumps(after, sort_keys=True), json.dumps(after_context or {}, sort_keys=True))[1]
    return plan(templates(before, before_context), templates(after, after_context), region=region)


def assert_updates(before: Mapping[str, Any], after: Mapping[str, Any], **contexts: Any) -> Plan:
    """Assert that deploying AFTER over BEFORE is an update: nothing refused, no stateful resource replaced or
    dropped; return the plan."""
    result = deploy_plan(before, after, **contexts)
    assert result.findings() == [], "\n".join(result.findings())
    return result


def assert_refused(before: Mapping[str, Any], after: Mapping[str, Any], *naming: str, **contexts: Any) -> list[str]:
    """Assert that CloudFormation refuses deploying AFTER over BEFORE, each reason in one line, and that every
    string of NAMING is in some line; return the lines."""
    result = deploy_plan(before, after, **contexts)
    lines = result.findings()
    assert result.refused, "\n".join(lines) or "the deploy is an update"
    assert all(line and "\n" not in line for line in lines), lines
    for name in naming:
        assert any(name in line for line in lines), f"no line names {name!r}:\n" + "\n".join(lines)
    return lines
