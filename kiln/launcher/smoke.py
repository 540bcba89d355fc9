"""The smoke job: a small GPT on synthetic data, DDP (FSDP on several GPUs), checkpointed and resumable.

Run it through the launcher, ``kiln-launch [--nproc-per-node N] smoke [--steps N]``;
each step rank 0 prints the loss, the step time and tokens/s. Checkpoints go to
``<checkpoint_dir>/<job id>`` every ``--checkpoint-every`` steps and a restarted
run resumes from the newest complete one. Rank 0 also writes
``smoke-summary.json`` there. ``--kill-at-step`` SIGKILLs one rank on the first
attempt only (neither restarted by torchrun nor requeued by Slurm), to prove restart and resume on a real cluster.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from kiln.launcher.checkpoint import Checkpointer
from kiln.launcher.errors import UsageError
from kiln.launcher.heartbeat import Heartbeat
from kiln.launcher.model import GPTConfig, TinyGPT, synthetic_batch
from kiln.launcher.smoke_options import parse_args
from kiln.launcher.teardown import end_distributed_worker, leave

SUMMARY_FILE = "smoke-summary.json"
WARMUP_STEPS = 5


@dataclass(frozen=True, kw_only=True)
class _Process:
    """Where this worker sits: torchrun's variables, or a lone process."""

    distributed: bool
    rank: int
    world: int
    attempt: int
    # Slurm's requeues of the job (SLURM_RESTART_COUNT): torchrun counts its restarts afresh after each.
    requeues: int
    device: torch.device


def main(argv: list[str] | None = None) -> int:
    """Train, checkpoint and report; return the exit code."""
    try:
        args = parse_args(argv)
    except UsageError as error:
        print(f"kiln-launch: error: {error}", file=sys.stderr)
        return 2
    started = time.time()
    proc = _process()
    strategy = args.strategy
    if strategy == "auto":
        strategy = "fsdp" if proc.device.type == "cuda" and proc.world > 1 else "ddp"
    config = GPTConfig(seq_len=args.seq_len, d_model=args.d_model, n_layers=args.layers)
    torch.manual_seed(args.seed)
    model = TinyGPT(config).to(proc.device)
    parameters = sum(p.numel() for p in model.parameters())
    model = _wrap(model, strategy, proc)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    checkpointer = None
    if os.environ.get("KILN_JOB_ID"):
        checkpointer = Checkpointer.from_env(every=args.checkpoint_every, keep=args.keep)
    elif proc.rank == 0:
        print("smoke: KILN_JOB_ID is not set, so no checkpoints (start through kiln-launch)", flush=True)
    resumed_from = _resume(checkpointer, model, optimizer, config, proc) if checkpointer else None
    start = (resumed_from or 0) + 1
    if proc.rank == 0:
        print(
            f"smoke: {parameters} parameters, {strategy} over {proc.world} rank(s) on {proc.device.type}, "
            f"attempt {proc.attempt}, steps {start}..{args.steps}",
            flush=True,
        )

    kill_rank = args.kill_rank if args.kill_rank is not None else proc.world - 1
    # kiln-launch's hang watchdog follows the steps (a no-op when not started by kiln-launch).
    beat = Heartbeat.from_env()
    tokens_per_step = args.batch_size * args.seq_len * proc.world
    losses: dict[int, float] = {}
    step_times: list[float] = []
    first_step_s = None
    for step in range(start, args.steps + 1):
        if step == args.kill_at_step and _first_attempt(proc) and proc.rank == kill_rank:
            print(f"smoke: rank {proc.rank} kills itself at step {step} (fault injection)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        began = time.perf_counter()
        losses[step] = _train_step(model, optimizer, config, args, step, proc)
        step_times.append(time.perf_counter() - began)
        beat.step(step)
        if first_step_s is None:
            first_step_s = time.time() - started
        if proc.rank == 0:
            print(
                f"step {step:5d}/{args.steps}  loss {losses[step]:.4f}  step_time {step_times[-1]:.4f} s  "
                f"tokens/s {tokens_per_step / step_times[-1]:,.0f}",
                flush=True,
            )
        if checkpointer and checkpointer.due(step):
            model_state, optim_state = get_state_dict(
                model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            state = {"model": model_state, "optim": optim_state, "step": step, "config": asdict(config)}
            checkpointer.save(step, state)

    if proc.rank == 0:
        median = statistics.median(step_times) if step_times else None
        summary = {
            "steps": args.steps,
            "final_loss": losses.get(args.steps),
            "losses": {str(step): loss for step, loss in losses.items()},
            "resumed_from": resumed_from,
            "attempt": proc.attempt,
            "world_size": proc.world,
            "strategy": strategy,
            "device": proc.device.type,
            "parameters": parameters,
            "checkpoint_every": args.checkpoint_every,
            "median_step_time_s": median,
            "median_tokens_per_s": tokens_per_step / median if median else None,
            "first_step_s": first_step_s,
        }
        if checkpointer:
            _write_summary(checkpointer.job_dir / SUMMARY_FILE, summary)
        final = summary["final_loss"]
        print(f"smoke: done, final loss {final:.4f}" if final is not None else "smoke: nothing left to do", flush=True)
    if proc.distributed:
        # Never returns: the process group must not be torn down with the GIL held (kiln.launcher.teardown).
        end_distributed_worker()
    return 0


def _first_attempt(proc: _Process) -> bool:
    return proc.attempt == 0 and proc.requeues == 0


def _process() -> _Process:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return _Process(
        distributed=distributed,
        rank=int(os.environ.get("RANK", "0")),
        world=int(os.environ.get("WORLD_SIZE", "1")),
        attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        requeues=int(os.environ.get("SLURM_RESTART_COUNT") or "0"),
        device=device,
    )


def _resume(checkpointer: Checkpointer, model, optimizer, config: GPTConfig, proc: _Process) -> int | None:
    """Load the newest complete checkpoint into MODEL and OPTIMIZER; return its step, or None."""
    resumed = checkpointer.load_latest()
    if resumed is None:
        return None
    if resumed.state.get("config") != asdict(config):
        # Loading would fail deep inside torch; say what is wrong instead.
        raise SystemExit(
            f"kiln-launch: error: smoke: checkpoint {resumed.path} is for model {resumed.state.get('config')}, "
            f"not {asdict(config)}; use another --job-id or --checkpoint-dir"
        )
    set_state_dict(
        model,
        optimizer,
        model_state_dict=resumed.state["model"],
        optim_state_dict=resumed.state["optim"],
        options=StateDictOptions(full_state_dict=True),
    )
    if proc.rank == 0:
        print(f"smoke: resumed from step {resumed.step} ({resumed.path})", flush=True)
    return resumed.step


def _train_step(model, optimizer, config: GPTConfig, args, step: int, proc: _Process) -> float:
    """Run one optimizer step on STEP's batch; return the loss averaged over ranks."""
    # The learning rate is a function of the step alone, so a resumed run follows the same schedule.
    for group in optimizer.param_groups:
        group["lr"] = args.lr * min(1.0, step / WARMUP_STEPS)
    inputs, targets = synthetic_batch(config, seed=args.seed, step=step, rank=proc.rank, batch_size=args.batch_size)
    logits = model(inputs.to(proc.device))
    loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), targets.to(proc.device).reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    if proc.distributed:
        dist.all_reduce(mean)
        mean /= proc.world
    return mean.item()


def _wrap(model: torch.nn.Module, strategy: str, proc: _Process) -> torch.nn.Module:
    if not proc.distributed:
        return model
    if strategy == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    return DistributedDataParallel(model, device_ids=[proc.device.index] if proc.device.type == "cuda" else None)


def _write_summary(path: Path, summary: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(temporary, path)


if __name__ == "__main__":
    leave(main())
