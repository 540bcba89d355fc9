"""`kiln job submit`: the PyTorchJob a script becomes, its refusals, its entry point run for real, and its apply."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kiln.catalog import preset_environment
from kiln.catalog.kubernetes import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    JOB_QUEUE,
    LUSTRE_CLAIM,
    NEURON_DEVICE_RESOURCE,
    NEURON_SCHEDULER_NAME,
    NODE_GROUP_LABEL,
    QUEUE_NAME_LABEL,
)
from kiln.cli.main import main
from kiln.jobs.pytorchjob import (
    JOB_FILES_DIR,
    LAUNCHER_WHEEL,
    ClusterFacts,
    JobError,
    JobRequest,
    cluster_facts,
    job_manifests,
)
from kiln.spec import load_spec
from tests.support.jobs import EXAMPLES, IMAGE, run_container_plan
from tests.support.pytorchjob_schema import check_pytorchjob


def _facts(example: str) -> ClusterFacts:
    return cluster_facts(load_spec(EXAMPLES / example))


def _pod(job: dict, replica: str = "Master") -> dict:
    return job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]


def test_a_gpu_job_takes_whole_nodes_with_efa_the_preset_fsx_and_the_queue(script, wheel) -> None:
    facts = _facts("p5-eks.yaml")
    files, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=3), facts, wheel)
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == JOB_QUEUE
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    assert job["spec"]["nprocPerNode"] == "8"
    pod = _pod(job, "Worker")
    assert pod["nodeSelector"] == {NODE_GROUP_LABEL: "p5"}
    assert "schedulerName" not in pod
    [container] = pod["containers"]
    assert container["name"] == "pytorch"
    assert container["resources"]["limits"] == {GPU_RESOURCE: "8", EFA_RESOURCE: "32"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert preset_environment("p5.48xlarge").items() <= env.items()
    assert env["KILN_INSTANCE_TYPE"] == "p5.48xlarge"
    assert env["KILN_CHECKPOINT_DIR"] == "/fsx/checkpoints"
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [LUSTRE_CLAIM]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["fsx"] == "/fsx" and mounts["job-files"] == JOB_FILES_DIR
    # The launcher runs the script from the job's files, with the script's own arguments after it.
    assert container["command"][-1] == f"{JOB_FILES_DIR}/train.py"
    assert files["data"]["train.py"] == script.read_text()
    assert base64.b64decode(files["binaryData"][LAUNCHER_WHEEL]) == wheel
    assert {"name": "job-files", "configMap": {"name": files["metadata"]["name"]}} in pod["volumes"]


@pytest.mark.parametrize("example", ["p5-eks.yaml", "trn1-eks.yaml"])
def test_every_job_passes_the_operators_types_and_kubernetes_schema(script, wheel, example) -> None:
    spec = load_spec(EXAMPLES / example)
    for nodes in (1, 3):
        files, job = job_manifests(
            JobRequest(script=script, image=IMAGE, name="llm", nodes=nodes), _facts(example), wheel
        )
        check_pytorchjob(job, spec.kubernetes_version)
        kubernetes_validate.validate(files, spec.kubernetes_version, strict=True)


# Pod Security Standards, baseline (https://kubernetes.io/docs/concepts/security/pod-security-standards/): the
# capabilities a container may add, and the pod and container fields it may not set to anything but these.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def baseline_violations(pod: dict) -> list[str]:
    """Return what in POD's spec Pod Security's baseline level refuses (empty when it admits the pod)."""
    found = [f"spec.{field}" for field in ("hostNetwork", "hostPID", "hostIPC") if pod.get(field)]
    found += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    if pod.get("securityContext", {}).get("seccompProfile", {}).get("type") == "Unconfined":
        found.append("spec.securityContext.seccompProfile Unconfined")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        context = container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{container['name']}: privileged")
        if context.get("windowsOptions", {}).get("hostProcess"):
            found.append(f"{container['name']}: hostProcess")
        added = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        found += [f"{container['name']}: adds {cap}" for cap in sorted(added)]
        if context.get("procMount", "Default") != "Default":
            found.append(f"{container['name']}: procMount")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append(f"{container['name']}: seccompProfile Unconfined")
        found += [f"{container['name']}: hostPort" for port in container.get("ports", []) if port.get("hostPort")]
    return found


@pytest.mark.parametrize("example", ["p5-eks.yaml", "trn1-eks.yaml"])
def test_job_pods_pass_pod_security_baseline_and_gain_no_privileges(script, wheel, example) -> None:
    # The jobs' namespace enforces baseline (kiln.constructs.eks_addons.pod_security_patch): a job must pass it.
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=2), _facts(example), wheel)
    for replica in ("Master", "Worker"):
        pod = _pod(job, replica)
        assert baseline_violations(pod) == []
        assert all(c["securityContext"]["allowPrivilegeEscalation"] is False for c in pod["containers"])
    privileged = json.loads(json.dumps(_pod(job)))
    privileged["hostNetwork"] = True
    privileged["containers"][0]["securityContext"]["privileged"] = True
    assert baseline_violations(privileged) == ["spec.hostNetwork", "pytorch: privileged"]


def test_the_schema_check_catches_what_the_operator_would_refuse(script, wheel) -> None:
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm"), _facts("p5-eks.yaml"), wheel)
    misspelt = json.loads(json.dumps(job))
    misspelt["spec"]["nprocsPerNode"] = misspelt["spec"].pop("nprocPerNode")
    with pytest.raises(AssertionError, match="no field nprocsPerNode"):
        check_pytorchjob(misspelt, "1.36")
    untyped = json.loads(json.dumps(job))
    untyped["spec"]["nprocPerNode"] = 8
    with pytest.raises(AssertionError, match="is not str"):
        check_pytorchjob(untyped, "1.36")
    bad_pod = json.loads(json.dumps(job))
    bad_pod["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        check_pytorchjob(bad_pod, "1.36")
    no_replicas = json.loads(json.dumps(job))
    del no_replicas["spec"]["pytorchReplicaSpecs"]
    with pytest.raises(ValueError, match="pytorch_replica_specs"):
        check_pytorchjob(no_replicas, "1.36")


def test_a_neuron_job_uses_the_neuron_scheduler_devices_and_logical_cores(script, wheel) -> None:
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="trn"), _facts("trn1-eks.yaml"), wheel)
    pod = _pod(job)
    assert pod["schedulerName"] == NEURON_SCHEDULER_NAME
    assert pod["containers"][0]["resources"]["limits"] == {NEURON_DEVICE_RESOURCE: "16", EFA_RESOURCE: "8"}
    # trn1: 16 devices of 2 NeuronCores each, one process per core.
    assert job["spec"]["nprocPerNode"] == "32"
    assert "Worker" not in job["spec"]["pytorchReplicaSpecs"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"nodes": 5}, "scales to 4 nodes"),
        ({"group": "p4"}, "allowed: p5"),
        ({"name": "Bad_Name"}, "--name"),
        ({"image": "bad image"}, "--image"),
        ({"env": {"lower": "x"}}, "--env"),
        ({"script": Path("/nonexistent/train.py")}, "no such file"),
    ],
)
def test_bad_requests_are_one_line(script, wheel, change, said) -> None:
    request = JobRequest(**{"script": script, "image": IMAGE, "name": "llm", **change})
    with pytest.raises(JobError, match=said) as caught:
        job_manifests(request, _facts("p5-eks.yaml"), wheel)
    assert "\n" not in str(caught.value)


def test_only_eks_clusters_with_lustre_take_jobs(script, wheel) -> None:
    facts = _facts("p5-eks.yaml")
    request = JobRequest(script=script, image=IMAGE, name="llm")
    with pytest.raises(JobError, match="eks backend"):
        job_manifests(request, ClusterFacts(**{**facts.__dict__, "backend": "pcs"}), wheel)
    with pytest.raises(JobError, match="storage.lustre"):
        job_manifests(request, ClusterFacts(**{**facts.__dict__, "lustre": False}), wheel)


def test_a_script_too_large_for_a_config_map_is_refused(tmp_path, wheel) -> None:
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * 1_100_000)
    with pytest.raises(JobError, match="too large"):
        job_manifests(JobRequest(script=big, image=IMAGE, name="big"), _facts("p5-eks.yaml"), wheel)


def test_the_entry_point_unpacks_the_launcher_and_runs_kiln_launch(tmp_path, script, wheel) -> None:
    """The container's command, run by sh with the operator's variables: kiln-launch plans a 2-node job."""
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=2), _facts("p5-eks.yaml"), wheel)
    done = run_container_plan(tmp_path, job, wheel, script, node_rank=1, env={"HOSTNAME": "llm-worker-0"})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    environment = plan["environment"]
    assert (environment["nnodes"], environment["node_rank"], environment["job_id"]) == ("2", 1, "llm")
    assert plan["instance_type"]["name"] == "p5.48xlarge"
    # The job carries the preset itself; the launcher keeps what the environment sets.
    assert set(preset_environment("p5.48xlarge")) <= set(plan["nccl_env"]["kept_from_environment"])
    assert plan["job_dir"] == str(tmp_path / "checkpoints" / "llm")


def _fake_kubectl(tmp_path: Path) -> Path:
    """A kubectl that records each call's stdin and answers as an API server would: the object with a uid."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "obj = json.load(sys.stdin)\n"
        "log = os.environ['FAKE_KUBECTL_LOG']\n"
        "with open(log, 'a') as f: f.write(json.dumps({'argv': sys.argv[1:], 'kubeconfig': os.environ['KUBECONFIG'],"
        " 'object': obj}) + '\\n')\n"
        "obj['metadata']['uid'] = 'uid-' + obj['kind']\n"
        "print(json.dumps(obj))\n"
    )
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_submit_writes_the_manifests_and_applies_the_job_then_its_files_owned_by_it(
    tmp_path, script, monkeypatch, capsys
) -> None:
    bin_dir = _fake_kubectl(tmp_path)
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(log))
    out = tmp_path / "job.yaml"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    argv = ["job", "submit", "--spec", str(EXAMPLES / "p5-eks.yaml"), "--image", IMAGE, "-j", "2x4"]
    code = main([*argv, "--out", str(out), "--kubeconfig", str(kubeconfig), "--", str(script), "--epochs", "3"])
    assert code == 0, capsys.readouterr().err
    files, job = yaml.safe_load_all(out.read_text())
    assert job["spec"]["nprocPerNode"] == "4"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert _pod(job)["containers"][0]["command"][-2:] == ["--epochs", "3"]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["object"]["kind"] for c in calls] == ["PyTorchJob", "ConfigMap"]
    assert all(c["kubeconfig"] == str(kubeconfig) and c["argv"][:2] == ["apply", "--server-side"] for c in calls)
    [owner] = calls[1]["object"]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PyTorchJob", "train", "uid-PyTorchJob")
    assert "applied PyTorchJob train" in capsys.readouterr().out


def test_submit_without_a_script_or_kubectl_says_so_in_one_line(tmp_path, script, monkeypatch, capsys) -> None:
    base = ["job", "submit", "--spec", str(EXAMPLES / "p5-eks.yaml"), "--image", IMAGE]
    assert main(base) == 2
    assert "no training script" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main([*base, "--kubeconfig", str(tmp_path / "k"), "--", str(script)]) == 2
    err = capsys.readouterr().err
    assert "kubectl is not on PATH" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("example", ["p5-eks.yaml", "trn1-eks.yaml"])
def test_a_job_of_the_groups_largest_size_is_admissible_by_the_clusters_queue(script, wheel, example) -> None:
    """What `kiln job submit` asks for, Kueue's queue (as the cluster installs it) covers and can hold at once."""
    from kiln.constructs.eks_scheduling import QueuedGroup, queue_manifests

    spec = load_spec(EXAMPLES / example)
    [group] = spec.compute.groups
    queued = [QueuedGroup(name=group.name, instance_type=group.instance_type, max_count=group.max_count)]
    [queue] = [o for o in queue_manifests(queued) if o["kind"] == "ClusterQueue"]
    [resource_group] = queue["spec"]["resourceGroups"]
    [flavor] = resource_group["flavors"]
    quota = {r["name"]: int(r["nominalQuota"].removesuffix("Mi")) for r in flavor["resources"]}
    request = JobRequest(script=script, image=IMAGE, name="big", nodes=group.max_count)
    _, job = job_manifests(request, _facts(example), wheel)
    asked: dict[str, int] = {}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for name, value in replica["template"]["spec"]["containers"][0]["resources"]["requests"].items():
            asked[name] = asked.get(name, 0) + int(value) * replica["replicas"]
    assert set(asked) <= set(resource_group["coveredResources"])
    assert all(asked[name] <= quota[name] for name in asked), (asked, quota)
    # One node more than the group has would never be admitted: kiln job submit refuses it before.
    with pytest.raises(JobError, match="never be admitted"):
        job_manifests(
            JobRequest(script=script, image=IMAGE, name="big", nodes=group.max_count + 1), _facts(example), wheel
        )
