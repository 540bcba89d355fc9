"""What the `kiln job submit` tests run: the example specs, the image, and a container plan run on this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kiln.jobs.pytorchjob import JOB_FILES_DIR, LAUNCHER_WHEEL
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples"


# An image reference a job names; no test pulls it.
IMAGE = "public.ecr.aws/example/pytorch:2.13"


def run_container_plan(
    tmp_path: Path, job: dict, wheel: bytes, script: Path, *, node_rank: int = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run JOB's Master container command as the pod would, with the PyTorch operator's variables for a 2-node job of
    8 ranks each (as NODE_RANK), its files (kiln's WHEEL and SCRIPT) where the job mounts them, a python3 without
    site-packages (the kiln it imports is the one it unpacked) and --dry-run before the script: kiln-launch prints its
    plan as JSON and starts no worker. ENV adds to or overrides the pod's environment."""
    files_dir = tmp_path / "job"
    files_dir.mkdir(exist_ok=True)
    (files_dir / LAUNCHER_WHEEL).write_bytes(wheel)
    (files_dir / "train.py").write_text(script.read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    argv = [part.replace(JOB_FILES_DIR, str(files_dir)) for part in container["command"]]
    at = argv.index(f"{files_dir}/train.py")
    argv[at:at] = ["--dry-run"]
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KUBERNETES_SERVICE_HOST": "10.100.0.1",
        "PET_MASTER_ADDR": "llm-master-0",
        "PET_MASTER_PORT": "23456",
        "PET_NNODES": "2",
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": "8",
        "TMPDIR": str(tmp_path),
        **{item["name"]: item["value"] for item in container["env"]},
        "KILN_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        **(env or {}),
    }
    return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=120, check=False)
