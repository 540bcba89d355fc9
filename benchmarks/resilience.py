"""Measure recovery on the real local cluster: break node2 of a 3-node smoke job, once per fault.

Usage (root, Slurm and munge installed): .venv/bin/python benchmarks/resilience.py [--repeat N] [--faults ...]

One fresh 3-node cluster (its own prefix, names, subnet and ports) runs `kiln local drill` for each fault
(kiln.local.faults: slurmd, hang, disk-full) REPEAT times. Prints, per fault, the median, min and max of the time
from the fault to its detection, to the node leaving service, to the requeue, to the node's replacement and to the
first step after the resume, and the steps lost (at most the checkpoint interval).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from local_cluster import KILN_LOCAL, ROOT, free_port, kiln_local

FAULTS = ("slurmd", "hang", "disk-full")
FIGURES = (
    ("noticed_s", "fault -> noticed"),
    ("out_of_service_s", "fault -> out of service"),
    ("requeued_s", "fault -> job requeued"),
    ("replaced_s", "fault -> node replaced"),
    ("first_step_after_resume_s", "fault -> first step after resume"),
    ("steps_lost", "steps lost"),
)
CHECKPOINT_EVERY = 20
# The resilience settings of the drill's spec: the smallest hang the watchdog may call, and the health check's pace.
RESILIENCE = {"hang_min_s": 10, "health_check_interval_s": 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kiln-resilience-bench-"))
    base.chmod(0o755)
    prefix = base / "cluster"
    spec = base / "spec.json"
    spec.write_text(json.dumps(_spec()))
    results: dict[str, list[dict]] = {fault: [] for fault in args.faults}
    try:
        up_s, _ = kiln_local(
            "up",
            *("--prefix", str(prefix), "--nodes", "3", "--spec", str(spec)),
            *("--tag", f"kr{os.getpid() % 10000}", "--subnet", f"10.79.{(os.getpid() + 7) % 250}.0/24"),
            *("--slurmctld-port", str(free_port()), "--slurmd-port", str(free_port())),
        )
        print(f"3-node cluster up in {up_s:.1f} s", flush=True)
        for index in range(args.repeat):
            for fault in args.faults:
                _, output = kiln_local(
                    "drill",
                    *("--prefix", str(prefix), "--fault", fault, "--node", "node2"),
                    *("--checkpoint-every", str(CHECKPOINT_EVERY), "--fault-at-step", str(2 * CHECKPOINT_EVERY + 5)),
                    "--json",
                )
                report = json.loads(output)
                results[fault].append(report)
                figures = ", ".join(f"{key} {report[key]}" for key, _ in FIGURES)
                print(f"run {index + 1} {fault}: {figures}", flush=True)
    finally:
        if (prefix / "state.json").exists():
            subprocess.run([*KILN_LOCAL, "down", "--prefix", str(prefix)], cwd=ROOT, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    cpus = os.cpu_count()
    print(f"\nrecovery on the local cluster, 3 nodes, {cpus} CPUs, checkpoints every {CHECKPOINT_EVERY} steps")
    for fault, reports in results.items():
        print(f"\n{fault} on node2 (n={len(reports)}):")
        for key, title in FIGURES:
            values = [report[key] for report in reports if report[key] is not None]
            if len(values) < len(reports):
                print(f"  {title:<36}missing in {len(reports) - len(values)} run(s)")
            if values:
                median, low, high = statistics.median(values), min(values), max(values)
                print(f"  {title:<36}median {median:7.1f}   min {low:7.1f}   max {high:7.1f}")


def _spec() -> dict:
    return {
        "name": "drill",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "storage": {"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}},
        "compute": {"backend": "pcs", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 3}]},
        "resilience": RESILIENCE,
    }


if __name__ == "__main__":
    sys.exit(main())
