"""Helpers the launcher tests share: free ports, running kiln-launch, reading run records."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from kiln.launcher.check import NodeFacts
from kiln.launcher.neuron import NeuronScan

SUBPROCESS_TIMEOUT_S = 240


def cpu_node(**changes: Any) -> NodeFacts:
    """Return a CPU machine's facts (no CUDA, Neuron or EFA; no kiln image manifest unless CHANGES give one)."""
    facts: dict[str, Any] = {
        "torch_version": "2.13.0+cpu",
        "cuda_version": None,
        "cuda_available": False,
        "nccl_version": None,
        "cuda_devices": 0,
        "neuron": NeuronScan(tool=None),
        "efa_devices": (),
        "ofi_plugin": None,
    }
    return NodeFacts(**(facts | changes))


# Variables a CI runner (maybe itself a Slurm job or a pod) could leak into the tests.
LEAKY_PREFIXES = ("SLURM_", "PET_", "KILN_", "TORCHELASTIC_", "NCCL_", "FI_", "RDMAV_", "KUBERNETES_")
LEAKY_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
)


def clean_env(**extra: str) -> dict[str, str]:
    """Return os.environ without scheduler, kiln or NCCL variables, plus EXTRA."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith(LEAKY_PREFIXES) or k in LEAKY_NAMES)}
    return {**env, **extra}


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kiln_launch_command() -> list[str]:
    """Return the installed kiln-launch console script, or python -m kiln.launcher."""
    script = Path(sys.executable).parent / "kiln-launch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kiln.launcher"]


def run_launcher(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run kiln-launch ARGS to completion; return the CompletedProcess (text output)."""
    launcher = subprocess.Popen(
        [*kiln_launch_command(), *args],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Its own session, so a hung run can be stopped with its workers, not just the agent.
        start_new_session=True,
    )
    try:
        stdout, stderr = launcher.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        stdout, stderr = launcher.communicate()
        raise AssertionError(f"kiln-launch {args} hung; output tail:\n{(stdout + stderr)[-4000:]}") from None
    return subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)


def start_launcher(args: list[str], *, env: dict[str, str]) -> subprocess.Popen:
    """Start kiln-launch ARGS in the background (one 'node' of a multi-node test)."""
    return subprocess.Popen(
        [*kiln_launch_command(), *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_all(launchers: list[subprocess.Popen]) -> list[str]:
    """Wait for every launcher; on a hang, kill all of their sessions and fail with their output."""
    outputs = []
    try:
        for launcher in launchers:
            outputs.append(launcher.communicate(timeout=SUBPROCESS_TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for launcher in launchers:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
        tails = [(launcher.communicate()[0] or "")[-2000:] for launcher in launchers[len(outputs) :]]
        raise AssertionError("launchers hung; output tails:\n" + "\n---\n".join(tails)) from None
    return outputs


def only_record(job_dir: Path) -> dict:
    """Return the single run record under JOB_DIR/runs."""
    records = sorted((job_dir / "runs").glob("*.json"))
    assert len(records) == 1, records
    return json.loads(records[0].read_text())


# Written to a file and run by the launcher in the rendezvous and record tests.
PROBE_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
names = sys.argv[2].split(",") if len(sys.argv) > 2 else []
out = {
    "rank": dist.get_rank(),
    "world_size": dist.get_world_size(),
    "sum": total.item(),
    "group_rank": int(os.environ["GROUP_RANK"]),
    "env": {name: os.environ.get(name) for name in names},
}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(out, handle)
dist.destroy_process_group()
"""
