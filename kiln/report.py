"""`kiln report`: validate, synthesize and lint specs, judge boot readiness, then print one summary table."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kiln.bootstrap.readiness import ACCEPT_UNREADY
from kiln.spec import SpecError
from kiln.stacks.bootstrap_config import load_and_judge
from kiln.synth import nag_report, stack_results, synthesize


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def run_report(files: Sequence[str], *, lint: bool = True, accept_unready: bool = False) -> int:
    """Synthesize, lint and judge the boot readiness of every spec in FILES; return 0 when all are clean.

    Returns 2 for an invalid spec, 1 for lint findings, failed synthesis or nodes that would not boot
    (unless ACCEPT_UNREADY, which still prints the verdict), else 0.
    """
    rows = [("spec", "stack", "resources", "cfn-lint E/W", "cdk-nag open/ack", "boot-ready", "synth s")]
    details: list[str] = []
    totals = dict.fromkeys(("stacks", "resources", "errors", "warnings", "acknowledged", "boot_ready"), 0)
    worst = 0
    for path in files:
        try:
            spec, readiness = load_and_judge(path)
        except SpecError as exc:
            details.extend(exc.lines_out())
            rows.append((path, "(invalid spec)", "-", "-", "-", "-", "-"))
            worst = 2
            continue
        boot_cell = "yes" if readiness.ready else f"NO ({len(readiness.unverifiable)})"
        totals["boot_ready"] += readiness.ready
        details.extend(f"{path}: {reason}" for reason in readiness.reasons())
        if not (readiness.ready or accept_unready):
            worst = max(worst, 1)
        with tempfile.TemporaryDirectory(prefix=f"kiln-{spec.name}-") as tmp:
            started = time.perf_counter()
            try:
                synthesize(spec, Path(tmp))
            except RuntimeError as exc:
                # cdk-nag findings without an acknowledgement stop synthesis.
                details.append(f"{path}: synthesis failed: {exc}")
                rows.append((path, "(synthesis failed)", "-", "-", "-", boot_cell, "-"))
                worst = max(worst, 1)
                continue
            seconds = time.perf_counter() - started
            nag = nag_report(Path(tmp))
            results = stack_results(Path(tmp), spec.region, lint=lint)
        totals["acknowledged"] += len(nag.acknowledged)
        for result in results:
            lint_cell = f"{len(result.cfn_lint_errors)}/{len(result.cfn_lint_warnings)}" if lint else "skipped"
            nag_cell = f"{len(nag.violations)}/{nag.acknowledged_in(result.name)}"
            rows.append((path, result.name, str(result.resources), lint_cell, nag_cell, boot_cell, f"{seconds:.1f}"))
            details.extend(result.cfn_lint_errors + result.cfn_lint_warnings)
            totals["stacks"] += 1
            totals["resources"] += result.resources
            totals["errors"] += len(result.cfn_lint_errors)
            totals["warnings"] += len(result.cfn_lint_warnings)
            if result.cfn_lint_errors or result.cfn_lint_warnings:
                worst = max(worst, 1)
        details.extend(f"{path}: cdk-nag acknowledged {rule}: {reason}" for rule, reason in nag.acknowledged)
    print(_table(rows))
    print(_summary(len(files), totals, lint=lint, accept_unready=accept_unready, worst=worst))
    for line in details:
        print(line, file=sys.stderr)
    return worst


def _summary(specs: int, totals: dict[str, int], *, lint: bool, accept_unready: bool, worst: int) -> str:
    boot = f"{totals['boot_ready']} of {specs} specs boot-ready"
    if totals["boot_ready"] < specs:
        boot += f" (accepted by {ACCEPT_UNREADY})" if accept_unready and worst == 0 else " (details below)"
    if worst:
        return f"\n{specs} specs: problems found; {boot}"
    lint_total = f"cfn-lint {totals['errors']} errors, {totals['warnings']} warnings" if lint else "cfn-lint skipped"
    return (
        f"\n{specs} specs, {totals['stacks']} stacks, {totals['resources']} resources; {lint_total}; "
        f"cdk-nag 0 open, {totals['acknowledged']} acknowledged with reasons; {boot}"
    )
