"""The nccl-tests bandwidth formulas, and the sweep itself on a one-rank gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from kiln.launcher.busbw import algbw_gbps, allreduce_is_correct, busbw_gbps, sizes, sweep


def test_algbw_is_bytes_over_time():
    assert algbw_gbps(2_000_000_000, 0.5) == pytest.approx(4.0)


@pytest.mark.parametrize(("world", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_busbw_is_algbw_times_two_n_minus_one_over_n(world, factor):
    assert busbw_gbps(100.0, world) == pytest.approx(100.0 * factor)


def test_an_8_gpu_node_example():
    # 1 GiB all-reduced across 8 ranks in 5 ms: algbw 214.7 GB/s, busbw 375.8 GB/s.
    algbw = algbw_gbps(1 << 30, 0.005)
    assert algbw == pytest.approx(214.748, rel=1e-4)
    assert busbw_gbps(algbw, 8) == pytest.approx(375.809, rel=1e-4)


@pytest.mark.parametrize(("nbytes", "seconds", "world"), [(-1, 1.0, 2), (1, 0.0, 2), (1, 1.0, 0)])
def test_formulas_reject_nonsense(nbytes, seconds, world):
    with pytest.raises(ValueError):
        busbw_gbps(algbw_gbps(nbytes, seconds), world)


def test_sizes_double_from_min_to_max():
    assert sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    assert sizes(6, 12) == [4, 12]
    with pytest.raises(ValueError):
        sizes(8, 4)


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_sweep_on_one_rank_reports_zero_bus_traffic(one_rank_group):
    points = sweep([1024, 4096], device=torch.device("cpu"), warmup=1, iters=2)
    assert [p.nbytes for p in points] == [1024, 4096]
    for point in points:
        assert point.seconds > 0
        assert point.algbw_gbps == pytest.approx(point.nbytes / point.seconds / 1e9)
        assert point.busbw_gbps == 0.0
    assert allreduce_is_correct(torch.device("cpu"))
