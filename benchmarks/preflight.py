"""Measure `kiln preflight` end to end against an in-process moto account, with a round trip added to every call.

Usage: .venv/bin/python benchmarks/preflight.py [--repeat N] [--latency-ms MS]

moto answers in microseconds; a real AWS call from a laptop or a runner takes tens to hundreds of milliseconds.
Every call therefore sleeps --latency-ms (default 100) before it is answered, so the figures show what the
concurrent checks save. moto has no Service Quotas for EC2, SageMaker or FSx and no capacity reservations; those
calls get answers of AWS's shape made here: ample quotas, SageMaker's listing as --sagemaker-quotas quotas
(AWS lists thousands; the HyperPod check pages through them, 100 a page), and an active reservation matching
each group that names one. Per spec, the median of N runs (seconds):
  clients      making the clients and sts:GetCallerIdentity (one call, before the checks);
  sequential   every check one after another (one worker);
  concurrent   the checks at once, as `kiln preflight` runs them;
and the AWS calls one run makes.
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


PAGE = 100


def _quota(code: str, name: str, value: float) -> dict:
    return {"ServiceCode": "x", "QuotaCode": code, "QuotaName": name, "Value": value, "Unit": "None"}


class FakeAccount:
    """AWS's answers to what moto lacks, computed from the plan; every call sleeps LATENCY and is counted."""

    def __init__(self, plan, latency_s: float, sagemaker_quotas: int) -> None:
        from kiln.catalog.names import hyperpod_type_name

        self.latency_s, self.count, self._lock = latency_s, 0, threading.Lock()
        typed = [hyperpod_type_name(node.instance_type) for node in plan.nodes if node.hyperpod]
        filler = [
            _quota(f"L-S{i:07d}", f"ml.filler{i}.xlarge for training job usage", 10) for i in range(sagemaker_quotas)
        ]
        self.listings = {
            "sagemaker": filler
            + [_quota(f"L-H{i:07d}", f"{name} for cluster usage", 100) for i, name in enumerate(typed)],
            "fsx": [_quota("L-F0000001", "Lustre Scratch storage capacity", 500000)]
            + [_quota("L-F0000002", "Lustre Persistent_2 storage capacity", 500000)],
        }
        self.reservations = {
            node.reservation_id: {
                "CapacityReservationId": node.reservation_id,
                "InstanceType": node.instance_type,
                "AvailabilityZone": plan.availability_zone,
                "State": "active",
                "ReservationType": "capacity-block" if node.capacity == "capacity-block" else "default",
                "TotalInstanceCount": node.count,
                "AvailableInstanceCount": node.count,
                "Tenancy": "default",
                "InstancePlatform": "Linux/UNIX",
            }
            for node in plan.nodes
            if node.reservation_id
        }

    @staticmethod
    def keep_parameters(params: dict, context: dict, **_: object) -> None:
        """Keep the call's own parameters for before-call, which sees only the serialized request."""
        context["benchmark_parameters"] = dict(params)

    def __call__(self, model, context: dict, **_: object):
        from botocore.awsrequest import AWSResponse

        with self._lock:
            self.count += 1
        time.sleep(self.latency_s)
        answer = self._answer(model.name, context.get("benchmark_parameters", {}))
        return None if answer is None else (AWSResponse(None, 200, {}, None), answer)

    def _answer(self, operation: str, params: dict) -> dict | None:
        if operation in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
            return {"Quota": _quota(params["QuotaCode"], "vCPUs", 100000)}
        if operation in ("ListServiceQuotas", "ListAWSDefaultServiceQuotas"):
            quotas = self.listings.get(params["ServiceCode"], [])
            start = int(params.get("NextToken") or 0)
            page = {"Quotas": quotas[start : start + PAGE]}
            if start + PAGE < len(quotas):
                page["NextToken"] = str(start + PAGE)
            return page
        if operation == "DescribeCapacityReservations":
            return {"CapacityReservations": [self.reservations[i] for i in params["CapacityReservationIds"]]}
        return None  # moto answers

    def attach(self, aws) -> None:
        for client in (aws.ec2, aws.service_quotas, aws.ssm, aws.s3, aws.fsx):
            client.meta.events.register("before-parameter-build", self.keep_parameters)
            client.meta.events.register("before-call", self)


def measure(spec_name: str, repeat: int, latency_s: float, sagemaker_quotas: int) -> dict[str, float]:
    from moto import mock_aws

    from kiln.aws.session import aws_session
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
            session = aws_session(region=region, profile=None)
            time.sleep(latency_s)  # sts:GetCallerIdentity's round trip (its client is not kept)
            aws = AwsClients.from_session(session, region)
            figures["clients"].append(time.perf_counter() - started)
            plan = plan_for(spec, spec_path=spec_name, region=region)
            account = FakeAccount(plan, latency_s, sagemaker_quotas)
            account.attach(aws)
            for mode, workers in (("sequential", 1), ("concurrent", 8)):
                account.count = 0
                report = run_preflight(plan, aws, workers=workers)
                figures[mode].append(report.seconds)
                calls = account.count
                statuses = {finding.status for finding in report.findings}
                if statuses - {"ok", "warn"}:
                    raise SystemExit(f"{spec_name}: the benchmark's account should pass: {report.ordered()[0].line()}")
    return {**{k: statistics.median(v) for k, v in figures.items()}, "calls": calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--sagemaker-quotas", type=int, default=2500, help="quotas SageMaker lists (default 2500)")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    print(f"kiln preflight against moto, {args.latency_ms:g} ms per AWS call, median of {args.repeat}")
    print(f"{'spec':<22}{'calls':>6}{'clients s':>11}{'sequential s':>14}{'concurrent s':>14}{'speed-up':>10}")
    for name in SPECS:
        f = measure(name, args.repeat, latency, args.sagemaker_quotas)
        speedup = f["sequential"] / f["concurrent"] if f["concurrent"] else float("nan")
        print(
            f"{name:<22}{f['calls']:>6.0f}{f['clients']:>11.2f}{f['sequential']:>14.2f}"
            f"{f['concurrent']:>14.2f}{speedup:>9.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
