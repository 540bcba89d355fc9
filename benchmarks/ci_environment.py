"""Measure what `kiln ci` adds around the deploy itself, with AWS replaced by an in-process moto account.

Usage: .venv/bin/python benchmarks/ci_environment.py [--repeat N]

Figures, each the median of N runs (seconds):
  synth plain      examples/quickstart.yaml synthesized as itself (as `kiln report` does);
  synth ci         the same spec as a CI environment with a TTL (4 stacks, reaper included), as `kiln ci up` does;
  teardown         `kiln ci down`'s teardown of a 4-stack environment with two versioned buckets of 1,000 objects
                   against moto (AWS's own deletion time is not in it: moto deletes at once);
  sweep            finding 20 environments by their tags and judging which are due.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}"
for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ[name] = value
os.environ.pop("AWS_ENDPOINT_URL", None)


def _median(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def synth(ci: bool) -> None:
    from kiln.spec import load_spec
    from kiln.stacks.ci_mode import ci_environment
    from kiln.stacks.synth import synthesize

    spec = load_spec(str(ROOT / "examples" / "quickstart.yaml"))
    environment = ci_environment(spec, name="quickstart-bench", ttl_hours=2) if ci else None
    with tempfile.TemporaryDirectory() as tmp:
        synthesize(spec, Path(tmp) / "out", ci=environment)


def teardown_once() -> None:
    import boto3
    from moto import mock_aws

    from kiln.ci.reaper_code.kiln_reaper.teardown import Clients, teardown
    from tests.support.ci import make_environment

    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        buckets = make_environment(session, "bench-1")
        s3 = session.client("s3")
        for bucket in buckets.values():
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
            for i in range(1000):
                s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x")
        started = time.perf_counter()
        teardown(Clients(session.client("cloudformation"), s3), "bench-1", progress=lambda line: None)
        _TIMES.append(time.perf_counter() - started)


def sweep_once() -> None:
    import boto3
    from moto import mock_aws

    from kiln.ci.sweep import find_environments
    from tests.support.ci import make_environment

    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        for i in range(20):
            make_environment(session, f"bench-{i}")
        started = time.perf_counter()
        found = find_environments(
            session.client("cloudformation"), session.client("scheduler"), older_than=timedelta(hours=6)
        )
        _TIMES.append(time.perf_counter() - started)
        assert len(found) == 20


_TIMES: list[float] = []


def _inner(fn, repeat: int) -> float:
    _TIMES.clear()
    for _ in range(repeat):
        fn()
    return statistics.median(_TIMES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import warnings

    warnings.filterwarnings("ignore", message="Tried to parse AWS::CloudFormation::WaitConditionHandle")
    figures = {
        "synth plain s": _median(lambda: synth(False), args.repeat),
        "synth ci s": _median(lambda: synth(True), args.repeat),
        "teardown s": _inner(teardown_once, args.repeat),
        "sweep 20 envs s": _inner(sweep_once, args.repeat),
    }
    print(json.dumps({k: round(v, 2) for k, v in figures.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
