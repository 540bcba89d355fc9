"""`kiln job submit` on a Trainium group: every Neuron setting of the pod (values and sources), the compile cache on
FSx, --precompile as far as the launcher's plan, and the release's training container when no --image is given."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

from kiln.catalog import nccl
from kiln.catalog.neuron import neuron_release
from kiln.cli.main import main
from kiln.jobs.pytorchjob import ClusterFacts, JobError, JobRequest, cluster_facts, job_manifests
from kiln.spec import load_spec
from tests.support.jobs import EXAMPLES, IMAGE, run_container_plan

CACHE_ROOT = "/fsx/neuron-compile-cache"


def _facts(example: str = "trn1-eks.yaml") -> ClusterFacts:
    return cluster_facts(load_spec(EXAMPLES / example))


def _container(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def _env(job: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container(job)["env"]}


def _rule_env(rule_id: str) -> dict[str, str]:
    return next(rule["env"] for rule in nccl.presets()["rules"] if rule["id"] == rule_id)


def test_a_trainium_job_carries_every_neuron_setting_from_its_source(script, wheel) -> None:
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="trn", nodes=2), _facts(), wheel)
    env = _env(job)
    # The Neuron samples' pod variables (rule neuron-container) and AWS's Neuron EFA environment (rule neuron-efa).
    assert _rule_env("neuron-container") == {"CCOM_SOCKET_IFNAME": "eth0", "NEURON_RT_RESET_CORES": "1"}
    assert _rule_env("neuron-container").items() <= env.items()
    assert _rule_env("neuron-efa").items() <= env.items()
    # The compile cache's root on kiln's FSx claim, which the pod mounts at /fsx; the launcher in the pod picks the
    # job's and node's directory under it, so the pod names no cache every pod would write.
    assert env["KILN_NEURON_CACHE_ROOT"] == CACHE_ROOT == nccl.neuron_compile_cache().root
    assert "NEURON_COMPILE_CACHE_URL" not in env
    mounts = {m["name"]: m["mountPath"] for m in _container(job)["volumeMounts"]}
    assert CACHE_ROOT.startswith(mounts["fsx"] + "/")
    # NCCL's own variables are for GPUs: a Trainium pod gets none (its collectives do not use NCCL).
    assert not any(name.startswith("NCCL_") for name in env)
    assert "--precompile" not in _container(job)["command"]
    # A GPU job on the same terms gets none of it.
    _, gpu = job_manifests(JobRequest(script=script, image=IMAGE, name="llm"), _facts("p5-eks.yaml"), wheel)
    assert not any(name.startswith(("NEURON_", "CCOM_")) for name in _env(gpu))


def test_launcher_env_reaches_the_pod_and_keeps_the_users_compiler_flags(script, wheel) -> None:
    facts = dataclasses.replace(
        _facts(), nccl_env={"NEURON_CC_FLAGS": "--retry_failed_compilation", "NEURON_RT_LOG_LEVEL": "INFO"}
    )
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="trn"), facts, wheel)
    env = _env(job)
    assert env["NEURON_CC_FLAGS"] == "--retry_failed_compilation"
    assert (env["KILN_NEURON_CACHE_ROOT"], env["NEURON_RT_LOG_LEVEL"]) == (CACHE_ROOT, "INFO")
    own = dataclasses.replace(_facts(), nccl_env={"NEURON_CC_FLAGS": "--cache_dir=/fsx/mine"})
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="trn"), own, wheel)
    assert _env(job)["NEURON_CC_FLAGS"] == "--cache_dir=/fsx/mine" and "NEURON_COMPILE_CACHE_URL" not in _env(job)
    assert "KILN_NEURON_CACHE_ROOT" not in _env(job)


def _cache(tmp_path: Path, job: dict, wheel: bytes, script: Path, rank: int) -> dict:
    done = run_container_plan(tmp_path, job, wheel, script, node_rank=rank, env={"PET_MASTER_ADDR": "trn-master-0"})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    return {"plan": plan["compile_cache"], "set": plan["nccl_env"]["set"].get("NEURON_COMPILE_CACHE_URL")}


def test_each_pod_compiles_into_a_directory_of_its_job_and_node_rank(tmp_path, script, wheel) -> None:
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="trn", nodes=2), _facts(), wheel)
    _, precompile = job_manifests(
        JobRequest(script=script, image=IMAGE, name="trn", nodes=2, precompile=True), _facts(), wheel
    )
    _fake_parallel_compile(tmp_path)
    first, second = (_cache(tmp_path, job, wheel, script, rank) for rank in (0, 1))
    # <root>/<uid>/<the PyTorchJob's name>/node-<rank>: --dry-run shows the directory chosen and how.
    assert first["plan"]["directory"] == f"{CACHE_ROOT}/{os.getuid()}/trn/node-0" == first["set"]["value"]
    assert second["plan"]["directory"] == f"{CACHE_ROOT}/{os.getuid()}/trn/node-1"
    assert "PET_MASTER_ADDR" in first["plan"]["how"] and "PET_NODE_RANK" in first["plan"]["how"]
    # The precompile job of the same name fills the directory the training job's pod of that rank then reads.
    assert _cache(tmp_path, precompile, wheel, script, 1)["plan"] == second["plan"]


def _fake_parallel_compile(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "neuron_parallel_compile"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return tool


def test_precompile_runs_the_workers_under_neuron_parallel_compile(tmp_path, script, wheel) -> None:
    request = JobRequest(script=script, image=IMAGE, name="trn", nodes=2, precompile=True)
    _, job = job_manifests(request, _facts(), wheel)
    command = _container(job)["command"]
    assert command[command.index("--precompile") + 1 :][-1].endswith("/train.py")
    tool = _fake_parallel_compile(tmp_path)
    done = run_container_plan(tmp_path, job, wheel, script, env={"HOSTNAME": "trn-master-0"})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    wrapped = plan["precompile"]["command"]
    assert wrapped[0] == str(tool)
    assert wrapped[2:4] == ["-m", "torch.distributed.run"]
    assert wrapped[4:] == plan["torchrun_args"]
    assert "--nproc-per-node=8" in wrapped and wrapped[-1].endswith("/train.py")
    # The pod's environment carries the cache the precompile run fills; the launcher keeps it as set.
    assert plan["nccl_env"]["kept_from_environment"]["FI_PROVIDER"]["value"] == "efa"


def test_precompile_without_the_tool_in_the_image_is_one_line(tmp_path, script, wheel) -> None:
    request = JobRequest(script=script, image=IMAGE, name="trn", precompile=True)
    _, job = job_manifests(request, _facts(), wheel)
    done = run_container_plan(tmp_path, job, wheel, script)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("kiln-launch: error: --precompile: neuron_parallel_compile is not on PATH nor beside ")


def test_precompile_on_a_gpu_group_is_refused(script, wheel) -> None:
    request = JobRequest(script=script, image=IMAGE, name="llm", precompile=True)
    with pytest.raises(JobError, match=r"^--precompile: group p5 runs p5.48xlarge, which has no Neuron devices: "):
        job_manifests(request, _facts("p5-eks.yaml"), wheel)


def test_without_image_a_neuron_job_runs_its_releases_training_container(tmp_path, script, capsys) -> None:
    spec = load_spec(EXAMPLES / "trn1-eks.yaml")
    release = neuron_release(spec.neuron_release)
    assert release.training_image
    out = tmp_path / "job.yaml"
    code = main(["job", "submit", "--spec", str(EXAMPLES / "trn1-eks.yaml"), "--out", str(out), "--", str(script)])
    err = capsys.readouterr().err
    assert code == 0, err
    _, job = yaml.safe_load_all(out.read_text())
    assert _container(job)["image"] == release.training_image == _env(job)["KILN_IMAGE"]
    assert (
        f"--image not given: using {release.training_image}, Neuron {release.version}'s PyTorch training container "
        f"({release.training_image_source})"
    ) in err


def test_without_image_a_gpu_job_is_refused_in_one_line(script, capsys) -> None:
    code = main(["job", "submit", "--spec", str(EXAMPLES / "p5-eks.yaml"), "--", str(script)])
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--image: required for group p5 (p5.48xlarge): a container image with Python 3 and torch" in line
