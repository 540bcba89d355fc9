"""The spec's resilience on a node: kiln's health check program on the nodes that run slurmd, run by Slurm or by a
systemd timer of kiln's (configure_health), sbatch's default requeue and the launcher's hang bounds
(configure_training_env)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.render import health_check_context, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.contracts.bundle import HEALTH_CHECK_PROGRAM
from tests.support.bootstrap import local_config, pcs_config
from tests.support.node_root import Node, make_node

TIMER = "etc/systemd/system/kiln-health.timer"
SERVICE = "etc/systemd/system/kiln-health.service"
DRAIN_PATH = "etc/systemd/system/kiln-drain-requests.path"
DRAIN_SERVICE = "etc/systemd/system/kiln-drain-requests.service"
DRAIN_PROGRAM = "opt/kiln/bin/kiln-drain-requests"
REQUESTS = "run/kiln/drain-requests"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Bundles of a PCS cluster (timer) with the defaults, another with a 600 s interval, hang bounds and TCP allowed
    and no requeue, one with the check off, and a ParallelCluster one (Slurm runs the check)."""
    configs = {
        "pcs": pcs_config(),
        "pcs-tuned": pcs_config(
            health_check_interval_s=600, hang_factor=20, hang_min_s=900, allow_tcp=True, job_requeue=False
        ),
        "pcs-off": pcs_config(health_checks=False),
        "parallelcluster": pcs_config(target="parallelcluster"),
        "hyperpod": pcs_config(target="hyperpod"),
        "hyperpod-manual": pcs_config(target="hyperpod", node_recovery=False),
    }
    root = tmp_path_factory.mktemp("health")
    return {name: render_bundle(config, root / name).directory for name, config in configs.items()}


def _node(tmp_path: Path, bundle: Path) -> Node:
    node = make_node(tmp_path, bundle)
    # kiln-launch as install_launcher leaves it: here a stand-in that prints how it was called.
    launcher = node.root / "opt/kiln/venv/bin/kiln-launch"
    launcher.parent.mkdir(parents=True)
    launcher.write_text('#!/bin/bash\necho "kiln-launch $* KILN_ROOT=$KILN_ROOT PATH=$PATH"\n')
    launcher.chmod(0o755)
    return node


def _program(node: Node) -> Path:
    return node.root / HEALTH_CHECK_PROGRAM.lstrip("/")


def test_a_pcs_worker_runs_the_check_from_a_timer_at_the_spec_interval(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["pcs"])
    result = node.run("configure_health")
    assert result.returncode == 0, result.stderr
    program = _program(node)
    assert program.stat().st_mode & 0o777 == 0o755
    ran = subprocess.run([str(program)], capture_output=True, text=True, check=True)
    # Slurm's programs get no search path: the node's Slurm (PCS's, under its version) comes first, for scontrol.
    assert ran.stdout.startswith(
        f"kiln-launch health --drain KILN_ROOT={node.root} PATH=/opt/aws/pcs/scheduler/slurm-25.11/bin:/usr/local/bin:"
    )
    timer = (node.root / TIMER).read_text()
    assert "OnActiveSec=300\n" in timer and "OnUnitActiveSec=300\n" in timer
    service = (node.root / SERVICE).read_text()
    assert f"ExecStart={HEALTH_CHECK_PROGRAM}\n" in service and "TimeoutStartSec=120\n" in service
    assert {"systemctl enable kiln-health.timer", "systemctl restart kiln-health.timer"} <= set(node.calls())


def test_the_interval_follows_the_spec(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["pcs-tuned"])
    assert node.run("configure_health").returncode == 0
    assert "OnUnitActiveSec=600\n" in (node.root / TIMER).read_text()


def test_a_parallelcluster_worker_gets_the_program_slurm_runs_and_no_timer(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["parallelcluster"])
    result = node.run("configure_health")
    assert result.returncode == 0, result.stderr
    assert _program(node).is_file()
    assert not (node.root / TIMER).exists()
    assert "Slurm runs /opt/kiln/bin/kiln-health-check as its HealthCheckProgram every 300 s" in node.log.read_text()


def test_a_login_node_runs_no_check(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["pcs"])
    assert node.run("configure_health", KILN_NODE_ROLE="login").returncode == 0
    assert not _program(node).exists() and not (node.root / TIMER).exists()


def test_turning_the_check_off_removes_what_an_earlier_bundle_installed(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["pcs"])
    assert node.run("configure_health").returncode == 0
    off = Node(root=node.root, bundle=bundles["pcs-off"], shim_log=node.shim_log, state=node.state, env=node.env)
    result = off.run("configure_health")
    assert result.returncode == 0, result.stderr
    assert not _program(node).exists()
    assert not (node.root / TIMER).exists() and not (node.root / SERVICE).exists()
    assert "systemctl disable --now kiln-health.timer" in node.calls()


def test_the_launcher_reads_the_hang_bounds_and_the_tcp_opt_out(tmp_path, bundles) -> None:
    default = make_node(tmp_path / "default", bundles["pcs"])
    assert default.run("configure_training_env").returncode == 0
    env = parse_env_file((default.root / "etc/kiln/launcher.env").read_text())
    assert (env["KILN_HANG_FACTOR"], env["KILN_HANG_MIN_S"]) == ("10", "300")
    assert "KILN_ALLOW_TCP" not in env
    assert (default.root / "etc/profile.d/kiln-jobs.sh").read_text() == "export SBATCH_REQUEUE=1\n"
    tuned = make_node(tmp_path / "tuned", bundles["pcs-tuned"])
    assert tuned.run("configure_training_env").returncode == 0
    env = parse_env_file((tuned.root / "etc/kiln/launcher.env").read_text())
    assert (env["KILN_HANG_FACTOR"], env["KILN_HANG_MIN_S"], env["KILN_ALLOW_TCP"]) == ("20", "900", "1")
    assert (tuned.root / "etc/profile.d/kiln-jobs.sh").read_text() == "export SBATCH_NO_REQUEUE=1\n"


def test_the_local_slurm_conf_may_name_the_program_under_the_prefix() -> None:
    assert health_check_context(local_config()) == {"program": f"@KILN_ROOT@{HEALTH_CHECK_PROGRAM}", "interval": 300}
    assert health_check_context(pcs_config()) is None
    assert health_check_context(pcs_config(target="parallelcluster", health_checks=False)) is None


def test_eks_nodes_get_none_of_it(tmp_path) -> None:
    bundle = render_bundle(
        pcs_config(target="eks", exporters=(), service_instance_types=()), tmp_path / "eks"
    ).directory
    env = parse_env_file((bundle / "bundle.env").read_text())
    assert {env[key] for key in ("KILN_HEALTH_CHECK", "KILN_JOB_REQUEUE", "KILN_HANG_FACTOR")} == {""}


def test_the_local_cluster_writes_the_program_its_slurm_conf_names(tmp_path) -> None:
    bundle = render_bundle(local_config(), tmp_path / "local").directory
    node = _node(tmp_path / "node", bundle)
    result = node.run("configure_health")
    assert result.returncode == 0, result.stderr
    text = _program(node).read_text()
    # kiln writes the local cluster's slurm.conf under its prefix: scontrol must read that one.
    assert f"export SLURM_CONF={node.root}/etc/slurm/slurm.conf\n" in text
    assert not (node.root / TIMER).exists()


def test_a_cloud_worker_takes_its_jobs_drain_requests_through_a_path_unit(tmp_path, bundles) -> None:
    node = _node(tmp_path, bundles["pcs"])
    result = node.run("configure_health")
    assert result.returncode == 0, result.stderr
    requests = node.root / REQUESTS
    # Root's, sticky, writable and not listable by others: a user adds a request, never reads or removes another's.
    assert requests.stat().st_mode & 0o7777 == 0o1733
    path_unit = (node.root / DRAIN_PATH).read_text()
    assert "DirectoryNotEmpty=/run/kiln/drain-requests\n" in path_unit and "DirectoryMode=1733\n" in path_unit
    assert "ExecStart=/opt/kiln/bin/kiln-drain-requests\n" in (node.root / DRAIN_SERVICE).read_text()
    ran = subprocess.run([str(node.root / DRAIN_PROGRAM)], capture_output=True, text=True, check=True)
    assert ran.stdout.startswith(
        f"kiln-launch drain-requests KILN_ROOT={node.root} PATH=/opt/aws/pcs/scheduler/slurm-25.11/bin:"
    )
    assert {"systemctl enable kiln-drain-requests.path", "systemctl restart kiln-drain-requests.path"} <= set(
        node.calls()
    )


def test_the_hand_off_stays_with_the_health_check_off_and_on_a_login_node_there_is_none(tmp_path, bundles) -> None:
    off = _node(tmp_path / "off", bundles["pcs-off"])
    assert off.run("configure_health").returncode == 0
    assert (off.root / DRAIN_PATH).is_file() and (off.root / DRAIN_PROGRAM).is_file()
    login = _node(tmp_path / "login", bundles["pcs"])
    assert login.run("configure_health", KILN_NODE_ROLE="login").returncode == 0
    assert not (login.root / DRAIN_PROGRAM).exists() and not (login.root / REQUESTS).exists()


def test_the_local_cluster_gets_the_request_directory_and_no_unit(tmp_path) -> None:
    bundle = render_bundle(local_config(), tmp_path / "local").directory
    node = _node(tmp_path / "node", bundle)
    assert node.run("configure_health").returncode == 0
    assert (node.root / REQUESTS).stat().st_mode & 0o7777 == 0o1733
    assert not (node.root / DRAIN_PATH).exists()
    assert f"export SLURM_CONF={node.root}/etc/slurm/slurm.conf\n" in (node.root / DRAIN_PROGRAM).read_text()


@pytest.mark.parametrize(
    ("bundle", "handover"),
    [("hyperpod", "hyperpod"), ("hyperpod-manual", None), ("pcs", None), ("parallelcluster", None)],
)
def test_only_hyperpod_with_node_recovery_hands_drained_nodes_over(tmp_path, bundles, bundle, handover) -> None:
    node = _node(tmp_path, bundles[bundle])
    if bundle.startswith("hyperpod"):
        # A HyperPod node finds its group in HyperPod's resource config by its address: a worker of group gpu.
        groups = [
            {"Name": name, "Instances": [{"CustomerIpAddress": address}]}
            for name, address in (("controller", "10.1.0.9"), ("gpu", "10.1.0.5"))
        ]
        config = node.root / "opt/ml/config/resource_config.json"
        config.parent.mkdir(parents=True)
        config.write_text(json.dumps({"InstanceGroups": groups}))
        node.env["SHIM_ADDRESSES"] = "10.1.0.5"
    result = node.run("configure_health")
    assert result.returncode == 0, result.stderr
    text = _program(node).read_text()
    expected = f"export KILN_NODE_REPLACEMENT={handover}\n"
    assert (expected in text) if handover else ("KILN_NODE_REPLACEMENT" not in text)
