"""Two launchers as two 'nodes' on loopback meet through c10d, given real Slurm or PyTorchJob variables."""

from __future__ import annotations

import json

import pytest

from tests.support.launcher import PROBE_SCRIPT, free_port, start_launcher, wait_all

# Each test starts several processes that import torch.
pytestmark = pytest.mark.slow

WORKER_VARS = "NCCL_SHM_USE_CUDA_MEMCPY,NCCL_SOCKET_IFNAME,NCCL_ALGO,KILN_JOB_ID,KILN_INSTANCE_TYPE,KILN_CHECKPOINT_DIR"


def run_two_nodes(tmp_path, node_envs: list[dict[str, str]], extra_args: list[str] = ()) -> list[dict]:
    """Start one launcher per env, wait for both, return each rank's probe output."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    launchers = [
        start_launcher([*extra_args, "--max-restarts", "0", str(script), str(out), WORKER_VARS], env=env)
        for env in node_envs
    ]
    logs = wait_all(launchers)
    for launcher, log in zip(launchers, logs, strict=True):
        assert launcher.returncode == 0, log
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(len(node_envs))]


def test_two_slurm_nodes(tmp_path):
    port = free_port()
    common = {
        "SLURM_JOB_ID": "5150",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "127.0.0.[1-2]",
        "SLURM_STEP_NODELIST": "127.0.0.[1-2]",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_LOCALID": "0",
        "KILN_RDZV_PORT": str(port),
        "KILN_INSTANCE_TYPE": "g5.12xlarge",
    }
    nodes = [
        # Node 0's user pinned the socket interface; the preset must not clobber it.
        {**common, "SLURM_NODEID": "0", "SLURM_PROCID": "0", "NCCL_SOCKET_IFNAME": "lo"},
        {**common, "SLURM_NODEID": "1", "SLURM_PROCID": "1"},
    ]
    ranks = run_two_nodes(tmp_path, nodes, ["--nccl-env", "NCCL_ALGO=Ring"])
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]
    assert sorted(r["group_rank"] for r in ranks) == [0, 1]
    envs = {r["group_rank"]: r["env"] for r in ranks}
    for env in envs.values():
        assert env["KILN_JOB_ID"] == "5150"
        assert env["KILN_INSTANCE_TYPE"] == "g5.12xlarge"
        assert env["NCCL_SHM_USE_CUDA_MEMCPY"] == "1"
        assert env["NCCL_ALGO"] == "Ring"
    assert sorted(env["NCCL_SOCKET_IFNAME"] for env in envs.values()) == ["^docker,lo,veth", "lo"]

    by_node = {r["environment"]["node_rank"]: r for r in _records(tmp_path / "checkpoints" / "5150")}
    assert set(by_node) == {0, 1}
    for node_rank, record in by_node.items():
        assert record["status"] == "succeeded"
        assert record["environment"]["scheduler"] == "slurm"
        assert record["environment"]["rdzv_endpoint"] == f"127.0.0.1:{port}"
        assert record["environment"]["rdzv_is_host"] is (node_rank == 0)
        assert record["environment"]["nnodes"] == "2"
    assert by_node[0]["nccl_env"]["kept_from_environment"]["NCCL_SOCKET_IFNAME"]["value"] == "lo"


def test_two_pytorchjob_pods(tmp_path):
    port = free_port()
    common = {
        "KUBERNETES_SERVICE_HOST": "10.100.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "WORLD_SIZE": "2",
        "PYTHONUNBUFFERED": "0",
    }
    nodes = [
        {**common, "HOSTNAME": "kjob-master-0", "RANK": "0", "PET_NODE_RANK": "0"},
        {**common, "HOSTNAME": "kjob-worker-0", "RANK": "1", "PET_NODE_RANK": "1"},
    ]
    ranks = run_two_nodes(tmp_path, nodes)
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]
    assert all(r["env"]["KILN_JOB_ID"] == "kjob" for r in ranks)
    by_node = {r["environment"]["node_rank"]: r for r in _records(tmp_path / "checkpoints" / "kjob")}
    assert set(by_node) == {0, 1}
    for node_rank, record in by_node.items():
        assert record["environment"]["scheduler"] == "kubernetes"
        assert record["environment"]["rdzv_endpoint"] == f"127.0.0.1:{port}"
        assert record["environment"]["rdzv_is_host"] is (node_rank == 0)
        assert record["environment"]["nproc_per_node"] == 1
        assert record["environment"]["sources"]["nnodes"] == "PET_NNODES"


def _records(job_dir):
    return [json.loads(path.read_text()) for path in sorted((job_dir / "runs").glob("*.json"))]
