"""The exporter steps: what a bundle tells them, what they install and which units they start on which node."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from kiln.bootstrap.artifacts import python_package, resolve_artifact
from kiln.bootstrap.cluster_env import cluster_env_text
from kiln.bootstrap.config import BootstrapConfig
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.exporters import EXPORTERS, PROMETHEUS_PORT
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, make_node
from tests.support.paths import ROOT

WORKSPACE = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123/"


def _bundle_env(config: BootstrapConfig, tmp_path) -> dict[str, str]:
    bundle = render_bundle(config, tmp_path / "bundle").directory
    return parse_env_file((bundle / "bundle.env").read_text())


def test_the_bundle_names_the_exporters_their_pins_and_ports(tmp_path):
    env = _bundle_env(pcs_config(exporters=("node", "slurm", "dcgm", "efa")), tmp_path)
    assert env["KILN_EXPORTERS"] == "node slurm dcgm efa"
    assert (env["KILN_NODE_EXPORTER_VERSION"], env["KILN_DCGM_VERSION"], env["KILN_DCGM_EXPORTER_VERSION"]) == (
        "1.9.0",
        "4.6.0",
        "4.8.3",
    )
    assert env["KILN_PROMETHEUS_CLIENT_REQUIREMENT"] == python_package("prometheus-client").requirement
    assert env["KILN_SLURM_EXPORTER_ROLE"] == "login" and env["KILN_EXPORTER_DAEMONS"] == "systemd"
    for exporter in EXPORTERS.values():
        assert env[f"KILN_{exporter.name.upper()}_EXPORTER_PORT"] == str(exporter.port)


def test_without_exporters_the_bundle_pins_none(tmp_path):
    env = _bundle_env(pcs_config(exporters=()), tmp_path)
    assert env["KILN_EXPORTERS"] == "" and env["KILN_NODE_EXPORTER_VERSION"] == ""
    assert env["KILN_PROMETHEUS_CLIENT_REQUIREMENT"] == "" and "KILN_ARTIFACT_NODE_EXPORTER_URL" not in env


def test_prometheus_client_is_the_version_pyproject_pins_and_a_full_digest():
    package = python_package("prometheus-client")
    assert package.requirement == f"prometheus-client=={package.version} --hash=sha256:{package.sha256}"
    assert len(package.sha256) == 64
    assert f'"prometheus-client=={package.version}"' in (ROOT / "pyproject.toml").read_text()


# Prometheus's releases with the digests of their sha256sums.txt, per architecture.
RELEASES = {
    ("node-exporter", "x86_64"): "becb950ee80daa8ae7331d77966d94a611af79ad0d3307380907e0ec08f5b4e8",
    ("node-exporter", "arm64"): "848f139986f63232ced83babe3cad1679efdbb26c694737edc1f4fbd27b96203",
    ("prometheus", "x86_64"): "e811827af26d822afb09a4f28314f61b618b12cff5369835a67f674d8b46f39a",
    ("prometheus", "arm64"): "173389cc42bf09c4e6e54cb53fa07a5a835d7c261e14775d2183181d6e385d1c",
}
RELEASE_URLS = {
    "node-exporter": "https://github.com/prometheus/node_exporter/releases/download/v1.9.1/node_exporter-1.9.1.linux-{}.tar.gz",
    "prometheus": "https://github.com/prometheus/prometheus/releases/download/v3.5.0/prometheus-3.5.0.linux-{}.tar.gz",
}


@pytest.mark.parametrize(("name", "architecture"), sorted(RELEASES))
def test_prometheus_releases_have_their_published_digest_per_architecture(name, architecture):
    pins = dataclasses.replace(pcs_config().software, node_exporter="1.9.1", prometheus="3.5.0")
    instance = {"x86_64": "p5.48xlarge", "arm64": "m7g.16xlarge"}[architecture]
    config = pcs_config(
        architecture=architecture,
        groups=(dataclasses.replace(pcs_config().groups[0], instance_type=instance),),
        service_instance_types=(),
        software=pins,
        exporters=("node", "slurm"),
        prometheus_agent=True,
        locked={},
    )
    artifact = resolve_artifact(config, name)
    assert artifact.url == RELEASE_URLS[name].format({"x86_64": "amd64", "arm64": "arm64"}[architecture])
    assert artifact.published and artifact.sha256 == RELEASES[(name, architecture)]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"target": "eks", "service_instance_types": (), "exporters": ("node",)}, "runs it as a Helm chart"),
        ({"exporters": ("node", "node")}, "each exporter once"),
        ({"exporters": ("prom",)}, "exporters: got 'prom'"),
        ({"target": "eks", "service_instance_types": (), "exporters": ("slurm",)}, "runs no Slurm"),
        ({"target": "eks", "service_instance_types": (), "exporters": (), "prometheus_agent": True}, "runs no Slurm"),
        ({"exporters": (), "prometheus_agent": True}, "without exporters to scrape"),
    ],
)
def test_exporters_a_target_cannot_run_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        pcs_config(**changes)


def test_a_gpu_worker_gets_the_node_exporter_and_the_pinned_dcgm_exporter(node):
    result = node.run("install_exporters", "configure_exporters")
    assert result.returncode == 0, result.stderr
    binary = node.root / "opt/kiln/node-exporter/node_exporter"
    assert binary.is_file() and (node.root / "opt/kiln/node-exporter").resolve().name == "node-exporter-1.9.0"
    preferences = node.root / "etc/apt/preferences.d"
    assert (preferences / "kiln-dcgm").read_text() == (
        "Package: datacenter-gpu-manager-4-*\nPin: version /^([0-9]+:)?4\\.6\\.0-/\nPin-Priority: 1001\n"
    )
    assert "Pin: version /^([0-9]+:)?4\\.8\\.3-/" in (preferences / "kiln-dcgm-exporter").read_text()
    installs = [c for c in node.calls() if c.startswith("apt-get") and " install " in c]
    assert installs[-1].endswith(
        "datacenter-gpu-manager-4-core datacenter-gpu-manager-4-proprietary datacenter-gpu-manager-exporter"
    )
    units = sorted(p.name for p in (node.root / "etc/systemd/system").glob("kiln-*-exporter.service"))
    assert units == ["kiln-dcgm-exporter.service", "kiln-node-exporter.service"]
    unit = (node.root / "etc/systemd/system/kiln-node-exporter.service").read_text()
    assert "ExecStart=/opt/kiln/node-exporter/node_exporter --web.listen-address=:9100" in unit
    assert "DynamicUser=yes" in unit and "ProtectSystem=strict" in unit
    assert "--address :9400" in (node.root / "etc/systemd/system/kiln-dcgm-exporter.service").read_text()
    assert "systemctl restart kiln-node-exporter.service" in node.calls()


def test_al2023_installs_the_dcgm_pair_by_name_and_version(tmp_path):
    config = pcs_config(os="al2023", lustre=False)
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path, bundle, os_release='ID="amzn"\nVERSION_ID="2023"\n')
    result = node.run("install_exporters")
    assert result.returncode == 0, result.stderr
    installs = [c for c in node.calls() if c.startswith("dnf") and " install " in c]
    assert installs[-1].endswith(
        "datacenter-gpu-manager-4-core-4.6.0 datacenter-gpu-manager-4-proprietary-4.6.0 "
        "datacenter-gpu-manager-exporter-4.8.3"
    )


@pytest.fixture(scope="module")
def slurm_bundle(tmp_path_factory):
    config = pcs_config(exporters=("node", "slurm", "dcgm", "efa"))
    return render_bundle(config, tmp_path_factory.mktemp("exporters") / "bundle").directory


def _with_kiln_metrics(node) -> None:
    # kiln-metrics as install_exporters leaves it (its pip install is proven by the local cluster's end-to-end test).
    venv_bin = node.root / "opt/kiln/venv/bin"
    venv_bin.mkdir(parents=True)
    for name in ("python", "kiln-metrics"):
        (venv_bin / name).write_text("#!/bin/sh\nexit 0\n")
        (venv_bin / name).chmod(0o755)


@pytest.mark.parametrize(
    ("role", "instance", "units"),
    [
        (
            "worker",
            "p5.48xlarge",
            ["kiln-dcgm-exporter.service", "kiln-efa-exporter.service", "kiln-node-exporter.service"],
        ),
        # kiln's EFA exporter runs on every node of a cluster with EFA nodes (0 devices here).
        (
            "login",
            "m5.8xlarge",
            ["kiln-efa-exporter.service", "kiln-node-exporter.service", "kiln-slurm-exporter.service"],
        ),
    ],
)
def test_each_node_starts_the_exporters_of_its_role_and_hardware(tmp_path, slurm_bundle, role, instance, units):
    node = make_node(tmp_path, slurm_bundle, cluster_env={**CLUSTER_ENV, "KILN_INSTANCE_TYPE": instance})
    _with_kiln_metrics(node)
    result = node.run("configure_exporters", KILN_NODE_ROLE=role)
    assert result.returncode == 0, result.stderr
    found = sorted(p.name for p in (node.root / "etc/systemd/system").glob("kiln-*-exporter.service"))
    assert found == units
    if role == "login":
        slurm = (node.root / "etc/systemd/system/kiln-slurm-exporter.service").read_text()
        assert "ExecStart=/opt/kiln/venv/bin/kiln-metrics slurm --listen :9341" in slurm
        assert "Environment=PATH=/opt/aws/pcs/scheduler/slurm-25.11/bin:" in slurm
    else:
        efa = (node.root / "etc/systemd/system/kiln-efa-exporter.service").read_text()
        assert "ExecStart=/opt/kiln/venv/bin/kiln-metrics efa --listen :9342" in efa


@pytest.fixture(scope="module")
def agent_bundle(tmp_path_factory):
    config = pcs_config(exporters=("node", "slurm", "dcgm", "efa"), prometheus_agent=True)
    return render_bundle(config, tmp_path_factory.mktemp("agent") / "bundle").directory


AGENT_ENV = {**CLUSTER_ENV, "KILN_PROMETHEUS_REMOTE_WRITE_URL": f"{WORKSPACE}api/v1/remote_write"}


def test_the_agent_bundle_pins_prometheus_and_needs_the_remote_write_url(agent_bundle):
    env = parse_env_file((agent_bundle / "bundle.env").read_text())
    assert (env["KILN_PROMETHEUS_AGENT"], env["KILN_PROMETHEUS_VERSION"], env["KILN_PROMETHEUS_PORT"]) == (
        "1",
        "3.4.0",
        str(PROMETHEUS_PORT),
    )
    assert env["KILN_ARTIFACT_PROMETHEUS_URL"].endswith("/v3.4.0/prometheus-3.4.0.linux-amd64.tar.gz")
    assert "KILN_PROMETHEUS_REMOTE_WRITE_URL" in env["KILN_REQUIRED_CLUSTER_ENV"].split()
    assert "KILN_PROMETHEUS_AGENT" in env["KILN_PINS_INSTALL_EXPORTERS"].split()


def test_a_node_without_the_remote_write_url_stops_before_any_step(tmp_path, agent_bundle):
    node = make_node(tmp_path, agent_bundle)
    result = node.run("configure_exporters", KILN_NODE_ROLE="login")
    assert result.returncode != 0
    assert "lacks KILN_PROMETHEUS_REMOTE_WRITE_URL" in result.stderr


@pytest.mark.parametrize(("role", "installed"), [("login", True), ("worker", False)])
def test_prometheus_is_fetched_only_where_the_agent_runs(tmp_path, agent_bundle, role, installed):
    node = make_node(tmp_path, agent_bundle, cluster_env={**AGENT_ENV, "KILN_INSTANCE_TYPE": "m5.8xlarge"})
    _with_kiln_metrics(node)
    result = node.run("install_exporters", KILN_NODE_ROLE=role)
    assert result.returncode == 0, result.stderr
    binary = node.root / "opt/kiln/prometheus/prometheus"
    assert binary.is_file() is installed
    if installed:
        assert (node.root / "opt/kiln/prometheus").resolve().name == "prometheus-3.4.0"
    else:
        assert "Prometheus agent: it runs on the login node, this is a worker" in result.stdout + result.stderr


def _with_real_kiln_metrics(node) -> None:
    # kiln-metrics itself, from this checkout, where the venv's entry point would be.
    venv_bin = node.root / "opt/kiln/venv/bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "kiln-metrics"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m kiln.metrics "$@"\n')
    script.chmod(0o755)


def test_the_agent_node_writes_the_agent_config_and_starts_the_agent_and_its_node_list(tmp_path, agent_bundle):
    node = make_node(tmp_path, agent_bundle, cluster_env={**AGENT_ENV, "KILN_INSTANCE_TYPE": "m5.8xlarge"})
    _with_real_kiln_metrics(node)
    result = node.run("configure_exporters", KILN_NODE_ROLE="login")
    assert result.returncode == 0, result.stderr
    config = json.loads((node.root / "etc/kiln/prometheus/agent.yml").read_text())
    assert config["global"]["external_labels"] == {
        "cluster": "llm",
        "__replica__": config["scrape_configs"][0]["static_configs"][0]["labels"]["instance"],
    }
    assert config["remote_write"] == [{"url": f"{WORKSPACE}api/v1/remote_write", "sigv4": {"region": "us-east-1"}}]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"node", "slurm", "dcgm", "efa"}
    assert jobs["dcgm"]["file_sd_configs"][0]["files"] == ["/var/lib/kiln-prometheus/targets/dcgm.json"]
    units = node.root / "etc/systemd/system"
    targets = (units / "kiln-metrics-targets.service").read_text()
    assert "kiln-metrics targets --dir /var/lib/kiln-prometheus/targets --exporters node,dcgm,efa --self " in targets
    assert "Environment=PATH=/opt/aws/pcs/scheduler/slurm-25.11/bin:" in targets
    agent = (units / "kiln-prometheus-agent.service").read_text()
    assert "ExecStart=/opt/kiln/prometheus/prometheus --agent --config.file=/etc/kiln/prometheus/agent.yml " in agent
    assert f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}" in agent
    assert "ExecReload=/bin/kill -HUP $MAINPID" in agent
    for unit in (targets, agent):
        assert "User=kiln-prometheus" in unit and "StateDirectory=kiln-prometheus" in unit
        assert "DynamicUser=yes" in unit
    calls = node.calls()
    assert "systemctl restart kiln-prometheus-agent.service" in calls
    assert "systemctl restart kiln-metrics-targets.service" in calls

    # Booted again with the same values: nothing restarts. With another workspace URL: the agent rereads its config.
    since = len(node.calls())
    again = node.run("configure_exporters", KILN_NODE_ROLE="login")
    assert again.returncode == 0, again.stderr
    assert [c for c in node.calls()[since:] if "restart" in c] == []
    moved = {**AGENT_ENV, "KILN_INSTANCE_TYPE": "m5.8xlarge", "KILN_PROMETHEUS_REMOTE_WRITE_URL": "https://x/"}
    (node.root / "etc/kiln/cluster.env").write_text(cluster_env_text(moved))
    since = len(node.calls())
    reloaded = node.run("configure_exporters", KILN_NODE_ROLE="login")
    assert reloaded.returncode == 0, reloaded.stderr
    assert [c for c in node.calls()[since:] if "restart" in c] == [
        "systemctl reload-or-restart kiln-prometheus-agent.service"
    ]


def test_workers_run_no_agent(tmp_path, agent_bundle):
    node = make_node(tmp_path, agent_bundle, cluster_env=AGENT_ENV)
    _with_kiln_metrics(node)
    result = node.run("configure_exporters", KILN_NODE_ROLE="worker")
    assert result.returncode == 0, result.stderr
    units = node.root / "etc/systemd/system"
    assert not (units / "kiln-prometheus-agent.service").exists()
    assert not (units / "kiln-metrics-targets.service").exists()
