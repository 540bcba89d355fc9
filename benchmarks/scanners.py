"""Measure what `kiln report` spends on its scanners, over every example's templates.

Usage: .venv/bin/python benchmarks/scanners.py [--repeat N]

The examples are synthesized once (not timed); then, each the median of N runs:
  cfn-lint        every template linted in this process, as `kiln report` does;
  checkov once    one checkov process over every template (what `kiln report` runs);
  checkov per     one checkov process per stack (the alternative it avoids), measured once;
  wildcards       the IAM wildcard review of every template (kiln.contracts.iam_wildcards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}"

from kiln.contracts.iam_wildcards import template_wildcards  # noqa: E402
from kiln.review.scan import run_checkov  # noqa: E402
from kiln.spec import load_spec  # noqa: E402
from kiln.stacks.synth import DEFAULT_LINT_REGION, lint_template, synthesize  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_of(repeat: int, action: Callable[[], object]) -> float:
    return statistics.median(seconds(action) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-scan-") as tmp:
        templates: list[tuple[Path, str]] = []
        for path in EXAMPLES:
            spec = load_spec(path)
            _, outdir = synthesize(spec, Path(tmp) / path.stem)
            templates += [(t, spec.region or DEFAULT_LINT_REGION) for t in sorted(outdir.glob("*.template.json"))]
        paths = [t for t, _ in templates]
        lint = median_of(args.repeat, lambda: [lint_template(t, region) for t, region in templates])
        once = median_of(args.repeat, lambda: run_checkov(paths))
        per_stack = seconds(lambda: [run_checkov([t]) for t in paths])
        wildcards = median_of(args.repeat, lambda: [list(template_wildcards(json.loads(t.read_text()))) for t in paths])
        results = run_checkov(paths)
        uses = sum(len(list(template_wildcards(json.loads(t.read_text())))) for t in paths)
    passed = sum(r.passed for r in results.values())
    failed = sum(len(r.failed) for r in results.values())
    skipped = sum(len(r.skipped) for r in results.values())
    print(f"{len(EXAMPLES)} specs, {len(paths)} templates; checkov {passed} passed, {failed} failed, {skipped} skipped")
    print(f"cfn-lint, all templates        {lint:6.2f} s")
    print(f"checkov, one process           {once:6.2f} s")
    print(f"checkov, one process per stack {per_stack:6.2f} s  ({per_stack / once:.1f}x)")
    print(f"IAM wildcard review            {wildcards:6.3f} s  ({uses} wildcard pairs)")


if __name__ == "__main__":
    main()
