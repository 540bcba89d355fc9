"""The exporter steps: what a bundle tells them, what they install and which units they start on which node."""

from __future__ import annotations

import dataclasses

import pytest

from kiln.bootstrap.artifacts import python_package, resolve_artifact
from kiln.bootstrap.config import BootstrapConfig
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.exporters import EXPORTERS
from tests.bootstrap.conftest import CLUSTER_ENV, make_node, pcs_config


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
    from tests.conftest import ROOT

    assert f'"prometheus-client=={package.version}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize(
    ("architecture", "instance", "digest"),
    [
        ("x86_64", "p5.48xlarge", "becb950ee80daa8ae7331d77966d94a611af79ad0d3307380907e0ec08f5b4e8"),
        ("arm64", "m7g.16xlarge", "848f139986f63232ced83babe3cad1679efdbb26c694737edc1f4fbd27b96203"),
    ],
)
def test_the_node_exporter_release_has_its_published_digest_per_architecture(architecture, instance, digest):
    pins = dataclasses.replace(pcs_config().software, node_exporter="1.9.1")
    config = pcs_config(
        architecture=architecture,
        groups=(dataclasses.replace(pcs_config().groups[0], instance_type=instance),),
        service_instance_types=(),
        software=pins,
        locked={},
    )
    artifact = resolve_artifact(config, "node-exporter")
    deb_arch = {"x86_64": "amd64", "arm64": "arm64"}[architecture]
    assert artifact.url == (
        f"https://github.com/prometheus/node_exporter/releases/download/v1.9.1/node_exporter-1.9.1.linux-{deb_arch}.tar.gz"
    )
    assert artifact.published and artifact.sha256 == digest


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"target": "eks", "service_instance_types": (), "exporters": ("node",)}, "runs it as a Helm chart"),
        ({"exporters": ("node", "node")}, "each exporter once"),
        ({"exporters": ("prom",)}, "exporters: got 'prom'"),
        ({"target": "eks", "service_instance_types": (), "exporters": ("slurm",)}, "runs no Slurm"),
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
        ("login", "m5.8xlarge", ["kiln-node-exporter.service", "kiln-slurm-exporter.service"]),
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
        assert "Environment=PATH=/opt/aws/pcs/scheduler/slurm-24.11/bin:" in slurm
    else:
        efa = (node.root / "etc/systemd/system/kiln-efa-exporter.service").read_text()
        assert "ExecStart=/opt/kiln/venv/bin/kiln-metrics efa --listen :9342" in efa
