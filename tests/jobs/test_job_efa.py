"""A job on EFA nodes: AWS's pod environment for EFA, the EFA count of its type, and its first step refusing TCP in
the pod (the container's own command, run against a simulated node) unless submitted with --allow-tcp."""

from __future__ import annotations

import json
from pathlib import Path

from kiln.catalog import instance_type, preset_environment
from kiln.catalog.kubernetes import EFA_RESOURCE, GPU_RESOURCE
from kiln.catalog.nccl import presets
from kiln.cli.main import main
from kiln.jobs.pytorchjob import JOB_FILES_DIR, ClusterFacts, JobRequest, cluster_facts, job_manifests
from kiln.spec import load_spec
from tests.support.efa_node import PLUGIN_DIR, simulate_efa_node
from tests.support.jobs import EXAMPLES, IMAGE, run_container_plan
from tests.support.pytorchjob_schema import check_pytorchjob


def _container(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def _env(job: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container(job)["env"]}


def test_a_p5_job_carries_awss_pod_environment_for_efa_and_a_g6_job_none(script, wheel) -> None:
    spec = load_spec(EXAMPLES / "p5-eks.yaml")
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=2), cluster_facts(spec), wheel)
    check_pytorchjob(job, spec.kubernetes_version)
    env = _env(job)
    # The EFA guide and the EKS guide's NCCL test pod: the efa provider, device RDMA on p5, fork safety, and the
    # EKS guide's buffer and chunk sizes; each from the catalog's container rules, which name their sources.
    assert {name: env[name] for name in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")} == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
    }
    assert (env["NCCL_BUFFSIZE"], env["NCCL_P2P_NET_CHUNKSIZE"]) == ("8388608", "524288")
    assert env["KILN_IMAGE"] == IMAGE
    rules = {rule["id"]: rule for rule in presets()["rules"]}
    for rule_id in ("container-efa", "container-efa-device-rdma"):
        assert rules[rule_id]["when"]["container"] is True
        assert "https://docs.aws.amazon.com/" in rules[rule_id]["source"]
        assert rules[rule_id]["env"].items() <= env.items()
    # A node's own environment (nccl.env on a Slurm host) gets none of the container's rules.
    assert "FI_PROVIDER" not in preset_environment("p5.48xlarge")
    # The EFA devices asked for are the type's interfaces.
    assert _container(job)["resources"]["limits"][EFA_RESOURCE] == str(instance_type("p5.48xlarge").efa_interface_count)
    assert "--allow-tcp" not in _container(job)["command"]
    # A GPU type without EFA asks for no EFA device and gets none of the EFA environment.
    g6 = ClusterFacts(**{**cluster_facts(spec).__dict__, "groups": {"g6": ("g6.xlarge", 2)}})
    _, small = job_manifests(JobRequest(script=script, image=IMAGE, name="small"), g6, wheel)
    assert _container(small)["resources"]["limits"] == {GPU_RESOURCE: "1"}
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "NCCL_BUFFSIZE"} & set(_env(small))


def test_submit_allow_tcp_reaches_the_launcher_before_the_script(tmp_path, script, capsys) -> None:
    out = tmp_path / "job.yaml"
    argv = ["job", "submit", "--spec", str(EXAMPLES / "p5-eks.yaml"), "--image", IMAGE, "--allow-tcp"]
    assert main([*argv, "--out", str(out), "--", str(script), "--epochs", "3"]) == 0, capsys.readouterr().err
    import yaml

    _, job = yaml.safe_load_all(out.read_text())
    command = _container(job)["command"]
    assert command[command.index("--allow-tcp") + 1] == f"{JOB_FILES_DIR}/train.py"
    assert command[-2:] == ["--epochs", "3"]
    check_pytorchjob(job, load_spec(EXAMPLES / "p5-eks.yaml").kubernetes_version)


def _run_pod(tmp_path: Path, script: Path, wheel: bytes, node: Path, *, allow_tcp: bool = False):
    """Run the job's container command as the pod would, on NODE (KILN_ROOT), with --dry-run before the script."""
    request = JobRequest(script=script, image=IMAGE, name="llm", nodes=2, allow_tcp=allow_tcp)
    _, job = job_manifests(request, cluster_facts(load_spec(EXAMPLES / "p5-eks.yaml")), wheel)
    return run_container_plan(tmp_path, job, wheel, script, env={"KILN_ROOT": str(node)})


def test_the_jobs_first_step_refuses_tcp_in_a_stock_image_on_an_efa_node(tmp_path, script, wheel) -> None:
    done = _run_pod(tmp_path, script, wheel, simulate_efa_node(tmp_path / "node"))
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"kiln-launch: error: p5.48xlarge has 32 EFA device(s) here, but NCCL would fall back to "
                           f"TCP sockets in image {IMAGE}: no aws-ofi-nccl plugin")  # fmt: skip
    assert "--allow-tcp" in line


def test_a_job_submitted_with_allow_tcp_starts_and_says_so(tmp_path, script, wheel) -> None:
    done = _run_pod(tmp_path, script, wheel, simulate_efa_node(tmp_path / "node"), allow_tcp=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("kiln-launch: warning: --allow-tcp: p5.48xlarge has 32 EFA device(s)")
    assert json.loads(done.stdout)["efa"]["status"] == "tcp_allowed"


def test_an_image_that_carries_the_stack_starts_with_the_plugin_on_the_loader_path(tmp_path, script, wheel) -> None:
    node = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so", libnccl_net_link=True, fi_info=True)
    done = _run_pod(tmp_path, script, wheel, node)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["efa"]["status"] == "ready"
    assert plan["worker_env"]["LD_LIBRARY_PATH"].split(":")[0] == str(node / PLUGIN_DIR)
