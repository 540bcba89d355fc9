"""Recovery proven by breaking the real local cluster: a 3-node smoke job, one node broken mid-run each time.

Each drill (kiln.local.drill) injects a real fault into node2 (kiln.local.faults), then the cluster must notice it,
take node2 out of service, requeue the job, replace node2 and resume the job from its newest complete checkpoint,
losing at most one checkpoint interval of steps. benchmarks/resilience.py reports the same figures.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from kiln.local import replacer
from kiln.local.state import load
from tests.support.local import Settings, kiln_local, unique_settings
from tests.support.specs import MINIMAL_SPEC

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("kiln-local")]

CHECKPOINT_EVERY = 20
HANG_MIN_S = 10
HEALTH_INTERVAL_S = 60
DRILL_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def cluster(e2e_ready, searchable_dir) -> Settings:
    settings = unique_settings(searchable_dir)
    spec = settings.prefix.parent / f"{settings.tag}-spec.json"
    resilience = {"hang_min_s": HANG_MIN_S, "health_check_interval_s": HEALTH_INTERVAL_S}
    spec.write_text(json.dumps({**MINIMAL_SPEC, "name": "drill", "resilience": resilience}))
    result = kiln_local(*settings.up_args(nodes=3), "--spec", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    yield settings
    if (settings.prefix / "state.json").exists():
        kiln_local("down", "--prefix", str(settings.prefix))


def _drill(settings: Settings, fault: str) -> dict:
    result = kiln_local(
        "drill",
        "--prefix",
        str(settings.prefix),
        "--fault",
        fault,
        "--node",
        "node2",
        "--checkpoint-every",
        str(CHECKPOINT_EVERY),
        "--fault-at-step",
        str(2 * CHECKPOINT_EVERY + 5),
        "--timeout",
        str(DRILL_TIMEOUT_S),
        "--json",
        timeout=DRILL_TIMEOUT_S + 60,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return json.loads(result.stdout)


def _slurm(settings: Settings, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(settings.prefix / "etc/slurm/slurm.conf")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30).stdout


def _recovered(report: dict, settings: Settings) -> None:
    """The job resumed from a checkpoint no older than one interval, and node2 is back in service."""
    assert report["requeued_s"] is not None and report["replaced_s"] is not None, report
    assert report["resumed_from"] is not None and report["resumed_from"] % CHECKPOINT_EVERY == 0, report
    assert 0 <= report["steps_lost"] <= CHECKPOINT_EVERY, report
    assert report["noticed_s"] <= report["first_step_after_resume_s"], report
    states = dict(line.split() for line in _slurm(settings, "sinfo", "-h", "-N", "-o", "%N %T").splitlines())
    assert set(states.values()) <= {"idle", "completing", "mixed", "allocated"}, states
    events = [e for e in replacer.read_events(load(settings.prefix).layout) if e["node"] == "node2"]
    assert events and events[-1]["outcome"] == "replaced", events


def test_a_killed_slurmd_takes_its_node_down_and_the_job_resumes_on_the_replacement(cluster):
    report = _drill(cluster, "slurmd")
    assert report["noticed_by"].startswith("Slurm:"), report
    # slurmctld marks a silent node after SlurmdTimeout (10 s on the local cluster), give or take its ping interval.
    assert report["noticed_s"] < 40, report
    _recovered(report, cluster)


def test_a_stopped_rank_is_named_by_the_watchdog_its_node_drained_and_the_job_resumes(cluster):
    report = _drill(cluster, "hang")
    assert report["noticed_by"] == "kiln-launch: hung", report
    # The watchdog's threshold is hang_min_s here (the smoke's steps are far shorter than a tenth of it).
    assert HANG_MIN_S <= report["noticed_s"] < HANG_MIN_S + 20, report
    assert report["node_reason"].startswith("kiln-") and "node2" in report["node_reason"], report
    _recovered(report, cluster)


def test_a_node_whose_health_check_fails_is_drained_with_the_reason_and_the_job_resumes(cluster):
    report = _drill(cluster, "disk-full")
    assert report["node_reason"].startswith("kiln-health: container-space"), report
    # Slurm runs the check every HealthCheckInterval: the drain comes within one interval.
    assert report["out_of_service_s"] <= HEALTH_INTERVAL_S + 15, report
    _recovered(report, cluster)


NOBODY = 65534
ASK_AS_NOBODY = """
import json, os, sys
from kiln.launcher import drain_request, slurm_node
root, node, job = sys.argv[1:4]
direct = slurm_node.drain(node, "hung: asked directly", os.environ)
handed = drain_request.ask(root, node, job, "rank 0 on " + node + " stopped (hand-off drill)")
print(json.dumps({"direct": direct.ok, "direct_detail": direct.detail, "ok": handed.ok, "detail": handed.detail}))
"""


def _submit(settings: Settings, node: str, uid: int) -> str:
    argv = ["sbatch", "--parsable", f"--uid={uid}", f"--gid={uid}", "-w", node, "-N", "1", "--chdir=/"]
    out = _slurm(settings, *argv, "-o", "/dev/null", "--wrap", "sleep 600").strip()
    assert out.isdigit(), out
    return out


def _running(settings: Settings, job: str) -> None:
    for _ in range(120):
        if _slurm(settings, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
            return
        subprocess.run(["sleep", "0.5"], check=True)
    raise AssertionError(f"job {job} did not start")


def _ask_as_nobody(settings: Settings, node: str, job: str) -> dict:
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(settings.prefix / "etc/slurm/slurm.conf")}
    python = str(settings.prefix / "opt/kiln/venv/bin/python")
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c", ASK_AS_NOBODY]
    done = subprocess.run([*argv, str(settings.prefix), node, job], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_users_job_that_may_not_drain_its_node_hands_the_drain_to_root(cluster):
    """A job of an ordinary user cannot drain its node; its request is taken by root's side (here the node replacer,
    a systemd path unit on AWS), which drains the node for that user's own job and for no one else's."""
    mine = _submit(cluster, "node2", NOBODY)
    roots = _submit(cluster, "node3", 0)
    try:
        _running(cluster, mine)
        _running(cluster, roots)
        asked = _ask_as_nobody(cluster, "node2", mine)
        # Slurm itself refuses the user (scontrol: Invalid user id / Access/permission denied) ...
        assert asked["direct"] is False and "scontrol update failed" in asked["direct_detail"], asked
        # ... and root's side drains for the user's own running job.
        assert asked["ok"] is True, asked
        reason = _slurm(cluster, "sinfo", "-h", "-n", "node2", "-o", "%E").strip()
        assert reason.startswith(f"kiln-hung: job {mine} (uid {NOBODY}): rank 0 on node2 stopped"), reason
        # The same user asking about root's job on node3 gets nothing.
        refused = _ask_as_nobody(cluster, "node3", roots)
        assert refused["ok"] is False, refused
        assert "drain" not in _slurm(cluster, "sinfo", "-h", "-n", "node3", "-o", "%T")
    finally:
        _slurm(cluster, "scancel", mine, roots)
    # Once its job is gone, the node kiln drained is replaced and back in service.
    for _ in range(240):
        if _slurm(cluster, "sinfo", "-h", "-n", "node2", "-o", "%T").strip() == "idle":
            break
        subprocess.run(["sleep", "0.5"], check=True)
    events = [e for e in replacer.read_events(load(cluster.prefix).layout) if e["node"] == "node2"]
    assert events[-1]["outcome"] == "replaced" and events[-1]["reason"].startswith("kiln-hung: job"), events
