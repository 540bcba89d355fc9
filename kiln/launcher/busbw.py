"""All-reduce bandwidth with the nccl-tests formulas.

algbw = bytes / time; busbw = algbw * 2(n-1)/n, the share of the data each
rank must send and receive in a ring all-reduce, so busbw compares with link
speed whatever the rank count. GB/s are 10^9 bytes per second, as nccl-tests
prints them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """One message size of a sweep: the slowest rank's time and both bandwidths."""

    nbytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float

    def as_dict(self) -> dict[str, float]:
        """Return the JSON-ready form used in reports."""
        return asdict(self)


def algbw_gbps(nbytes: int, seconds: float) -> float:
    """Return algorithm bandwidth in GB/s: bytes moved per second of wall time."""
    if nbytes < 0 or seconds <= 0:
        raise ValueError(f"need nbytes >= 0 and seconds > 0 (got {nbytes}, {seconds})")
    return nbytes / seconds / 1e9


def busbw_gbps(algbw: float, world_size: int) -> float:
    """Return all-reduce bus bandwidth in GB/s: algbw * 2(n-1)/n."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1 (got {world_size})")
    return algbw * 2 * (world_size - 1) / world_size


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Return powers of two from MIN_BYTES to MAX_BYTES, both rounded to multiples of 4 bytes (float32)."""
    if not 4 <= min_bytes <= max_bytes:
        raise ValueError(f"need 4 <= min_bytes <= max_bytes (got {min_bytes}, {max_bytes})")
    found, size = [], min_bytes
    while size <= max_bytes:
        found.append(size // 4 * 4)
        size *= 2
    return found


def sweep(message_sizes: list[int], *, device: torch.device, warmup: int, iters: int) -> list[SweepPoint]:
    """Time all-reduce for each size across the current process group (every rank calls this)."""
    world = dist.get_world_size()
    points = []
    for nbytes in message_sizes:
        # Zeros: repeated in-place sums stay finite at any rank count.
        buffer = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(buffer)
        _synchronize(device)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buffer)
        _synchronize(device)
        elapsed = torch.tensor([(time.perf_counter() - began) / iters], dtype=torch.float64, device=device)
        # The collective is as fast as its slowest rank.
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = elapsed.item()
        algbw = algbw_gbps(nbytes, seconds)
        points.append(SweepPoint(nbytes=nbytes, seconds=seconds, algbw_gbps=algbw, busbw_gbps=busbw_gbps(algbw, world)))
    return points


def allreduce_is_correct(device: torch.device) -> bool:
    """Return whether summing rank+1 over all ranks gives n(n+1)/2 everywhere (every rank calls this)."""
    world = dist.get_world_size()
    value = torch.full((1024,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(value)
    return bool(torch.all(value == world * (world + 1) / 2).item())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
