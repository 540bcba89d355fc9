"""configure_imds: only root and kiln's services reach IMDS on multi-user Slurm nodes, in kiln's own chain, with
a shimmed iptables that keeps the filter table as files (tests/bootstrap/shim.sh)."""

from __future__ import annotations

import re

import pytest

from kiln.bootstrap.render import imds_guard_roles, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.platforms import service_fact
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, Node, hyperpod_node, make_node

JUMP = "-d 169.254.169.254/32 -p tcp -m comment --comment kiln-imds-guard -j KILN-IMDS"
ROOT_ONLY = ["-m owner --uid-owner 0 -j RETURN", "-j REJECT"]
UNIT = "etc/systemd/system/kiln-imds-guard.service"
AGENT_ENV = {**CLUSTER_ENV, "KILN_PROMETHEUS_REMOTE_WRITE_URL": "https://aps.example/api/v1/remote_write"}


def rules(node: Node, chain: str) -> list[str] | None:
    """Return CHAIN's rules as the shimmed iptables holds them, or None where the chain does not exist."""
    path = node.state / "iptables" / chain
    return path.read_text().splitlines() if path.exists() else None


def bin_dir(node: Node):
    """Return the directory of NODE's stand-in commands (make_node puts it first in PATH)."""
    return node.root.parent / "bin"


def iptables_calls(node: Node, since: int = 0) -> list[str]:
    return [call for call in node.calls()[since:] if call.startswith("iptables ")]


@pytest.fixture(scope="module")
def parallelcluster_bundle(tmp_path_factory):
    config = pcs_config(target="parallelcluster")
    return render_bundle(config, tmp_path_factory.mktemp("pc") / "bundle").directory


@pytest.fixture(scope="module")
def agent_bundle(tmp_path_factory):
    config = pcs_config(exporters=("node", "slurm"), prometheus_agent=True)
    return render_bundle(config, tmp_path_factory.mktemp("agent") / "bundle").directory


def test_a_pcs_worker_lets_only_root_reach_imds(node):
    result = node.run("configure_imds")
    assert result.returncode == 0, result.stderr
    assert rules(node, "KILN-IMDS") == ROOT_ONLY
    # One jump, first in OUTPUT, for TCP to the IMDS address only.
    assert rules(node, "OUTPUT") == [JUMP]
    assert "iptables -w -N KILN-IMDS" in node.calls()
    assert f"iptables -w -I OUTPUT 1 {JUMP}" in node.calls()
    # No ip6tables: kiln's launch templates leave the IPv6 endpoint off (platforms.json, ec2.imds_firewall).
    assert service_fact("ec2", "imds_firewall").value["address"] == "169.254.169.254"
    assert not any(call.startswith("ip6tables") for call in node.calls())


def test_a_second_run_changes_no_rule(node):
    assert node.run("configure_imds").returncode == 0
    calls = len(node.calls())
    again = node.run("configure_imds")
    assert again.returncode == 0, again.stderr
    assert node.mutating_calls(since=calls) == []
    # Only reads: the chain and the jump are checked, nothing written.
    assert {call.split()[2] for call in iptables_calls(node, calls)} <= {"-S", "-C", "-n"}
    assert rules(node, "KILN-IMDS") == ROOT_ONLY and rules(node, "OUTPUT") == [JUMP]


def test_rules_kiln_did_not_create_are_left_as_they_are(node):
    foreign = [
        "-d 10.0.0.0/8 -j ACCEPT",
        "-p udp --dport 53 -j ACCEPT",
        "-d 169.254.169.254/32 -j PARALLELCLUSTER_IMDS",
    ]
    (node.state / "iptables").mkdir(parents=True)
    (node.state / "iptables" / "OUTPUT").write_text("\n".join(foreign) + "\n")
    (node.state / "iptables" / "PARALLELCLUSTER_IMDS").write_text("-m owner --uid-owner 1000 -j ACCEPT\n")
    assert node.run("configure_imds").returncode == 0
    assert rules(node, "OUTPUT") == [JUMP, *foreign]
    assert rules(node, "PARALLELCLUSTER_IMDS") == ["-m owner --uid-owner 1000 -j ACCEPT"]
    # Every rule kiln added or removed carries its chain or its comment.
    for call in iptables_calls(node):
        words = call.split()
        if words[2] in ("-A", "-I", "-D", "-F", "-N"):
            assert words[3] == "KILN-IMDS" or "kiln-imds-guard" in words, call


def test_a_loosened_chain_and_doubled_or_stale_jumps_are_put_right(node):
    stale = "-d 169.254.169.254/32 -m comment --comment kiln-imds-guard -j KILN-IMDS"
    (node.state / "iptables").mkdir(parents=True)
    (node.state / "iptables" / "OUTPUT").write_text(f"-o lo -j ACCEPT\n{JUMP}\n{stale}\n{JUMP}\n")
    # Someone let everyone through kiln's chain.
    (node.state / "iptables" / "KILN-IMDS").write_text("-j RETURN\n")
    result = node.run("configure_imds")
    assert result.returncode == 0, result.stderr
    assert rules(node, "KILN-IMDS") == ROOT_ONLY
    assert rules(node, "OUTPUT") == [JUMP, "-o lo -j ACCEPT"]


def test_a_refusal_that_is_not_last_is_put_right(node):
    (node.state / "iptables").mkdir(parents=True)
    (node.state / "iptables" / "KILN-IMDS").write_text("-j REJECT\n-m owner --uid-owner 0 -j RETURN\n")
    assert node.run("configure_imds").returncode == 0
    assert rules(node, "KILN-IMDS") == ROOT_ONLY


def test_a_unit_reapplies_the_same_step_at_every_boot(node):
    assert node.run("configure_imds").returncode == 0
    unit = (node.root / UNIT).read_text()
    assert "systemctl enable kiln-imds-guard.service" in node.calls()
    # Before the network and before logins are allowed; the step itself, with this node's role and type.
    assert "DefaultDependencies=no" in unit
    assert re.search(r"^Before=network-pre\.target systemd-user-sessions\.service", unit, re.MULTILINE)
    (command,) = re.findall(r"^ExecStart=(.*)$", unit, re.MULTILINE)
    # The bundle's root-owned copy in kiln's directory, never the place the platform unpacked it (keep_boot_bundle).
    assert command == "/bin/bash /opt/kiln/boot-bundle/kiln-step configure_imds"
    assert (node.root / "opt/kiln/boot-bundle/steps/configure_imds.sh").read_bytes() == (
        node.bundle / "steps/configure_imds.sh"
    ).read_bytes()
    # A reboot: iptables keeps nothing (platforms.json, ec2.imds_firewall), then the unit runs.
    assert service_fact("ec2", "imds_firewall").value["rules_persist_across_reboot"] is False
    for path in (node.state / "iptables").iterdir():
        path.unlink()
    calls = len(node.calls())
    booted = node.start_unit(UNIT)
    assert booted.returncode == 0, booted.stderr
    assert rules(node, "KILN-IMDS") == ROOT_ONLY and rules(node, "OUTPUT") == [JUMP]
    # The unit is already in place: a boot does not rewrite or re-enable it.
    assert not any(call.startswith("systemctl") for call in node.calls()[calls:])


def test_the_prometheus_agent_gets_a_fixed_user_that_the_rules_allow(tmp_path, agent_bundle):
    login = make_node(tmp_path / "login", agent_bundle, cluster_env=AGENT_ENV)
    result = login.run("configure_imds", KILN_NODE_ROLE="login")
    assert result.returncode == 0, result.stderr
    (useradd,) = [call for call in login.calls() if call.startswith("useradd")]
    assert "--system" in useradd.split() and useradd.endswith(" kiln-prometheus")
    (entry,) = [line for line in (login.root / "etc/passwd").read_text().splitlines() if line.startswith("kiln-")]
    uid = entry.split(":")[2]
    assert int(uid) < 1000
    assert rules(login, "KILN-IMDS") == [
        "-m owner --uid-owner 0 -j RETURN",
        f"-m owner --uid-owner {uid} -j RETURN",
        "-j REJECT",
    ]
    # Workers run no agent: root alone.
    worker = make_node(tmp_path / "worker", agent_bundle, cluster_env=AGENT_ENV)
    assert worker.run("configure_imds").returncode == 0
    assert rules(worker, "KILN-IMDS") == ROOT_ONLY
    assert not any(call.startswith("useradd") for call in worker.calls())


def test_the_agent_user_comes_before_the_agent_starts():
    # configure_exporters starts the agent as its user: that user must already be the fixed one.
    from kiln.bootstrap.profiles import PROFILES

    for target in ("pcs", "parallelcluster", "hyperpod"):
        steps = PROFILES[target].configure_steps
        assert steps.index("configure_imds") < steps.index("configure_exporters"), target
    assert "configure_imds" not in PROFILES["eks"].configure_steps


@pytest.mark.parametrize("role", ["controller", "login"])
def test_parallelcluster_keeps_its_own_lockdown_on_head_and_login_nodes(tmp_path, parallelcluster_bundle, role):
    node = make_node(tmp_path, parallelcluster_bundle)
    result = node.run("configure_imds", KILN_NODE_ROLE=role)
    assert result.returncode == 0, result.stderr
    assert iptables_calls(node) == [] and not (node.root / UNIT).exists()
    assert f"IMDS stays as the platform sets it on parallelcluster {role} nodes" in node.log.read_text()


def test_parallelcluster_compute_nodes_get_kiln_s_rules(tmp_path, parallelcluster_bundle):
    node = make_node(tmp_path, parallelcluster_bundle)
    result = node.run("configure_imds", KILN_NODE_ROLE="worker")
    assert result.returncode == 0, result.stderr
    assert rules(node, "KILN-IMDS") == ROOT_ONLY and rules(node, "OUTPUT") == [JUMP]


def test_each_target_restricts_imds_where_no_platform_does(parallelcluster_bundle, pcs_bundle):
    assert imds_guard_roles("pcs") == ("controller", "login", "worker")
    assert imds_guard_roles("parallelcluster") == ("worker",)
    assert set(imds_guard_roles("parallelcluster")).isdisjoint(
        service_fact("parallelcluster", "imds_secured_roles").value
    )
    # HyperPod leaves IMDS open to every user of its Slurm nodes: kiln keeps it to root there, as on PCS.
    assert imds_guard_roles("hyperpod") == tuple(service_fact("hyperpod", "imds_guard_roles").value)
    assert imds_guard_roles("hyperpod") == ("controller", "login", "worker")
    assert imds_guard_roles("eks") == imds_guard_roles("local") == ()
    for bundle, roles in ((pcs_bundle, "controller login worker"), (parallelcluster_bundle, "worker")):
        assert parse_env_file((bundle / "bundle.env").read_text())["KILN_IMDS_GUARD_ROLES"] == roles


def test_a_node_without_iptables_stops_the_step_by_name(node):
    (bin_dir(node) / "iptables").unlink()
    result = node.run("configure_imds", PATH=f"{bin_dir(node)}:/usr/bin:/bin")
    assert result.returncode != 0
    assert "iptables is not on this node" in node.log.read_text()
    assert "FAILED: step configure_imds" in result.stderr and str(node.log) in result.stderr
    # Nothing half done: no unit that would run an unguarded step at boot, no package manager call.
    assert not (node.root / UNIT).exists()
    assert not any(call.startswith(("apt-get", "dnf", "systemctl")) for call in node.calls())


def test_a_user_s_kiln_launch_finds_the_instance_type_without_imds(node):
    assert node.run("configure_training_env").returncode == 0
    record = node.root / "etc/kiln/instance-type"
    assert record.read_text() == "p5.48xlarge\n" and oct(record.stat().st_mode)[-3:] == "644"


@pytest.mark.parametrize("address", ["10.1.0.9", "10.1.0.7", "10.1.0.5"], ids=["controller", "login", "worker"])
def test_every_hyperpod_slurm_node_lets_only_root_reach_imds(tmp_path, address):
    node = hyperpod_node(tmp_path, address)
    result = node.run("configure_imds")
    assert result.returncode == 0, result.stderr
    assert rules(node, "KILN-IMDS") == ROOT_ONLY and rules(node, "OUTPUT") == [JUMP]
    # The unit that applies the rules again at every boot, before anyone may log in.
    assert "ExecStart=/bin/bash " in (node.root / UNIT).read_text()
    assert "IMDS stays as the platform sets it" not in node.log.read_text()
