"""Measure a node's boot from a baked image against a full boot, on the local target.

Usage (root, Debian 12 with Slurm and munge installed): .venv/bin/python benchmarks/baked_boot.py [--repeat 3]

Both boots run the local target's bundle (`--phase all`) under a private prefix, as `kiln local up` runs it,
starting no daemons. A full boot starts from a fresh prefix: install steps (Slurm and munge found installed,
the launcher venv built from the bundle's wheel) then configure steps. A baked boot starts from a copy of a
prefix that `--phase bake` prepared once: each install step's marker is checked against the bundle, then
the same configure steps run. Prints the median, min and max of each and the ratio of the medians. Nothing
outside a temporary directory is written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.bootstrap import LocalCluster, render_bundle
from kiln.bootstrap.config import BootstrapConfig


def bootstrap_env(prefix: Path) -> dict[str, str]:
    """Return the environment `kiln local` runs its bootstrap with, under PREFIX."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("KILN_", "SLURM_"))}
    return {**env, "KILN_ROOT": str(prefix), "KILN_PYTHON": sys.executable}


def run_entry(entry: Path, prefix: Path, *args: str) -> float:
    """Run the bundle's entry point under PREFIX; return its wall time; stop the benchmark if it fails."""
    started = time.perf_counter()
    result = subprocess.run(["bash", str(entry), *args], env=bootstrap_env(prefix), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{entry.name} {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return elapsed


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name:<40}median {statistics.median(values):6.2f} s   "
        f"min {min(values):6.2f}   max {max(values):6.2f}   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kiln-baked-bench-"))
    try:
        # The prefix is a deploy-time value (KILN_ROOT): one bundle serves every prefix below.
        local = LocalCluster.from_subnet("bench", str(base / "unused"), 2, "10.77.0.0/24")
        bundle = render_bundle(BootstrapConfig(target="local", os="debian12", local=local), base / "bundle")
        entry = bundle.directory / bundle.entry_point
        image = base / "image"
        bake_s = run_entry(entry, image, "--phase", "bake")
        full, baked = [], []
        for index in range(args.repeat):
            # Alternate, so drift on a shared machine hits both alike.
            full.append(run_entry(entry, base / f"full{index}"))
            copy = base / f"baked{index}"
            shutil.copytree(image, copy, symlinks=True)
            baked.append(run_entry(entry, copy))
            print(f"run {index + 1}: full boot {full[-1]:.2f} s, baked boot {baked[-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nlocal target, {os.cpu_count()} CPUs; Slurm and munge already installed; bake once {bake_s:.2f} s")
    print(summary("full boot (fresh prefix, --phase all)", full))
    print(summary("baked boot (copy of a baked prefix)", baked))
    print(f"{'full / baked':<40}{statistics.median(full) / statistics.median(baked):6.1f} x")


if __name__ == "__main__":
    main()
