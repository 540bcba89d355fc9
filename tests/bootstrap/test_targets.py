"""Target-specific runs: the local cluster under its prefix, and HyperPod roles from resource_config.json."""

from __future__ import annotations

import stat

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import local_config, pcs_config
from tests.support.node_root import CLUSTER_ENV, hyperpod_node, make_node


def test_local_configure_writes_a_complete_private_slurm_setup(tmp_path):
    bundle = render_bundle(local_config(nodes=2, prefix="/unused"), tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, cluster_env={}, os_release='ID=debian\nVERSION_ID="12"\n')
    node.env["KILN_OS_RELEASE"] = str(node.root / "etc/os-release")
    (node.root / "etc/kiln/cluster.env").unlink()
    result = node.run("--phase", "configure", entry="local-node.sh")
    assert result.returncode == 0, result.stderr
    conf = (node.root / "etc/slurm/slurm.conf").read_text()
    assert "@KILN_" not in conf
    assert "ClusterName=kiln-local" in conf
    assert "SlurmctldHost=node1(10.77.0.1)" in conf
    assert f"StateSaveLocation={node.root}/var/spool/slurmctld" in conf
    assert f"AuthInfo=socket={node.root}/run/munge/munge.socket.2" in conf
    key = node.root / "etc/munge/munge.key"
    assert key.stat().st_size == 1024 and stat.S_IMODE(key.stat().st_mode) == 0o600
    for directory in ("var/spool/slurmctld", "var/spool/slurmd", "var/log/slurm", "run/slurm", "run/munge"):
        assert (node.root / directory).is_dir(), directory
    assert node.mutating_calls() == [], "the local cluster's configure must start nothing"
    first_key = key.read_bytes()
    again = node.run("--phase", "configure", entry="local-node.sh")
    assert again.returncode == 0
    assert key.read_bytes() == first_key, "a second run must keep the munge key"


def test_local_install_takes_slurm_and_munge_from_debian_packages_only_when_missing(tmp_path):
    bundle = render_bundle(local_config(nodes=1), tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, cluster_env={}, os_release='ID=debian\nVERSION_ID="12"\n')
    (node.root / "etc/kiln/cluster.env").unlink()
    (node.state / "pkgs").mkdir()
    for package in ("slurmctld", "slurmd", "slurm-client"):
        node.set_state(f"pkgs/{package}", "22.05.8-4")
    result = node.run("install_slurm", "install_munge", KILN_OS_RELEASE=str(node.root / "etc/os-release"))
    assert result.returncode == 0, result.stderr
    installs = [c for c in node.calls() if c.startswith("apt-get") and " install " in c]
    assert len(installs) == 1 and installs[0].endswith(" install --no-install-recommends munge")


# What HyperPod's agent writes on the controller (kiln only reads it): it names the controller.
AGENT_SLURM_CONF = "ClusterName=hp\nSlurmctldHost=ip-10-1-0-9(10.1.0.9)\nSlurmctldParameters=enable_configless\n"


@pytest.mark.parametrize("address", ["10.1.0.5", "10.1.0.7"], ids=["worker", "login"])
def test_hyperpod_compute_and_login_nodes_run_slurmd_configless_from_the_controller(tmp_path, address):
    node = hyperpod_node(tmp_path, address)
    result = node.run("configure_slurm")
    assert result.returncode == 0, result.stderr
    unit = (node.root / "etc/systemd/system/slurmd.service.d/kiln.conf").read_text()
    assert "ExecStart=/opt/slurm/sbin/slurmd --systemd --conf-server 10.1.0.9\n" in unit
    assert "systemctl enable --now slurmd" in node.calls()
    # kiln writes no slurm.conf and no munge key: HyperPod keeps both.
    assert not (node.root / "opt/slurm/etc/slurm.conf").exists()
    assert not (node.root / "etc/munge/munge.key").exists()
    assert (
        "include /opt/slurm/etc/plugstack.conf.d/pyxis.conf"
        in (node.root / "opt/slurm/etc/plugstack.conf").read_text().splitlines()
    )


def test_hyperpod_controller_starts_slurmctld_on_the_agents_slurm_conf_and_leaves_it_untouched(tmp_path):
    node = hyperpod_node(tmp_path, "10.1.0.9")
    conf = node.root / "opt/slurm/etc/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(AGENT_SLURM_CONF)
    result = node.run("configure_slurm")
    assert result.returncode == 0, result.stderr
    assert "role controller" in node.log.read_text()
    assert "systemctl enable --now slurmctld" in node.calls()
    assert conf.read_text() == AGENT_SLURM_CONF
    calls = len(node.calls())
    assert node.run("configure_slurm").returncode == 0
    assert node.mutating_calls(since=calls) == [] and conf.read_text() == AGENT_SLURM_CONF


def test_a_hyperpod_controller_without_the_agents_slurm_conf_stops_by_name(tmp_path):
    node = hyperpod_node(tmp_path, "10.1.0.9")
    result = node.run("configure_slurm", KILN_SLURM_CONF_TIMEOUT_SECONDS="0", KILN_LOCK_POLL_SECONDS="0")
    assert result.returncode != 0
    assert "FAILED: step configure_slurm" in result.stderr
    assert "/opt/slurm/etc/slurm.conf does not name the controller 10.1.0.9 after 0s: HyperPod's cluster agent" in (
        node.log.read_text()
    )
    assert not any("slurmctld" in call for call in node.calls())


@pytest.mark.parametrize("role", ["controller", "login", "worker"])
def test_parallelcluster_nodes_take_the_role_their_action_passes(tmp_path, role):
    bundle = render_bundle(pcs_config(target="parallelcluster"), tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle)
    # ParallelCluster's own cfnconfig is no supported interface: kiln reads the role from its arguments only.
    cfnconfig = node.root / "etc/parallelcluster/cfnconfig"
    cfnconfig.parent.mkdir(parents=True)
    cfnconfig.write_text("cfn_region=us-east-1\ncfn_node_type=HeadNode\n")
    result = node.run("--phase", "configure", "--role", role, entry="on-node-configured.sh")
    assert f"role {role}," in node.log.read_text(), result.stderr


def test_explicit_role_must_be_known(tmp_path, pcs_bundle):
    node = make_node(tmp_path, pcs_bundle, cluster_env={**CLUSTER_ENV, "KILN_NODE_ROLE": "boss"})
    result = node.run("configure_training_env")
    assert result.returncode != 0
    assert "KILN_NODE_ROLE: got 'boss', allowed: controller, login, worker" in result.stderr


def test_a_hyperpod_controller_waits_for_its_own_address_not_one_it_prefixes(tmp_path):
    node = hyperpod_node(tmp_path, "10.1.0.9")
    conf = node.root / "opt/slurm/etc/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(AGENT_SLURM_CONF.replace("10.1.0.9", "10.1.0.90"))
    result = node.run("configure_slurm", KILN_SLURM_CONF_TIMEOUT_SECONDS="0", KILN_LOCK_POLL_SECONDS="0")
    assert result.returncode != 0 and "does not name the controller 10.1.0.9 " in node.log.read_text()
