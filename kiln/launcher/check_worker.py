"""The worker side of ``kiln-launch check``: GPU matmul sanity, all-reduce correctness, bandwidth sweep.

Started by the launcher on every process; local rank 0 of each node writes the
results to --result for its node's launcher to judge.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from kiln.launcher.busbw import allreduce_is_correct, sizes, sweep
from kiln.launcher.teardown import end_distributed_worker, leave

# fp32 with TF32 off accumulates about sqrt(n) roundings of 2^-24; 1e-4 is far
# above that for n of a few thousand and far below what a faulty GPU produces.
MATMUL_TOLERANCE = 1e-4


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """Return max |result - reference| / max |reference|, in float64."""
    result, reference = result.double().cpu(), reference.double().cpu()
    scale = reference.abs().max().item() or 1.0
    return (result - reference).abs().max().item() / scale


def matmul_sanity(device: torch.device, size: int = 2048, iters: int = 10) -> dict[str, object]:
    """Multiply fixed random matrices on DEVICE, compare with a float64 CPU product, and time it."""
    generator = torch.Generator().manual_seed(20240601)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    reference = a.double() @ b.double()
    previous = torch.backends.cuda.matmul.allow_tf32
    # TF32 would fail the fp32 tolerance by design; the check is about correct arithmetic.
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a_dev, b_dev = a.to(device), b.to(device)
        result = a_dev @ b_dev
        error = relative_error(result, reference)
        _synchronize(device)
        began = time.perf_counter()
        for _ in range(iters):
            a_dev @ b_dev
        _synchronize(device)
        seconds = (time.perf_counter() - began) / iters
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return {
        "device": str(device),
        "size": size,
        "relative_error": error,
        "ok": error <= MATMUL_TOLERANCE,
        "tflops_fp32": 2 * size**3 / seconds / 1e12,
    }


def build_parser() -> argparse.ArgumentParser:
    """Return the worker's argument parser (the parent passes validated values)."""
    parser = argparse.ArgumentParser(prog="kiln.launcher.check_worker")
    parser.add_argument("--result", required=True)
    parser.add_argument("--min-bytes", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--iters", type=int, required=True)
    parser.add_argument("--matmul-size", type=int, default=2048)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the checks on this rank; local rank 0 writes the node's result file."""
    args = build_parser().parse_args(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    matmul = matmul_sanity(device, args.matmul_size) if device.type == "cuda" else None
    correct = allreduce_is_correct(device)
    points = sweep(sizes(args.min_bytes, args.max_bytes), device=device, warmup=args.warmup, iters=args.iters)
    matmuls = _gather_matmuls(matmul, device)
    if local_rank == 0:
        result = {
            "world_size": dist.get_world_size(),
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "backend": backend,
            "device": device.type,
            "allreduce_correct": correct,
            "sweep": [point.as_dict() for point in points],
            "matmul": [m for m in matmuls if m is not None],
        }
        path = Path(args.result)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(result, indent=2))
        os.replace(temporary, path)
    # Never returns: the process group must not be torn down with the GIL held (kiln.launcher.teardown).
    end_distributed_worker()


def _gather_matmuls(matmul: dict[str, object] | None, device: torch.device) -> list[dict[str, object]]:
    """Return every rank's matmul result (all ranks call this)."""
    # Plain tensors, not all_gather_object: that one needs numpy, which nodes may lack.
    mine = torch.tensor(
        [1.0, matmul["relative_error"], matmul["tflops_fp32"]] if matmul else [0.0, 0.0, 0.0],
        dtype=torch.float64,
        device=device,
    )
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    size = matmul["size"] if matmul else 0
    results = []
    for rank, row in enumerate(gathered):
        present, error, tflops = row.tolist()
        if present:
            results.append(
                {
                    "rank": rank,
                    "size": size,
                    "relative_error": error,
                    "ok": error <= MATMUL_TOLERANCE,
                    "tflops_fp32": tflops,
                }
            )
    return results


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    leave(main())
