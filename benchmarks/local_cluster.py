"""Measure the local cluster: `up` until every node is idle, smoke submission to first step, and `down`.

Usage (root, Slurm and munge already installed): .venv/bin/python benchmarks/local_cluster.py [--repeat N]

Each repetition is a fresh cluster: `up` (bootstrap with packages installed, network, daemons,
wait for idle), one smoke job, `down`. The cluster uses its own prefix, names, subnet and ports,
so a developer's running cluster is untouched. Prints the median, min and max of each figure and
the median of each `up` phase.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILN_LOCAL = [sys.executable, "-m", "kiln.cli", "local"]
PHASE = re.compile(r"^  (.+?) \.\.\. (\d+\.\d)s$")
FIRST_STEP = re.compile(r"smoke: first step (\d+\.\d+) s after submission")
THROUGHPUT = re.compile(r"smoke: throughput ([\d,]+) tokens/s")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))  # noqa: S104 - slurmctld binds all addresses
        return probe.getsockname()[1]


def kiln_local(*args: str) -> tuple[float, str]:
    """Run `kiln local ARGS`; return its wall time and output; stop the benchmark if it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "SLURM_"))}
    started = time.perf_counter()
    result = subprocess.run([*KILN_LOCAL, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"kiln local {args[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return elapsed, result.stdout


def summary(name: str, values: list[float], unit: str = "s") -> str:
    return (
        f"{name:<34}median {statistics.median(values):7.2f} {unit}   "
        f"min {min(values):7.2f}   max {max(values):7.2f}   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--smoke-steps", type=int, default=10)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kiln-local-bench-"))
    # munged refuses a socket below a directory other users cannot search.
    base.chmod(0o755)
    ups, downs, first_steps, throughputs = [], [], [], []
    phases: dict[str, list[float]] = defaultdict(list)
    try:
        for index in range(args.repeat):
            prefix = base / f"run{index}"
            up_s, output = kiln_local(
                "up",
                "--prefix",
                str(prefix),
                "--nodes",
                str(args.nodes),
                "--tag",
                f"kb{os.getpid() % 10000}",
                "--subnet",
                f"10.79.{os.getpid() % 250}.0/24",
                "--slurmctld-port",
                str(free_port()),
                "--slurmd-port",
                str(free_port()),
            )
            ups.append(up_s)
            for line in output.splitlines():
                if match := PHASE.match(line):
                    name = re.sub(r"kb\d+-", "<tag>-", match.group(1))
                    phases[re.sub(r"[\d.]+:\d+", "<address>", name)].append(float(match.group(2)))
            _, smoke = kiln_local("smoke", "--prefix", str(prefix), "--steps", str(args.smoke_steps))
            first_steps.append(float(FIRST_STEP.search(smoke).group(1)))
            throughputs.append(float(THROUGHPUT.search(smoke).group(1).replace(",", "")))
            down_s, _ = kiln_local("down", "--prefix", str(prefix))
            downs.append(down_s)
            print(
                f"run {index + 1}: up {up_s:.2f} s, smoke first step {first_steps[-1]:.1f} s, down {down_s:.2f} s",
                flush=True,
            )
    finally:
        for prefix in base.glob("run*"):
            if (prefix / "state.json").exists():
                subprocess.run([*KILN_LOCAL, "down", "--prefix", str(prefix)], cwd=ROOT, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nlocal cluster, {args.nodes} nodes, packages installed, {os.cpu_count()} CPUs")
    print(summary("up until all nodes idle", ups))
    print(summary("smoke submission to first step", first_steps))
    print(summary("down", downs))
    print(summary("smoke throughput", [t / 1000 for t in throughputs], "k tokens/s"))
    print("\nup phases (median):")
    for name, values in phases.items():
        print(f"  {name:<52}{statistics.median(values):6.1f} s")


if __name__ == "__main__":
    main()
