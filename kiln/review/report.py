"""`kiln report`: validate, synthesize, lint and scan specs, judge boot readiness, then print one summary table."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln.bootstrap.readiness import ACCEPT_UNREADY
from kiln.catalog.resilience import ResilienceSettings, resilience_summary
from kiln.contracts.iam_wildcards import WildcardUse, managed_policy_uses, template_wildcards
from kiln.node_config.judge import load_and_judge
from kiln.review.scan import CheckovResult, ScanError, run_checkov
from kiln.spec import SpecError
from kiln.stacks.ci_mode import ci_environment
from kiln.stacks.synth import NagReport, StackResult, nag_report, stack_results, synthesize
from kiln.stacks.zones import zone_choice

HEADER = (
    "spec",
    "stack",
    "resources",
    "cfn-lint E/W",
    "cdk-nag open/ack",
    "checkov pass/fail/skip",
    "IAM wildcards+managed",
    "boot-ready",
    "synth s",
)
RESILIENCE_TITLE = "resilience (which checks run, what replaces a node, how jobs resume):"
UNREVIEWED_REMEDY = "narrow it or add a WildcardGrant with its reason to kiln/constructs/acknowledgements.py"
VERBOSE_HINT = (
    "--verbose lists each acknowledgement, checkov skip and IAM wildcard with its reason, and each kind of node's "
    "software and boot budget"
)


@dataclass(frozen=True)
class Review:
    """One column's verdict on one stack: its cell, its problem lines, how many problems it found, and the lines of
    what it accepted with a reason (shown with --verbose)."""

    cell: str
    details: tuple[str, ...] = ()
    problems: int = 0
    reasons: tuple[str, ...] = ()


@dataclass
class _Spec:
    """One spec on its way through the report: its verdicts so far, and its stacks once synthesized."""

    path: str
    row: tuple[str, ...] = ()  # the whole row of a spec that did not synthesize
    boot_cell: str = "-"
    worst: int = 0
    details: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # what passed with a reason, and node facts: --verbose only
    seconds: float = 0.0
    nag: NagReport | None = None
    stacks: list[StackResult] = field(default_factory=list)
    # What keeps training going on its platform (kiln.catalog.resilience): the report's resilience section.
    resilience: tuple[str, ...] = ()


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def checkov_review(path: str, stack: str, result: CheckovResult) -> Review:
    """Judge STACK of spec PATH by checkov's RESULT: every failed check is a problem; skips list their reasons."""
    failed = tuple(
        f"{path}: checkov {f.check_id} failed on {stack} {f.resource}: {f.check_name}" for f in result.failed
    )
    skipped = tuple(f"{path}: checkov skipped {s.check_id} on {stack} {s.resource}: {s.reason}" for s in result.skipped)
    cell = f"{result.passed}/{len(result.failed)}/{len(result.skipped)}"
    return Review(cell, failed, len(result.failed), skipped)


def wildcard_review(path: str, stack: str, uses: Sequence[WildcardUse]) -> Review:
    """Judge the wildcard grants USES of STACK of spec PATH: reviewed ones with their reasons, unreviewed ones fail."""
    reviewed: dict[tuple[str, str], list[str]] = {}
    unreviewed = []
    for use in uses:
        grant = f"{use.action} on {use.resource}"
        if use.reason is None:
            unreviewed.append(
                f"{path}: unreviewed IAM wildcard in {stack} {use.logical_id}: {grant}; {UNREVIEWED_REMEDY}"
            )
        else:
            reviewed.setdefault((use.logical_id, use.reason), []).append(grant)
    lines = [
        f"{path}: IAM wildcard in {stack} {where}: {', '.join(grants)}: {why}"
        for (where, why), grants in reviewed.items()
    ]
    cell = f"{len(uses)} ({len(unreviewed)} unreviewed)" if unreviewed else str(len(uses))
    return Review(cell, tuple(unreviewed), len(unreviewed), tuple(lines))


def resilience_lines(path: str, platform: str, settings: ResilienceSettings) -> tuple[str, ...]:
    """Return the resilience section's lines for the spec at PATH on PLATFORM with its resilience SETTINGS."""
    summary = resilience_summary(platform, settings)
    return (
        f"{path}: checks: {summary.checks}",
        f"{path}: replacement: {summary.replacement}",
        f"{path}: jobs: {summary.resume}",
        f"{path}: source: {summary.source}",
    )


def _synthesize(path: str, keep: Path, *, lint: bool, accept_unready: bool) -> _Spec:
    """Judge, synthesize and lint the spec at PATH; copy its templates into the new directory KEEP."""
    spec = _Spec(path)
    try:
        cluster, readiness = load_and_judge(path)
        # The AZs a deploy takes, as ./cdk.context.json records CDK's lookup (one line where none is recorded).
        zones = zone_choice(cluster)
    except SpecError as exc:
        spec.details.extend(exc.lines_out())
        spec.row, spec.worst = (path, "(invalid spec)", *["-"] * (len(HEADER) - 2)), 2
        return spec
    spec.boot_cell = "yes" if readiness.ready else f"NO ({readiness.problems})"
    spec.resilience = resilience_lines(path, cluster.platform.name, cluster.resilience)
    spec.details.extend(f"{path}: {line}" for line in zones.lines)
    spec.details.extend(f"{path}: {reason}" for reason in readiness.reasons())
    spec.details.extend(f"{path}: {warning}" for warning in (*readiness.tight_budget, *readiness.beta))
    spec.reasons.extend(f"{path}: nodes: {line}" for line in readiness.nodes)
    spec.reasons.extend(f"{path}: boot budget: {line}" for line in readiness.budget)
    spec.worst = 0 if readiness.ready or accept_unready else 1
    with tempfile.TemporaryDirectory(prefix=f"kiln-{cluster.name}-") as tmp:
        started = time.perf_counter()
        try:
            # As app.py builds it: a spec with ci.ttl_hours deploys as its own short-lived environment.
            synthesize(cluster, Path(tmp), ci=ci_environment(cluster), context=zones.context)
        except RuntimeError as exc:
            # cdk-nag findings without an acknowledgement stop synthesis.
            spec.details.append(f"{path}: synthesis failed: {exc}")
            cells = ["-"] * (len(HEADER) - 4)
            spec.row, spec.worst = (path, "(synthesis failed)", *cells, spec.boot_cell, "-"), 1
            return spec
        spec.seconds = time.perf_counter() - started
        spec.nag = nag_report(Path(tmp))
        # Only the templates wait for checkov: an assembly's assets (bundles, handler code) take far more room.
        keep.mkdir()
        spec.stacks = [
            replace(stack, template_path=Path(shutil.copy(stack.template_path, keep)))
            for stack in stack_results(Path(tmp), cluster.region, lint=lint)
        ]
    return spec


def _scan(specs: list[_Spec], *, lint: bool) -> tuple[dict[Path, CheckovResult], str, str | None]:
    """Run checkov once over every template; return its results, the cell for a stack without one, and any error."""
    if not lint:
        return {}, "skipped", None
    try:
        return run_checkov([stack.template_path for spec in specs for stack in spec.stacks]), "-", None
    except ScanError as exc:
        return {}, "error", f"kiln report: {exc}"


def _stack_row(
    spec: _Spec, stack: StackResult, result: CheckovResult | None, unscanned_cell: str, *, lint: bool, totals: Counter
) -> tuple[tuple[str, ...], list[str], list[str], bool]:
    """Return STACK's row, its detail lines, its lines of reasons and whether it has a problem; count it in TOTALS."""
    template = json.loads(stack.template_path.read_text())
    uses = list(template_wildcards(template))
    # AWS-managed policies grant what AWS writes in them: each attachment is reviewed like a wildcard.
    managed = list(managed_policy_uses(template))
    checks = checkov_review(spec.path, stack.name, result) if result is not None else Review(unscanned_cell)
    wildcards = wildcard_review(spec.path, stack.name, uses + managed)
    nested = [
        f"{spec.path}: {stack.name} {logical_id}: a nested stack from {_template_url(resource)}, AWS's template: "
        "deployed with this stack, but neither synthesized by kiln nor linted, scanned or counted here"
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == "AWS::CloudFormation::Stack"
    ]
    lint_cell = f"{len(stack.cfn_lint_errors)}/{len(stack.cfn_lint_warnings)}" if lint else "skipped"
    nag_cell = f"{len(spec.nag.violations)}/{spec.nag.acknowledged_in(stack.name)}" if spec.nag else "-"
    row = (spec.path, stack.name, str(stack.resources), lint_cell, nag_cell, checks.cell, wildcards.cell)
    totals.update(
        stacks=1,
        resources=stack.resources,
        errors=len(stack.cfn_lint_errors),
        warnings=len(stack.cfn_lint_warnings),
        passed=result.passed if result else 0,
        skipped=len(result.skipped) if result else 0,
        wildcards=len(uses),
        managed=len(managed),
        nested=len(nested),
    )
    lint_lines = stack.cfn_lint_errors + stack.cfn_lint_warnings
    problem = bool(lint_lines) or bool(checks.problems) or bool(wildcards.problems)
    details = lint_lines + [*checks.details, *wildcards.details, *nested]
    return row + (spec.boot_cell, f"{spec.seconds:.1f}"), details, [*checks.reasons, *wildcards.reasons], problem


def _template_url(resource: dict) -> str:
    url = resource.get("Properties", {}).get("TemplateURL", "?")
    return url if isinstance(url, str) else json.dumps(url)


def run_report(files: Sequence[str], *, lint: bool = True, accept_unready: bool = False, verbose: bool = False) -> int:
    """Synthesize, lint, scan and judge the boot readiness of every spec in FILES; return 0 when all are clean.

    Problems always print, one line each, below the table; what passed with a reason (cdk-nag acknowledgements,
    checkov skips, reviewed IAM wildcards) and each kind of node's software and boot budget print only when VERBOSE:
    the summary counts them either way.

    Returns 2 for an invalid spec; 1 for cfn-lint findings, checkov failures (or no checkov), unreviewed IAM
    wildcards, failed synthesis or nodes that would not boot (unless ACCEPT_UNREADY, which still prints the
    verdict); else 0. Without LINT neither cfn-lint nor checkov runs.
    """
    rows = [HEADER]
    totals: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="kiln-report-") as tmp:
        # Every spec's templates stay in TMP until checkov has scanned them all in one process.
        specs = [
            _synthesize(path, Path(tmp) / str(index), lint=lint, accept_unready=accept_unready)
            for index, path in enumerate(files)
        ]
        scanned, unscanned_cell, scan_error = _scan(specs, lint=lint)
        details = [scan_error] if scan_error else []
        reasons: list[str] = []
        worst = 1 if scan_error else 0
        for spec in specs:
            worst = max(worst, spec.worst)
            details.extend(spec.details)
            reasons.extend(spec.reasons)
            totals["boot_ready"] += spec.boot_cell == "yes"
            if spec.row:
                rows.append(spec.row)
                continue
            for stack in spec.stacks:
                result = scanned.get(stack.template_path)
                row, lines, accepted, problem = _stack_row(
                    spec, stack, result, unscanned_cell, lint=lint, totals=totals
                )
                rows.append(row)
                details.extend(lines)
                reasons.extend(accepted)
                worst = max(worst, int(problem))
            totals["acknowledged"] += len(spec.nag.acknowledged)
            reasons.extend(
                f"{spec.path}: cdk-nag acknowledged {rule}: {reason}" for rule, reason in spec.nag.acknowledged
            )
    print(_table(rows))
    print(_summary(len(files), totals, lint=lint, accept_unready=accept_unready, worst=worst))
    if reasons and not verbose:
        print(VERBOSE_HINT)
    section = [line for spec in specs for line in spec.resilience]
    if section:
        print(f"\n{RESILIENCE_TITLE}")
        print("\n".join(f"  {line}" for line in section))
    for line in [*details, *reasons] if verbose else details:
        print(line, file=sys.stderr)
    return worst


def _count(count: int, noun: str) -> str:
    """Return COUNT and NOUN, in the plural unless COUNT is 1: "1 spec", "2 specs", "0 errors"."""
    return f"{count} {noun}{'s' * (count != 1)}"


def _with_reasons(count: int) -> str:
    """Return how COUNT things that passed with a reason each are named: "with its reason" or "with reasons"."""
    return "with its reason" if count == 1 else "with reasons"


def _summary(specs: int, totals: Counter[str], *, lint: bool, accept_unready: bool, worst: int) -> str:
    boot = f"{totals['boot_ready']} of {_count(specs, 'spec')} boot-ready"
    if totals["boot_ready"] < specs:
        boot += f" (accepted by {ACCEPT_UNREADY})" if accept_unready and worst == 0 else " (details below)"
    if worst:
        return f"\n{_count(specs, 'spec')}: problems found; {boot}"
    lint_total = (
        f"cfn-lint {_count(totals['errors'], 'error')}, {_count(totals['warnings'], 'warning')}"
        if lint
        else "cfn-lint skipped"
    )
    checkov = (
        f"checkov {totals['passed']} passed, 0 failed, {totals['skipped']} skipped {_with_reasons(totals['skipped'])}"
        if lint
        else "checkov skipped"
    )
    count = totals["nested"]
    nested = f"; {_count(count, 'nested stack')} of AWS's templates not scanned (details below)" if count else ""
    managed = _count(totals["managed"], "AWS-managed policy attachment")
    nag = f"cdk-nag 0 open, {totals['acknowledged']} acknowledged {_with_reasons(totals['acknowledged'])}"
    return (
        f"\n{_count(specs, 'spec')}, {_count(totals['stacks'], 'stack')}, {_count(totals['resources'], 'resource')}; "
        f"{lint_total}; {nag}; {checkov}; "
        f"{_count(totals['wildcards'], 'IAM wildcard')} and {managed}, each with its reason; {boot}{nested}"
    )
