"""`kiln job submit` and the spec's resilience: the operator's restart policy follows auto_resume, and the hang bounds
and the TCP opt-out reach kiln-launch in the pod (kubernetes.json, pytorchjob_restart)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kiln.catalog.kubernetes import kubernetes_fact
from kiln.cli.main import main
from kiln.jobs.pytorchjob import (
    ALLOW_TCP_VARIABLE,
    HANG_FACTOR_VARIABLE,
    HANG_MIN_VARIABLE,
    ClusterFacts,
    JobRequest,
    cluster_facts,
    job_manifests,
)
from kiln.launcher import launch, watchdog
from kiln.spec import parse_spec
from tests.support.efa_node import simulate_efa_node
from tests.support.jobs import EXAMPLES, IMAGE, run_container_plan
from tests.support.pytorchjob_schema import check_pytorchjob


def _spec(**resilience: Any):
    data = yaml.safe_load((EXAMPLES / "p5-eks.yaml").read_text())
    if resilience:
        data["resilience"] = resilience
    return parse_spec(data)


def _job(script: Path, wheel: bytes, facts: ClusterFacts, **request: Any) -> tuple[dict, dict]:
    files, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=3, **request), facts, wheel)
    return files, job


def _policies(job: dict) -> dict[str, str]:
    return {name: replica["restartPolicy"] for name, replica in job["spec"]["pytorchReplicaSpecs"].items()}


def _env(job: dict) -> dict[str, str]:
    [container] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_with_auto_resume_failed_pods_restart_up_to_max_restarts(script, wheel) -> None:
    facts = cluster_facts(_spec())
    assert facts.resilience.auto_resume
    _, job = _job(script, wheel, facts, max_restarts=5)
    resume = kubernetes_fact("pytorchjob_restart").value["resume"]
    assert _policies(job) == {"Master": resume["restart_policy"], "Worker": "OnFailure"}
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5


def test_without_auto_resume_the_first_failure_ends_the_job(script, wheel) -> None:
    spec = _spec(auto_resume=False)
    files, job = _job(script, wheel, cluster_facts(spec), max_restarts=5)
    assert _policies(job) == {"Master": "Never", "Worker": "Never"}
    assert job["spec"]["runPolicy"]["backoffLimit"] == 0
    # The operator's types and Kubernetes's schema take it as they take the default.
    check_pytorchjob(job, spec.kubernetes_version)
    kubernetes_validate.validate(files, spec.kubernetes_version, strict=True)


def test_the_hang_bounds_and_tcp_opt_out_are_the_pods_variables(script, wheel) -> None:
    default = _env(_job(script, wheel, cluster_facts(_spec()))[1])
    assert (default[HANG_FACTOR_VARIABLE], default[HANG_MIN_VARIABLE]) == ("10", "300")
    assert ALLOW_TCP_VARIABLE not in default
    spec = _spec(hang_factor=20, hang_min_s=900, allow_tcp=True)
    _, job = _job(script, wheel, cluster_facts(spec))
    env = _env(job)
    assert (env[HANG_FACTOR_VARIABLE], env[HANG_MIN_VARIABLE], env[ALLOW_TCP_VARIABLE]) == ("20", "900", "1")
    check_pytorchjob(job, spec.kubernetes_version)
    # --env still has the last word.
    _, job = _job(script, wheel, cluster_facts(spec), env={HANG_FACTOR_VARIABLE: "50"})
    assert _env(job)[HANG_FACTOR_VARIABLE] == "50"


def test_the_variables_are_the_ones_kiln_launch_reads() -> None:
    assert (HANG_FACTOR_VARIABLE, HANG_MIN_VARIABLE) == (watchdog.FACTOR_VARIABLE, watchdog.MIN_VARIABLE)
    assert ALLOW_TCP_VARIABLE == launch.ALLOW_TCP_VARIABLE


def test_kiln_launch_in_the_pod_runs_with_the_specs_bounds_and_allows_tcp(tmp_path, script, wheel) -> None:
    """The job's container command, run as the pod would on a node with EFA and an image without aws-ofi-nccl."""
    facts = cluster_facts(_spec(hang_factor=20, hang_min_s=900, allow_tcp=True))
    _, job = _job(script, wheel, facts)
    done = run_container_plan(tmp_path, job, wheel, script, env={"KILN_ROOT": str(simulate_efa_node(tmp_path / "n"))})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["hang_watchdog"]["factor"], plan["hang_watchdog"]["min_s"]) == (20, 900)
    assert plan["efa"]["status"] == "tcp_allowed"


@pytest.mark.parametrize(
    ("resilience", "said"),
    [
        ({}, "kiln job submit: resilience.auto_resume: a pod whose node is lost is made again"),
        ({"auto_resume": False}, "kiln job submit: resilience.auto_resume false: the job's first failed pod ends it"),
    ],
)
def test_submit_says_what_a_failure_does(tmp_path, script, capsys, resilience, said) -> None:
    data = yaml.safe_load((EXAMPLES / "p5-eks.yaml").read_text())
    data["resilience"] = resilience
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    out = tmp_path / "job.yaml"
    code = main(["job", "submit", "--spec", str(spec_file), "--image", IMAGE, "--out", str(out), "--", str(script)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert said in printed.out
