"""Deriving nodes, node rank, rendezvous endpoint and processes per node from real scheduler variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.launcher.environment import SLURM_PORT_BASE, detect, scheduler_of
from kiln.launcher.errors import LaunchError, UsageError

ABSENT_MARKER = Path("/nonexistent/kiln/resource_config.json")


def no_gpu() -> tuple[int, str]:
    return 0, "visible CUDA devices"


def gpus(count: int):
    return lambda: (count, "visible CUDA devices")


# What `srun -N2 --ntasks-per-node=1 --gpus-per-node=8` exports on the second node.
SLURM_NODE1 = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "gpu-st-p5-[3-4]",
    "SLURM_NODELIST": "gpu-st-p5-[3-4]",
    "SLURM_STEP_NODELIST": "gpu-st-p5-[3-4]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_GPUS_ON_NODE": "8",
}

# What the Kubeflow training operator sets on worker 0 of a PyTorchJob with one
# master and one worker, nprocPerNode 8: node-level RANK, WORLD_SIZE = pods x procs.
PYTORCHJOB_WORKER0 = {
    "KUBERNETES_SERVICE_HOST": "10.100.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "HOSTNAME": "llm-train-worker-0",
    "MASTER_ADDR": "llm-train-master-0",
    "MASTER_PORT": "23456",
    "PET_MASTER_ADDR": "llm-train-master-0",
    "PET_MASTER_PORT": "23456",
    "WORLD_SIZE": "16",
    "RANK": "1",
    "PET_NNODES": "2",
    "PET_NODE_RANK": "1",
    "PET_NPROC_PER_NODE": "8",
    "PYTHONUNBUFFERED": "0",
}

# An elasticPolicy PyTorchJob: the operator hands torchrun's own PET_* knobs.
PYTORCHJOB_ELASTIC = {
    "KUBERNETES_SERVICE_HOST": "10.100.0.1",
    "HOSTNAME": "elastic-train-worker-2",
    "PET_RDZV_BACKEND": "c10d",
    "PET_RDZV_ENDPOINT": "elastic-train-worker-0:23456",
    "PET_RDZV_ID": "elastic-train",
    "PET_NNODES": "1:3",
    "PET_MAX_RESTARTS": "3",
    "PET_NPROC_PER_NODE": "auto",
}


def test_slurm_second_node():
    found = detect(SLURM_NODE1, accelerators=no_gpu, hyperpod_marker=ABSENT_MARKER)
    assert found.scheduler == "slurm"
    assert found.flavor is None
    assert found.job_id == "4242"
    assert found.nnodes == "2"
    assert found.node_rank == 1
    assert found.hosts == ("gpu-st-p5-3", "gpu-st-p5-4")
    assert found.rdzv_endpoint == f"gpu-st-p5-3:{SLURM_PORT_BASE + 4242}"
    assert found.rdzv_is_host is False
    assert found.nproc_per_node == 8
    assert found.sources["nproc_per_node"] == "SLURM_GPUS_ON_NODE"


def test_slurm_first_node_hosts_the_store():
    found = detect({**SLURM_NODE1, "SLURM_NODEID": "0", "SLURM_PROCID": "0"}, accelerators=no_gpu)
    assert (found.node_rank, found.rdzv_is_host) == (0, True)


def test_slurm_step_on_part_of_the_allocation_uses_the_step():
    env = {
        **SLURM_NODE1,
        "SLURM_JOB_NODELIST": "gpu-[1-4]",
        "SLURM_JOB_NUM_NODES": "4",
        "SLURM_NNODES": "4",
        "SLURM_STEP_NODELIST": "gpu-[3-4]",
    }
    found = detect(env, accelerators=no_gpu)
    assert found.hosts == ("gpu-3", "gpu-4")
    assert found.nnodes == "2"
    assert found.rdzv_endpoint.startswith("gpu-3:")


def test_slurm_port_precedence():
    assert detect({**SLURM_NODE1, "MASTER_PORT": "31000"}, accelerators=no_gpu).rdzv_endpoint.endswith(":31000")
    env = {**SLURM_NODE1, "MASTER_PORT": "31000", "KILN_RDZV_PORT": "32000"}
    assert detect(env, accelerators=no_gpu).rdzv_endpoint.endswith(":32000")
    assert detect(env, accelerators=no_gpu, rdzv_port=33000).rdzv_endpoint.endswith(":33000")


def test_slurm_without_gres_counts_visible_gpus():
    env = {k: v for k, v in SLURM_NODE1.items() if k != "SLURM_GPUS_ON_NODE"}
    assert detect(env, accelerators=gpus(4)).nproc_per_node == 4
    assert detect(env, accelerators=no_gpu).nproc_per_node == 1


def test_slurm_batch_script_on_one_node():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "cpu-1"}
    found = detect(env, accelerators=no_gpu)
    assert (found.node_rank, found.rdzv_is_host, found.rdzv_endpoint) == (0, True, f"cpu-1:{SLURM_PORT_BASE + 7}")


def test_slurm_rejects_one_task_per_gpu():
    env = {**SLURM_NODE1, "SLURM_STEP_NUM_TASKS": "16"}
    with pytest.raises(LaunchError, match="--ntasks-per-node=1"):
        detect(env, accelerators=no_gpu)


def test_slurm_multi_node_without_srun():
    env = {k: v for k, v in SLURM_NODE1.items() if k != "SLURM_NODEID"}
    with pytest.raises(LaunchError, match="srun"):
        detect(env, accelerators=no_gpu)


def test_slurm_count_and_list_disagree():
    with pytest.raises(LaunchError, match="names 2"):
        detect({**SLURM_NODE1, "SLURM_STEP_NUM_NODES": "3"}, accelerators=no_gpu)


def test_slurm_bad_nodelist_is_a_launch_error():
    with pytest.raises(LaunchError, match="SLURM_STEP_NODELIST"):
        detect({**SLURM_NODE1, "SLURM_STEP_NODELIST": "gpu-[4-3]"}, accelerators=no_gpu)


def test_hyperpod_is_slurm_with_a_marker(tmp_path):
    marker = tmp_path / "resource_config.json"
    marker.write_text("{}")
    found = detect(SLURM_NODE1, accelerators=no_gpu, hyperpod_marker=marker)
    assert (found.scheduler, found.flavor) == ("slurm", "hyperpod")


def test_pytorchjob_worker_counts_pods_not_processes():
    found = detect(PYTORCHJOB_WORKER0, accelerators=no_gpu)
    assert found.scheduler == "kubernetes"
    assert found.nnodes == "2"
    assert found.node_rank == 1
    assert found.rdzv_endpoint == "llm-train-master-0:23456"
    assert found.rdzv_is_host is False
    assert found.nproc_per_node == 8
    assert (found.job_id, found.sources["job_id"]) == ("llm-train", "PET_MASTER_ADDR")


def test_pytorchjob_master_hosts_the_store():
    env = {**PYTORCHJOB_WORKER0, "HOSTNAME": "llm-train-master-0", "RANK": "0", "PET_NODE_RANK": "0"}
    found = detect(env, accelerators=no_gpu)
    assert (found.node_rank, found.rdzv_is_host) == (0, True)


def test_old_operator_without_pet_variables():
    env = {
        "KUBERNETES_SERVICE_HOST": "10.100.0.1",
        "MASTER_ADDR": "old-job-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "2",
    }
    found = detect(env, accelerators=gpus(2))
    assert (found.nnodes, found.node_rank, found.nproc_per_node) == ("3", 2, 2)
    assert found.job_id == "old-job"


def test_pytorchjob_rank_out_of_range():
    with pytest.raises(LaunchError, match="outside"):
        detect({**PYTORCHJOB_WORKER0, "PET_NODE_RANK": "2"}, accelerators=no_gpu)


def test_elastic_pytorchjob_lets_the_rendezvous_assign_ranks():
    found = detect(PYTORCHJOB_ELASTIC, accelerators=gpus(4))
    assert found.flavor == "elastic"
    assert found.nnodes == "1:3"
    assert found.node_rank is None
    assert found.rdzv_is_host is None
    assert found.rdzv_endpoint == "elastic-train-worker-0:23456"
    assert found.job_id == "elastic-train"
    # PET_NPROC_PER_NODE=auto: one process per GPU.
    assert found.nproc_per_node == 4


def test_elastic_endpoint_without_port_gets_torchruns_default():
    found = detect({**PYTORCHJOB_ELASTIC, "PET_RDZV_ENDPOINT": "svc"}, accelerators=no_gpu)
    assert found.rdzv_endpoint == "svc:29400"


def test_plain_machine():
    found = detect({}, accelerators=no_gpu)
    assert found.scheduler == "plain"
    assert (found.nnodes, found.node_rank, found.rdzv_endpoint, found.rdzv_is_host) == ("1", 0, "127.0.0.1:0", True)
    assert (found.nproc_per_node, found.sources["nproc_per_node"]) == (1, "one process (visible CUDA devices: none)")
    assert found.job_id.startswith("local-")
    eight = detect({}, accelerators=gpus(8))
    assert (eight.nproc_per_node, eight.sources["nproc_per_node"]) == (8, "visible CUDA devices")


def test_the_accelerator_count_is_asked_only_when_nothing_else_says():
    def refuse() -> tuple[int, str]:
        raise AssertionError("asked although the scheduler or the flag said")

    assert detect(SLURM_NODE1, accelerators=refuse).nproc_per_node == 8
    assert detect({}, accelerators=refuse, nproc_per_node=4).nproc_per_node == 4


def test_flag_beats_every_hint():
    assert detect(SLURM_NODE1, accelerators=gpus(4), nproc_per_node=2).nproc_per_node == 2
    assert detect(PYTORCHJOB_WORKER0, accelerators=no_gpu, nproc_per_node=3).nproc_per_node == 3


def test_job_id_precedence():
    assert detect({**SLURM_NODE1, "KILN_JOB_ID": "mine"}, accelerators=no_gpu).job_id == "mine"
    assert detect({**SLURM_NODE1, "KILN_JOB_ID": "mine"}, accelerators=no_gpu, job_id="flag").job_id == "flag"
    with pytest.raises(UsageError, match="safe directory name"):
        detect({}, accelerators=no_gpu, job_id="../escape")
    with pytest.raises(UsageError, match="KILN_JOB_ID"):
        detect({"KILN_JOB_ID": "a/b"}, accelerators=no_gpu)


def test_bad_numbers_are_launch_errors():
    with pytest.raises(LaunchError, match="SLURM_NODEID"):
        detect({**SLURM_NODE1, "SLURM_NODEID": "one"}, accelerators=no_gpu)
    with pytest.raises(UsageError, match="KILN_RDZV_PORT"):
        detect({"KILN_RDZV_PORT": "70000"}, accelerators=no_gpu)


def test_which_scheduler():
    assert scheduler_of(SLURM_NODE1) == "slurm"
    assert scheduler_of(PYTORCHJOB_WORKER0) == "kubernetes"
    # Slurm running inside Kubernetes is still Slurm.
    assert scheduler_of({**PYTORCHJOB_WORKER0, **SLURM_NODE1}) == "slurm"
    # MASTER_ADDR alone, outside a pod, is a user's torchrun habit, not a PyTorchJob.
    assert scheduler_of({"MASTER_ADDR": "x"}) == "plain"
