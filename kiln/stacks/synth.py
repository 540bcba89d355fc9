"""Synthesize a spec into a cloud assembly and lint it: cfn-lint and the cdk-nag report."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from kiln.host.safe_output import check_replaceable
from kiln.spec import ClusterSpec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.ci_mode import CiEnvironment

DEFAULT_LINT_REGION = "us-east-1"


@dataclass(frozen=True, kw_only=True)
class StackResult:
    """One synthesized stack: its template and what the linters said."""

    name: str
    template_path: Path
    resources: int
    cfn_lint_errors: list[str] = field(default_factory=list)
    cfn_lint_warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class NagReport:
    """cdk-nag's verdict for an app: unacknowledged violations, and acknowledgements with reasons."""

    violations: list[str]
    acknowledged: list[tuple[str, str]]
    acknowledged_at: list[str] = field(default_factory=list)

    def acknowledged_in(self, stack: str) -> int:
        """Return how many acknowledged findings lie in STACK."""
        return sum(1 for path in self.acknowledged_at if path.split("/", 1)[0] == stack)


def nag_report(outdir: Path) -> NagReport:
    """Read the AwsSolutions results from the assembly's validation report."""
    path = outdir / "validation-report.json"
    if not path.exists():
        return NagReport(violations=[], acknowledged=[])
    report = json.loads(path.read_text())
    violations, acknowledged, acknowledged_at = [], [], []
    for plugin in report.get("pluginReports", []):
        if plugin["pluginName"] != "AwsSolutions":
            continue
        for item in plugin.get("violations", []):
            for where in item.get("violatingConstructs", []):
                violations.append(f"{item['ruleName']} at {where['constructPath']}")
        for item in plugin.get("suppressedViolations", []):
            acknowledged.append((item.get("acknowledgedId", item["ruleName"]), item.get("reason", "")))
            acknowledged_at.extend(where["constructPath"] for where in item.get("violatingConstructs", [])[:1])
    return NagReport(violations=violations, acknowledged=acknowledged, acknowledged_at=acknowledged_at)


def synthesize(
    spec: ClusterSpec,
    outdir: Path | None = None,
    *,
    nag: bool = True,
    ci: CiEnvironment | None = None,
    context: Mapping[str, Any] | None = None,
    account: str | None = None,
) -> tuple[cdk.App, Path]:
    """Build SPEC's stacks (as CI's short-lived environment, if given) into a fresh app and synthesize them.

    Return the app and the assembly dir.
    OUTDIR must be missing, empty or kiln's own (UnsafeOutput otherwise); by default a new temp directory.
    CONTEXT: what the app is given besides kiln's feature flags, as the CDK CLI gives it cdk.context.json's lookups
    (kiln.stacks.zones.zone_choice). ACCOUNT: the stacks' account, as the CLI gives it (default: CDK_DEFAULT_ACCOUNT's).
    """
    if outdir is None:
        outdir = Path(tempfile.mkdtemp(prefix=f"kiln-{spec.name}-"))
    else:
        check_replaceable(Path(outdir), "synthesize")
    app = new_app(str(outdir))
    for key, value in (context or {}).items():
        app.node.set_context(key, value)
    build_cluster(app, spec, nag=nag, ci=ci, account=account)
    app.synth()
    return app, outdir


def lint_template(template_path: Path, region: str) -> tuple[list[str], list[str]]:
    """Run cfn-lint on one template; return (errors, warnings) as readable lines."""
    from cfnlint.api import ManualArgs, lint

    matches = lint(template_path.read_text(), regions=[region], config=ManualArgs(regions=[region]))
    errors, warnings = [], []
    for match in matches:
        line = f"{match.rule.id} {match.message} ({template_path.name}:{match.linenumber})"
        if match.rule.id.startswith("E"):
            errors.append(line)
        elif match.rule.id.startswith("W"):
            warnings.append(line)
    return errors, warnings


def stack_results(outdir: Path, region: str | None, *, lint: bool = True) -> list[StackResult]:
    """Describe every template in the assembly at OUTDIR, linted for REGION."""
    results = []
    for template_path in sorted(outdir.glob("*.template.json")):
        template = json.loads(template_path.read_text())
        resources = template.get("Resources", {})
        errors, warnings = lint_template(template_path, region or DEFAULT_LINT_REGION) if lint else ([], [])
        results.append(
            StackResult(
                name=template_path.name.removesuffix(".template.json"),
                template_path=template_path,
                resources=len(resources),
                cfn_lint_errors=errors,
                cfn_lint_warnings=warnings,
            )
        )
    return results
