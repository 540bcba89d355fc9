"""End to end: a real 2-node Slurm cluster from the `local` bootstrap, its jobs, a node failure, and `down`.

The tests share one cluster and run in file order: up, run, smoke, fault injection, down.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kiln.dashboards import dashboard_names, dashboard_queries, load_dashboard, substitute_variables
from kiln.local import procs
from kiln.local.exporters import exporter_processes, scrape
from kiln.local.jobs import parse_step
from kiln.local.slurm import slurmd_timeout_s
from kiln.local.state import load
from tests.support.local import Settings, kiln_local, kiln_local_popen, unique_settings
from tests.support.paths import ROOT
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("kiln-local")]

# The spec's own steps: name -> (phase, roles). Each script records where it ran and as which role, from the node's
# root (the cluster's prefix), where the bootstrap runs it.
USER_STEPS = {
    "tools": ("install", ["compute"]),
    "facts": ("configure", ["compute"]),
    "welcome": ("configure", ["login"]),
}
USER_STEP_SCRIPT = (
    '#!/bin/sh\nset -eu\nmkdir -p var/tmp\necho "$(hostname) ${KILN_ROLE} ${KILN_USER_STEP}" >>var/tmp/user-steps.log\n'
)


@pytest.fixture(scope="module")
def cluster(e2e_ready, searchable_dir) -> tuple[Settings, subprocess.CompletedProcess]:
    """Bring up 2 nodes once for the module; take them down at the end even when a test failed."""
    settings = unique_settings(searchable_dir)
    # A spec asking for Prometheus: the cluster runs it over the exporters, as a Slurm backend's agent would. Its own
    # bootstrap steps (scripts beside it) run where the spec's roles say: compute on each node, login on the host.
    spec = settings.prefix.parent / f"{settings.tag}-spec.json"
    for name in USER_STEPS:
        script = settings.prefix.parent / f"{name}.sh"
        script.write_text(USER_STEP_SCRIPT)
    steps = [
        {"name": name, "path": f"{name}.sh", "phase": phase, "roles": roles}
        for name, (phase, roles) in USER_STEPS.items()
    ]
    spec.write_text(
        json.dumps(
            {**MINIMAL_SPEC, "name": "e2e", "observability": {"prometheus": True}, "bootstrap": {"steps": steps}}
        )
    )
    result = kiln_local(*settings.up_args(nodes=2), "--spec", str(spec))
    yield settings, result
    if (settings.prefix / "state.json").exists():
        kiln_local("down", "--prefix", str(settings.prefix))


def _state(settings: Settings):
    found = load(settings.prefix)
    assert found is not None, f"no state under {settings.prefix}"
    return found


def _slurm(settings: Settings, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(settings.prefix / "etc/slurm/slurm.conf")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30).stdout


def _node_rows(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.splitlines() if re.match(r"^node\d+\s", line)}


def test_up_brings_two_nodes_to_idle_with_progress_and_a_table(cluster):
    settings, result = cluster
    assert result.returncode == 0, result.stdout + result.stderr
    phases = [line for line in result.stdout.splitlines() if re.match(r"^  .+ \.\.\. \d+\.\ds$", line)]
    assert any("bootstrap step install_slurm" in line for line in phases)
    assert any(f"create bridge {settings.tag}-br0" in line for line in phases)
    assert any("wait until the 2 nodes are idle" in line for line in phases)
    rows = _node_rows(result.stdout)
    assert sorted(rows) == ["node1", "node2"]
    for row in rows.values():
        assert row[2] == "idle", row
        assert row[1].startswith(settings.subnet.rsplit(".", 1)[0] + "."), row
    state = _state(settings)
    exporters = {"node-exporter:node1", "node-exporter:node2", "slurm-exporter", "prometheus"}
    daemons = {"munged", "slurmctld", "slurmd:node1", "slurmd:node2", "node-replacer"}
    assert {r.role for r in state.processes} == daemons | exporters
    assert all(procs.is_running(record) for record in state.processes)
    for node in state.layout.nodes:
        assert node.netns_path.exists()


def test_up_runs_the_rendered_local_bootstrap_target(cluster):
    settings, _ = cluster
    bundle = settings.prefix / "bundle"
    assert (bundle / "local-node.sh").is_file()
    assert "KILN_TARGET='local'" in (bundle / "bundle.env").read_text()
    log = (settings.prefix / "var/log/kiln/bootstrap.log").read_text()
    for step in ("install_slurm", "install_munge", "install_launcher", "configure_munge", "configure_slurm"):
        assert f"[{step}] done in" in log
    # The running slurm.conf is the bundle's, with only the bootstrap's placeholders filled in.
    rendered = (bundle / "slurm/slurm.conf").read_text().splitlines()
    running = (settings.prefix / "etc/slurm/slurm.conf").read_text().splitlines()
    assert len(rendered) == len(running)
    for template_line, line in zip(rendered, running, strict=True):
        if "@" not in template_line:
            assert template_line == line
    slurmctld = _state(settings).process("slurmctld")
    assert slurmctld.argv == ("slurmctld", "-D", "-f", str(settings.prefix / "etc/slurm/slurm.conf"))
    # The launcher came from the bundle's wheel into the bootstrap's venv.
    assert (
        settings.prefix / "usr/local/bin/kiln-launch"
    ).resolve() == settings.prefix / "opt/kiln/venv/bin/kiln-launch"


def test_up_runs_the_specs_own_steps_on_the_nodes_their_roles_name(cluster):
    settings, result = cluster
    ran = (settings.prefix / "var/tmp/user-steps.log").read_text().splitlines()
    # login: the controller's host, where jobs are submitted from; compute: each node, in its own namespace. The
    # nodes share the prefix as nodes of one image share its files: the install step ran once, on the first node.
    assert ran == [f"{os.uname().nodename} controller welcome", *USER_STEP_RUNS], ran
    log = (settings.prefix / "var/log/kiln/bootstrap.log").read_text()
    assert "[user_tools] skip: user step tools already ran with this script" in log
    assert "bootstrap step user_facts on node2" in result.stdout


# What the compute nodes' steps record, in the order the nodes start.
USER_STEP_RUNS = ["node1 compute tools", "node1 compute facts", "node2 compute facts"]


def test_kiln_local_holds_no_copy_of_the_slurm_configuration():
    # A copy would hold slurm.conf lines (a key at the start of a line); scontrol's own arguments
    # (`update NodeName=... State=RESUME`, kiln.local.cluster.replace_node) are not configuration.
    sources = "\n".join(path.read_text() for path in (ROOT / "kiln/local").glob("*.py"))
    for key in ("SlurmctldHost", "NodeName=", "PartitionName=", "ProctrackType", "SlurmdSpoolDir", "AuthType"):
        assert not re.search(rf"^\s*{key}", sources, re.MULTILINE), key
    # Nor a configuration file or template of its own: the bootstrap renders slurm.conf.
    assert list((ROOT / "kiln/local").glob("*.conf*")) == []


def test_second_up_reports_the_cluster_and_changes_nothing(cluster):
    settings, _ = cluster
    before = _state(settings)
    again = kiln_local(*settings.up_args(nodes=2))
    assert again.returncode == 0, again.stderr
    assert "already up; nothing changed" in again.stdout
    assert " ... " not in again.stdout
    assert sorted(_node_rows(again.stdout)) == ["node1", "node2"]
    assert _state(settings) == before


def test_up_with_other_settings_is_refused(cluster):
    settings, _ = cluster
    result = kiln_local(*settings.up_args(nodes=3))
    assert result.returncode == 2
    assert result.stderr.startswith("kiln local up: error: a cluster is already up under")
    assert "--nodes 3 (it has 2)" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_prints_each_node_name_once(cluster):
    settings, _ = cluster
    result = kiln_local("run", "--prefix", str(settings.prefix), "--nodes", "2", "--", "printenv", "SLURMD_NODENAME")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["node1", "node2"]


def test_run_returns_the_job_exit_code_and_nodes_resolve_each_other(cluster):
    settings, _ = cluster
    layout = _state(settings).layout
    script = 'echo "$(hostname) $(getent hosts node1 | cut -d" " -f1)"; exit 3'
    result = kiln_local("run", "--prefix", str(settings.prefix), "--", "sh", "-c", script)
    assert result.returncode == 3
    lines = sorted(result.stdout.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["node1", "node2"]
    assert {line.split()[1] for line in lines} == {layout.node("node1").address}


def test_smoke_trains_across_both_nodes_and_its_loss_falls(cluster):
    settings, _ = cluster
    result = kiln_local("smoke", "--prefix", str(settings.prefix), "--steps", "12")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "ddp over 2 rank(s) on cpu" in result.stdout
    # torch finds numpy in the launcher venv: no rank warns at import.
    assert "Failed to initialize NumPy" not in result.stdout + result.stderr
    steps = [step for line in result.stdout.splitlines() if (step := parse_step(line.removeprefix("  | ")))]
    assert [step.step for step in steps] == list(range(1, 13))
    assert steps[-1].loss < steps[0].loss
    job = re.search(r"smoke: job (\d+) COMPLETED \(exit 0\) on node\[1-2\]", result.stdout)
    assert job, result.stdout
    assert re.search(r"smoke: throughput [\d,]+ tokens/s", result.stdout)
    assert re.search(r"smoke: first step \d+\.\d s after submission", result.stdout)
    checkpoints = settings.prefix / "checkpoints" / job.group(1)
    assert f"smoke: checkpoints: {checkpoints} (step-00000010)" in result.stdout
    summary = json.loads((checkpoints / "smoke-summary.json").read_text())
    assert summary["world_size"] == 2


def _samples(url: str) -> dict[str, list]:
    """Scrape URL and return its samples by metric name, parsed by prometheus_client's own parser."""
    text = scrape(url)
    assert text is not None, f"{url} did not answer"
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def _value(samples: dict[str, list], name: str, **labels: str) -> float | None:
    matching = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    return matching[0] if len(matching) == 1 else None


def test_exporters_serve_each_node_and_the_slurm_queue(cluster):
    settings, result = cluster
    layout = _state(settings).layout
    endpoints = {exporter.role: exporter for exporter in exporter_processes(layout)}
    assert sorted(endpoints) == ["node-exporter:node1", "node-exporter:node2", "prometheus", "slurm-exporter"]
    assert "metrics: Prometheus on controller: " in result.stdout
    for exporter in endpoints.values():
        assert f"metrics: {exporter.title} on {exporter.where}: {exporter.url}" in result.stdout

    for node in layout.nodes:
        samples = _samples(endpoints[f"node-exporter:{node.name}"].url)
        assert _value(samples, "node_cpu_seconds_total", cpu="0", mode="idle") > 0
        assert _value(samples, "node_memory_MemTotal_bytes") > 0
        # It runs in the node's namespace: it sees the node's interface, not this machine's bridge and veths.
        devices = {s.labels["device"] for s in samples["node_network_receive_bytes_total"]}
        assert devices and not any(name.startswith(f"{settings.tag}-") for name in devices), devices

    slurm = endpoints["slurm-exporter"].url
    idle = _samples(slurm)
    assert _value(idle, "kiln_slurm_up") == 1
    assert [_value(idle, "kiln_slurm_node_state", node=n, state="idle") for n in ("node1", "node2")] == [1, 1]
    assert _value(idle, "kiln_slurm_node_cpus", node="node1") == layout.node("node1").cpus

    # A running job shows in the queue and on the node it holds.
    job = kiln_local_popen("run", "--prefix", str(settings.prefix), "--nodes", "1", "--", "sleep", "60")
    try:

        def running():
            samples = _samples(slurm)
            jobs = sum(s.value for s in samples.get("kiln_slurm_jobs", []) if s.labels["state"] == "running")
            return samples if jobs >= 1 else None

        busy = _wait_for(running, 30, "the Slurm exporter did not report the running job")
        allocated = [s.labels["node"] for s in busy["kiln_slurm_node_cpus_allocated"] if s.value > 0]
        assert len(allocated) == 1, busy["kiln_slurm_node_cpus_allocated"]
        assert _value(busy, "kiln_slurm_node_state", node=allocated[0], state="allocated") == 1
    finally:
        _slurm(settings, "scancel", "--full", "--name", "kiln-run")
        job.kill()
        job.wait()

    status = kiln_local("status", "--prefix", str(settings.prefix))
    assert status.returncode == 0, status.stdout + status.stderr
    for exporter in endpoints.values():
        assert re.search(
            rf"^{exporter.kind}\s+{exporter.where}\s+{re.escape(exporter.url)}\s+answering$", status.stdout, re.M
        )


def _prometheus_query(layout, query: str) -> list[dict]:
    url = f"http://{layout.controller_address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the local cluster's own Prometheus
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_prometheus_scrapes_every_exporter_and_answers_every_dashboard_query(cluster):
    settings, _ = cluster
    layout = _state(settings).layout

    def all_up():
        found = {(s["metric"]["job"], s["metric"]["instance"]): s for s in _prometheus_query(layout, "up")}
        return found if len(found) == 3 and all(s["value"][1] == "1" for s in found.values()) else None

    # The first scrape comes within one interval (30 s) of Prometheus starting.
    up = _wait_for(all_up, 45, "Prometheus did not scrape the two node exporters and the Slurm exporter")
    assert set(up) == {("node", "node1"), ("node", "node2"), ("slurm", "slurmctld")}
    assert {s["metric"]["cluster"] for s in up.values()} == {"e2e"}

    # Every query of every dashboard is valid PromQL for this Prometheus; those over the node and Slurm exporters
    # find series (the GPU and EFA ones have no exporter to read here). Rates need two scrapes (a minute here), and
    # a panel that filters for failures (`== 0`, `> 0`) is empty while every node and exporter is well, and pending
    # reasons exist only while a job waits.
    answered = {}
    for name in dashboard_names():
        for query in dashboard_queries(load_dashboard(name)):
            filled = substitute_variables(query, {"cluster": "e2e", "instance": ".*", "partition": ".*"})
            answered[(name, query)] = _prometheus_query(layout, filled)
    with_data = {key for key, result in answered.items() if result}
    for name in ("cluster", "slurm"):
        queries = [key for key in answered if key[0] == name]
        expected = [
            key
            for key in queries
            if "rate(" not in key[1] and "pending_reason" not in key[1] and not re.search(r"(==|>)\s*0\s*$", key[1])
        ]
        assert expected and [key[1] for key in expected if key not in with_data] == []
    assert {key[0] for key in answered} == set(dashboard_names())


def test_a_killed_exporter_is_reported_and_up_restarts_it(cluster):
    settings, _ = cluster
    prefix = str(settings.prefix)
    record = _state(settings).process("slurm-exporter")
    os.kill(record.pid, signal.SIGKILL)
    _wait_for(lambda: not procs.is_running(record), 10, "the Slurm exporter did not die")
    status = kiln_local("status", "--prefix", prefix)
    assert status.returncode == 1
    assert "slurm-exporter does not answer" in status.stdout and "NOT RUNNING" in status.stdout
    healed = kiln_local("up", "--prefix", prefix)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "start 1 exporter (slurm)" in healed.stdout and "start slurmd" not in healed.stdout
    assert kiln_local("status", "--prefix", prefix).returncode == 0


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout_s:.0f}s")


def test_killed_slurmd_is_marked_down_and_up_heals_it(cluster):
    settings, _ = cluster
    slurmd_timeout = slurmd_timeout_s(_state(settings).layout)
    assert slurmd_timeout is not None and slurmd_timeout <= 30, (
        f"the local slurm.conf has SlurmdTimeout={slurmd_timeout}: Slurm marks a dead node down only after that, "
        "so the bootstrap's local target must set a short SlurmdTimeout"
    )
    prefix = str(settings.prefix)
    # The node replacer would replace node2 by itself (tests/local/test_resilience_e2e.py): stop it, so `up` heals.
    replacer = _state(settings).process("node-replacer")
    os.kill(replacer.pid, signal.SIGKILL)
    _wait_for(lambda: not procs.is_running(replacer), 10, "the node replacer did not die")
    job = kiln_local_popen("run", "--prefix", prefix, "--", "sleep", "300")
    try:
        _wait_for(lambda: "RUNNING" in _slurm(settings, "squeue", "-h", "-o", "%T"), 30, "the job did not start")
        victim = _state(settings).process("slurmd:node2")
        os.kill(victim.pid, signal.SIGKILL)

        def reported_down():
            status = kiln_local("status", "--prefix", prefix)
            row = _node_rows(status.stdout).get("node2", [])
            return status if len(row) > 2 and row[2].startswith("down") else None

        status = _wait_for(reported_down, 3 * slurmd_timeout + 30, "status did not report node2 down")
        assert status.returncode == 1
        assert "slurmd:node2" in status.stdout and "NOT RUNNING" in status.stdout
        assert "unhealthy:" in status.stdout
        # Slurm fails the job that lost its node; run returns that failure.
        assert job.wait(timeout=60) != 0
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()

    healed = kiln_local("up", "--prefix", prefix)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "healing" in healed.stdout and "start slurmd on node2" in healed.stdout
    assert "start the node replacer" in healed.stdout
    assert "start slurmctld" not in healed.stdout
    assert [row[2] for row in _node_rows(healed.stdout).values()] == ["idle", "idle"]
    assert kiln_local("status", "--prefix", prefix).returncode == 0
    again = kiln_local("run", "--prefix", prefix, "--", "printenv", "SLURMD_NODENAME")
    assert sorted(again.stdout.split()) == ["node1", "node2"]


def _live_processes_mentioning(prefix: Path) -> list[str]:
    """Return live processes whose command line names PREFIX (zombies are dead already)."""
    found = []
    for entry in Path("/proc").iterdir():
        identity = procs.identity(int(entry.name)) if entry.name.isdigit() else None
        if identity is not None and identity.state != "Z" and any(str(prefix) in part for part in identity.argv):
            found.append(f"{entry.name} {' '.join(identity.argv)}")
    return found


def test_down_leaves_nothing_behind(cluster):
    settings, _ = cluster
    state = _state(settings)
    result = kiln_local("down", "--prefix", str(settings.prefix))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nothing left behind" in result.stdout
    assert not settings.prefix.exists()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert settings.tag not in namespaces
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert f"{settings.tag}-" not in links
    assert [record.role for record in state.processes if procs.is_running(record)] == []
    assert _live_processes_mentioning(settings.prefix) == []
    again = kiln_local("status", "--prefix", str(settings.prefix))
    assert again.returncode == 2
    assert "no kiln local cluster is up" in again.stderr
