"""The readiness check: the screen, the judgement of measurements, exit codes, and real CPU runs."""

from __future__ import annotations

import json

import pytest
import torch

from kiln.catalog import instance_type
from kiln.launcher import hardware
from kiln.launcher.check import FAILED, INFORMATIONAL, NOT_APPLICABLE, PASSED, NodeFacts, judge_run, overall, screen
from kiln.launcher.check_worker import matmul_sanity, relative_error
from kiln.launcher.nccllog import parse
from kiln.launcher.neuron import NeuronScan
from tests.support.launcher import cpu_node, run_launcher

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

GPU_AND_EFA_CHECKS = {"cuda", "nccl", "accelerators", "efa_devices", "ofi_nccl_plugin"}
NEURON_CHECKS = {"neuron_cores", "neuron_device_nodes"}
CPU_NODE = cpu_node()
HEALTHY_P5 = NodeFacts(
    torch_version="2.13.0",
    cuda_version="12.9",
    cuda_available=True,
    nccl_version="2.27.3",
    cuda_devices=8,
    neuron=NeuronScan(tool=None),
    efa_devices=tuple(f"rdmap{i}s0" for i in range(32)),
    ofi_plugin="/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
)


def by_name(results) -> dict[str, str]:
    return {r.name: r.status for r in results}


def gpu_result(world=8, local_world=8, busbw=400.0, correct=True, bad_rank=None) -> dict:
    matmuls = [
        {
            "rank": r,
            "size": 2048,
            "relative_error": 0.5 if r == bad_rank else 1e-7,
            "ok": r != bad_rank,
            "tflops_fp32": 50,
        }
        for r in range(world)
    ]
    return {
        "world_size": world,
        "local_world_size": local_world,
        "backend": "nccl",
        "device": "cuda",
        "allreduce_correct": correct,
        "sweep": [{"nbytes": 1 << 30, "seconds": 0.005, "algbw_gbps": busbw / 1.75, "busbw_gbps": busbw}],
        "matmul": matmuls,
    }


EFA_LOG = parse(["n:1:1 [0] NCCL INFO Using network Libfabric", "n:1:1 [0] NCCL INFO NET/OFI Selected provider is efa"])
SOCKET_LOG = parse(["n:1:1 [0] NCCL INFO Using network Socket"])


def test_cpu_machine_reports_gpu_neuron_and_efa_as_not_applicable():
    statuses = by_name(screen(None, CPU_NODE, "no instance type known"))
    checks = GPU_AND_EFA_CHECKS | NEURON_CHECKS
    assert {name: statuses[name] for name in checks} == dict.fromkeys(checks, NOT_APPLICABLE)
    assert statuses["torch"] == INFORMATIONAL
    assert PASSED not in statuses.values()


def test_cpu_instance_type_from_the_catalog_is_not_applicable_too():
    statuses = by_name(screen(instance_type("c6i.xlarge"), CPU_NODE))
    assert {statuses[name] for name in GPU_AND_EFA_CHECKS | NEURON_CHECKS} == {NOT_APPLICABLE}


def test_healthy_p5_passes_the_screen():
    results = screen(instance_type("p5.48xlarge"), HEALTHY_P5)
    statuses = by_name(results)
    assert {statuses[name] for name in GPU_AND_EFA_CHECKS} == {PASSED}
    assert {statuses[name] for name in NEURON_CHECKS} == {NOT_APPLICABLE}
    assert next(r for r in results if r.name == "neuron_cores").detail == "p5.48xlarge has no Neuron devices"


@pytest.mark.parametrize(
    ("change", "failing"),
    [
        ({"cuda_devices": 7}, "accelerators"),
        ({"efa_devices": tuple(f"rdmap{i}s0" for i in range(31))}, "efa_devices"),
        ({"ofi_plugin": None}, "ofi_nccl_plugin"),
        ({"cuda_available": False, "cuda_devices": 0, "nccl_version": None}, "cuda"),
    ],
)
def test_broken_p5_fails_the_screen(change, failing):
    facts = NodeFacts(**{**HEALTHY_P5.__dict__, **change})
    results = screen(instance_type("p5.48xlarge"), facts)
    assert by_name(results)[failing] == FAILED
    assert overall(results) == 1


def test_busbw_floor_is_intra_node_for_one_node_and_inter_node_for_several():
    p5 = instance_type("p5.48xlarge")
    floor = p5.busbw_floor_gbps
    one_node = by_name(judge_run(p5, gpu_result(busbw=floor.intra_node + 1), EFA_LOG))
    assert one_node["allreduce_busbw"] == PASSED
    slow_node = by_name(judge_run(p5, gpu_result(busbw=floor.intra_node - 1), EFA_LOG))
    assert slow_node["allreduce_busbw"] == FAILED
    # Two nodes: the (lower) inter-node floor applies.
    two_nodes = judge_run(p5, gpu_result(world=16, busbw=floor.inter_node + 1), EFA_LOG)
    assert by_name(two_nodes)["allreduce_busbw"] == PASSED
    assert next(r for r in two_nodes if r.name == "allreduce_busbw").data["floor_gbps"] == floor.inter_node


def test_tcp_fallback_on_an_efa_type_fails_loudly():
    results = judge_run(instance_type("p5.48xlarge"), gpu_result(), SOCKET_LOG)
    transport = next(r for r in results if r.name == "network_transport")
    assert transport.status == FAILED
    assert "FELL BACK TO TCP SOCKETS" in transport.detail
    assert by_name(judge_run(instance_type("p5.48xlarge"), gpu_result(), EFA_LOG))["network_transport"] == PASSED


def test_no_transport_evidence_on_efa_is_a_failure_not_a_pass():
    results = judge_run(instance_type("p5.48xlarge"), gpu_result(), None, nccl_debug_note="NCCL_DEBUG=WARN is set")
    assert by_name(results)["network_transport"] == FAILED


def test_wrong_matmul_or_allreduce_fails():
    assert by_name(judge_run(None, gpu_result(bad_rank=3), None))["matmul"] == FAILED
    assert by_name(judge_run(None, gpu_result(correct=False), None))["allreduce_correct"] == FAILED


def test_unknown_gpu_type_is_informational_and_workers_that_died_fail():
    statuses = by_name(judge_run(None, gpu_result(), None))
    assert statuses["allreduce_busbw"] == INFORMATIONAL
    assert statuses["network_transport"] == NOT_APPLICABLE
    assert by_name(judge_run(None, None, None, run_error="rank 0 failed")) == {"workers": FAILED}


def test_matmul_sanity_runs_and_catches_wrong_results():
    result = matmul_sanity(torch.device("cpu"), size=64, iters=1)
    assert result["ok"]
    reference = torch.eye(4)
    assert relative_error(reference, reference) == 0.0
    assert relative_error(reference * 1.01, reference) == pytest.approx(0.01)


def test_efa_devices_and_plugin_discovery(tmp_path):
    sysfs = tmp_path / "infiniband"
    for name in ("rdmap16s27", "rdmap32s27"):
        (sysfs / name).mkdir(parents=True)
    assert hardware.efa_devices(sysfs) == ["rdmap16s27", "rdmap32s27"]
    assert hardware.efa_devices(tmp_path / "absent") == []
    lib = tmp_path / "lib"
    lib.mkdir()
    assert hardware.ofi_nccl_plugin({"LD_LIBRARY_PATH": str(lib)}, extra_dirs=()) is None
    (lib / "libnccl-net-ofi.so").write_bytes(b"")
    assert hardware.ofi_nccl_plugin({"LD_LIBRARY_PATH": str(lib)}, extra_dirs=()) == str(lib / "libnccl-net-ofi.so")


@pytest.mark.slow
def test_check_on_this_cpu_machine(tmp_path):
    output = tmp_path / "report.json"
    # Three ranks so busbw (x 4/3) and algbw differ and the formula shows.
    done = run_launcher(["--nproc-per-node", "3", "check", "--json", "--max-bytes", "65536", "--output", str(output)])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report == json.loads(output.read_text()) | {"duration_s": report["duration_s"]}
    assert report["ready"] is True
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    for name in GPU_AND_EFA_CHECKS | NEURON_CHECKS | {"matmul", "network_transport"}:
        assert statuses[name] == NOT_APPLICABLE, name
    assert statuses["allreduce_correct"] == PASSED
    assert statuses["allreduce_busbw"] == INFORMATIONAL
    assert [p["nbytes"] for p in report["sweep"]] == [1024 << i for i in range(7)]
    for point in report["sweep"]:
        assert point["algbw_gbps"] == pytest.approx(point["nbytes"] / point["seconds"] / 1e9)
        assert point["busbw_gbps"] == pytest.approx(point["algbw_gbps"] * 4 / 3)


@pytest.mark.slow
def test_check_fails_a_cpu_machine_claiming_to_be_a_p5():
    done = run_launcher(
        ["--nproc-per-node", "2", "check", "--max-bytes", "4096"], env={"KILN_INSTANCE_TYPE": "p5.48xlarge"}
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("kiln-launch check: NOT READY (instance type p5.48xlarge")
    assert "failed          accelerators       0 gpu device(s) visible; p5.48xlarge has 8" in done.stdout
    assert "failed          efa_devices" in done.stdout


@pytest.mark.parametrize("args", [["check", "--bogus"], ["check", "--min-bytes", "64", "--max-bytes", "8"]])
def test_check_usage_errors_exit_2(args):
    done = run_launcher(args)
    assert done.returncode == 2
    assert done.stderr.startswith("kiln-launch: error: check: ")
    assert "Traceback" not in done.stderr
