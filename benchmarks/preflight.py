"""Measure `kiln preflight` end to end against an in-process moto account, with a round trip added to every call.

Usage: .venv/bin/python benchmarks/preflight.py [--repeat N] [--latency-ms MS]

moto answers in microseconds; a real AWS call from a laptop or a runner takes tens to hundreds of milliseconds.
Every request (each retry included) therefore sleeps --latency-ms (default 100) before moto answers it, so the
figures show what the concurrent checks save. Per spec, the median of N runs (seconds):
  clients      making the clients and sts:GetCallerIdentity (one call, before the checks);
  sequential   every check one after another (one worker);
  concurrent   the checks at once, as `kiln preflight` runs them;
and the AWS calls one run makes. moto has no Service Quotas for EC2, SageMaker or FSx and no capacity
reservations: those calls are answered with an error (still one round trip each) and the checks report UNCHECKED.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ[name] = value
os.environ.pop("AWS_ENDPOINT_URL", None)

SPECS = ("quickstart", "p5-pcs", "p5-parallelcluster", "p5-hyperpod-slurm")


class RoundTrips:
    """Sleep LATENCY on every request a client sends, and count the requests."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s, self.count, self._lock = latency_s, 0, threading.Lock()

    def __call__(self, **_: object) -> None:
        with self._lock:
            self.count += 1
        time.sleep(self.latency_s)

    def attach(self, aws) -> None:
        for client in (aws.ec2, aws.service_quotas, aws.ssm, aws.s3, aws.fsx):
            client.meta.events.register("before-sign", self)


def measure(spec_name: str, repeat: int, latency_s: float) -> dict[str, float]:
    import boto3
    from moto import mock_aws

    from kiln.preflight.aws import AwsClients
    from kiln.preflight.plan import plan_for
    from kiln.preflight.run import run_preflight
    from kiln.spec import load_spec

    spec = load_spec(ROOT / "examples" / f"{spec_name}.yaml")
    region = spec.region or "us-east-1"
    figures: dict[str, list[float]] = {"clients": [], "sequential": [], "concurrent": []}
    calls = 0
    for _ in range(repeat):
        with mock_aws():
            started = time.perf_counter()
            session = boto3.Session(region_name=region)
            time.sleep(latency_s)  # sts:GetCallerIdentity's round trip (its client is not kept)
            aws = AwsClients.from_session(session, region)
            figures["clients"].append(time.perf_counter() - started)
            trips = RoundTrips(latency_s)
            trips.attach(aws)
            plan = plan_for(spec, spec_path=spec_name, region=region)
            for mode, workers in (("sequential", 1), ("concurrent", 8)):
                trips.count = 0
                report = run_preflight(plan, aws, workers=workers)
                figures[mode].append(report.seconds)
                calls = trips.count
    return {**{k: statistics.median(v) for k, v in figures.items()}, "calls": calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    print(f"kiln preflight against moto, {args.latency_ms:g} ms per AWS call, median of {args.repeat}")
    print(f"{'spec':<22}{'calls':>6}{'clients s':>11}{'sequential s':>14}{'concurrent s':>14}{'speed-up':>10}")
    for name in SPECS:
        f = measure(name, args.repeat, latency)
        speedup = f["sequential"] / f["concurrent"] if f["concurrent"] else float("nan")
        print(
            f"{name:<22}{f['calls']:>6.0f}{f['clients']:>11.2f}{f['sequential']:>14.2f}"
            f"{f['concurrent']:>14.2f}{speedup:>9.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
