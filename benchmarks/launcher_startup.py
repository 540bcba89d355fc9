"""Measure time to first training step: kiln-launch against plain torchrun.

Usage (from the repository root, in the venv that has kiln and torch):

    .venv/bin/python benchmarks/launcher_startup.py [--repeats 5] [--nproc-per-node 2] [--json]
        [--instance-type p5.48xlarge]

Both launchers run the same tiny script: initialise the process group
(NCCL on GPU, gloo on CPU), one forward/backward/optimizer step of a small
model, one all-reduce; rank 0 then prints the wall-clock time. The figure
is that time minus the moment just before the launcher process started, so
it covers interpreter and torch import, kiln's environment detection, NCCL
preset and run record, the c10d rendezvous and worker start. Runs alternate
between the launchers so drift on a shared machine hits both alike.

plain torchrun runs as ``torchrun --standalone --nproc-per-node N``, once as is
and once with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, the store setting
kiln-launch chooses so that restarts work (pytorch/pytorch#135712). The two
torchrun rows differ by the price of that setting; kiln-launch minus
torchrun+store is kiln's own overhead. kiln-launch runs with
``--nproc-per-node N`` and a throwaway checkpoint directory. Without
``--instance-type``, KILN_IMDS_ENDPOINT points at a loopback port where nothing
listens, so no IMDS query leaves the machine: the figure then excludes IMDS
latency (milliseconds on EC2; off EC2 up to two 1 s timeouts unless
KILN_INSTANCE_TYPE is set).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_STEP_SCRIPT = """
import time
import torch
import torch.distributed as dist

cuda = torch.cuda.is_available()
if cuda:
    torch.cuda.set_device(int(__import__("os").environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if cuda else "gloo")
device = "cuda" if cuda else "cpu"
model = torch.nn.Linear(64, 64).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 64, device=device)).sum().backward()
optimizer.step()
total = torch.ones(1, device=device)
dist.all_reduce(total)
if cuda:
    torch.cuda.synchronize()
if dist.get_rank() == 0:
    print(f"FIRST_STEP {time.time():.6f}", flush=True)
dist.destroy_process_group()
"""


def main() -> int:
    """Run both launchers REPEATS times each and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--instance-type", help="set KILN_INSTANCE_TYPE (else IMDS is pointed at a dead loopback port)")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    args = parser.parse_args()

    bindir = Path(sys.executable).parent
    kiln_launch, torchrun = shutil.which("kiln-launch", path=str(bindir)), shutil.which("torchrun", path=str(bindir))
    if not (kiln_launch and torchrun):
        print(f"benchmark: need kiln-launch and torchrun next to {sys.executable}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    try:
        script = work / "first_step.py"
        script.write_text(FIRST_STEP_SCRIPT)
        env = {**os.environ, "KILN_CHECKPOINT_DIR": str(work / "checkpoints"), "PYTHONWARNINGS": "ignore"}
        if args.instance_type:
            env["KILN_INSTANCE_TYPE"] = args.instance_type
        else:
            env["KILN_IMDS_ENDPOINT"] = f"http://127.0.0.1:{dead.getsockname()[1]}"
        plain = [torchrun, "--standalone", "--nproc-per-node", str(args.nproc_per_node), str(script)]
        commands = {
            "kiln-launch": ([kiln_launch, "--nproc-per-node", str(args.nproc_per_node), str(script)], env),
            "torchrun": (plain, env),
            "torchrun+store": (plain, {**env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}),
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            order = list(commands) if repeat % 2 == 0 else list(reversed(commands))
            for name in order:
                samples[name].append(_time_to_first_step(*commands[name]))
    finally:
        dead.close()
        shutil.rmtree(work, ignore_errors=True)

    summary = {
        name: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "samples_s": v}
        for name, v in samples.items()
    }
    overhead = summary["kiln-launch"]["median_s"] - summary["torchrun"]["median_s"]
    own = summary["kiln-launch"]["median_s"] - summary["torchrun+store"]["median_s"]
    if args.json:
        result = {"nproc_per_node": args.nproc_per_node, "results": summary, "overhead_s": overhead, "own_s": own}
        print(json.dumps(result, indent=2))
    else:
        print(f"time to first step, {args.nproc_per_node} process(es) per node, {args.repeats} runs each")
        for name, stats in summary.items():
            runs = " ".join(f"{s:.2f}" for s in stats["samples_s"])
            spread = f"min {stats['min_s']:.2f}, max {stats['max_s']:.2f}"
            print(f"  {name:<15} median {stats['median_s']:.2f} s  ({spread})  [{runs}]")
        print(f"  kiln-launch over torchrun (medians): {overhead:+.2f} s; over torchrun+store: {own:+.2f} s")
    return 0


def _time_to_first_step(command: list[str], env: dict[str, str]) -> float:
    started = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark: {command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    stamp = next(line for line in done.stdout.splitlines() if line.startswith("FIRST_STEP "))
    return float(stamp.split()[1]) - started


if __name__ == "__main__":
    raise SystemExit(main())
