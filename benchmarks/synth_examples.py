"""Measure synthesis: every example against an empty CDK app, in the same run.

Usage: .venv/bin/python benchmarks/synth_examples.py [--repeat N]

Three figures, each the median of N runs:
  empty      `python -c <App().synth()>` in a fresh process: the floor (Python + jsii + Node start-up);
  per spec   `python app.py -c spec=X` in a fresh process, as `cdk synth` runs it;
  all specs  every example synthesized in one process (as `kiln report` does), against the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
ENV = {**os.environ, "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}"}
EMPTY = "import aws_cdk as cdk; cdk.App().synth()"
ALL = (
    "import sys; from kiln.spec import load_spec; from kiln.stacks.synth import synthesize\n"
    "for path in sys.argv[1:]: synthesize(load_spec(path))"
)


def context(spec: Path) -> dict[str, str]:
    return {"CDK_CONTEXT_JSON": json.dumps({"spec": str(spec)})}


def timed(argv: list[str], extra_env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env={**ENV, **(extra_env or {})}, check=True, capture_output=True)
    return time.perf_counter() - started


def median_of(repeat: int, argv: list[str], extra_env: dict[str, str] | None = None) -> float:
    return statistics.median(timed(argv, extra_env) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        empty = median_of(args.repeat, [sys.executable, "-c", EMPTY], {"CDK_OUTDIR": out})
        per_spec = {
            path.stem: median_of(args.repeat, [sys.executable, "app.py"], {"CDK_OUTDIR": out, **context(path)})
            for path in EXAMPLES
        }
    all_specs = median_of(args.repeat, [sys.executable, "-c", ALL, *map(str, EXAMPLES)])
    print(f"empty app floor            {empty:6.2f} s")
    for stem, seconds in per_spec.items():
        print(f"app.py {stem:<20}{seconds:6.2f} s  ({seconds / empty:.2f}x floor)")
    print(f"all {len(EXAMPLES)} specs, one process    {all_specs:6.2f} s  ({all_specs / empty:.2f}x floor)")
    print(f"all {len(EXAMPLES)} specs, one process each {sum(per_spec.values()):6.2f} s")


if __name__ == "__main__":
    main()
