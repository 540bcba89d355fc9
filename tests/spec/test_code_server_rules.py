"""code_server on the Slurm backends (kiln.spec.rules code_server_node): it runs on a login node, else on the Slurm
controller where kiln boots one, as a user other than root. Each refusal is one line naming the field; what the
setting changes in the node bundle is in the field table (tests/spec/test_field_effects.py)."""

from __future__ import annotations

import copy

import pytest

from kiln.bootstrap.local_target import LocalCluster
from kiln.node_config.code_server import local_code_server_user
from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as problems

SLURM_COMPUTE = {
    "pcs": {"backend": "pcs"},
    "parallelcluster": {"backend": "parallelcluster"},
    "hyperpod-slurm": {"backend": "hyperpod"},
}


def slurm_spec(platform: str, login_nodes: int | None = None, **top) -> dict:
    """Return MINIMAL_SPEC on PLATFORM (HyperPod's groups have a fixed size), LOGIN_NODES login nodes when given."""
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["compute"] |= SLURM_COMPUTE[platform]
    if platform == "hyperpod-slurm":
        spec["compute"]["groups"][0]["min_count"] = spec["compute"]["groups"][0]["max_count"]
    if login_nodes is not None:
        spec["compute"]["login_nodes"] = {"count": login_nodes}
    return spec | top


def test_pcs_without_login_nodes_has_nowhere_to_run_it_in_one_line() -> None:
    assert problems(slurm_spec("pcs", login_nodes=0, code_server={})) == [
        "x.yaml: code_server: got code-server, but PCS runs the Slurm controller itself and this cluster has no login "
        "node to run it on: set compute.login_nodes.count, or remove code_server"
    ]


@pytest.mark.parametrize("platform", sorted(SLURM_COMPUTE))
def test_root_is_refused_in_one_line(platform: str) -> None:
    assert problems(slurm_spec(platform, code_server={"user": "root"})) == [
        "x.yaml: code_server.user: got 'root', allowed: any other user: code-server's terminals and extensions act as "
        "its user; name the user you log in as, or leave it out for kiln's own user (coder, without sudo)"
    ]


@pytest.mark.parametrize(
    ("platform", "login_nodes", "role", "user"),
    [
        ("pcs", None, "login", "coder"),
        ("parallelcluster", None, "login", "coder"),
        # Without login nodes: ParallelCluster's head node, HyperPod's controller.
        ("parallelcluster", 0, "controller", "coder"),
        ("hyperpod-slurm", 0, "controller", "coder"),
    ],
)
def test_it_runs_on_the_login_node_else_the_controller_as_kilns_own_user(platform, login_nodes, role, user) -> None:
    spec = parse_spec(slurm_spec(platform, login_nodes=login_nodes, code_server={}), "x.yaml")
    config = config_from_spec(spec)
    assert (config.code_server_role, config.code_server_user) == (role, user)
    # Every node creates it with the same uid (configure_users), so the jobs its terminal submits run as it there.
    assert [(u.name, u.uid, u.group_id) for u in config.users] == [("coder", 59000, 59000)]
    named = config_from_spec(parse_spec(slurm_spec(platform, login_nodes, code_server={"user": "alice"}), "x.yaml"))
    assert named.code_server_user == "alice" and named.users == ()


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("ec2-user", "ec2-user is a passwordless sudoer on the images"),
        ("ubuntu", "ubuntu is a passwordless sudoer on the images"),
        ("ssm-user", "ssm-user is a passwordless sudoer on the images"),
        ("nobody", "nobody is a system account without a home and login shell"),
        ("daemon", "daemon is a system account without a home and login shell"),
        ("www-data", "www-data is a system account without a home and login shell"),
    ],
)
@pytest.mark.parametrize("platform", sorted(SLURM_COMPUTE))
def test_known_sudoers_and_system_accounts_are_refused_in_one_line(platform: str, user: str, why: str) -> None:
    [line] = problems(slurm_spec(platform, code_server={"user": user}))
    assert line.startswith(f"x.yaml: code_server.user: got {user!r}: {why}"), line
    assert line.endswith("or leave it out for kiln's own user (coder)"), line


def test_without_code_server_no_node_runs_it() -> None:
    config = config_from_spec(parse_spec(slurm_spec("pcs"), "x.yaml"))
    assert (config.code_server_role, config.code_server_user) == ("", "")


def test_locally_it_runs_as_the_user_behind_sudo_else_whoever_runs_kiln() -> None:
    assert local_code_server_user({"SUDO_USER": "nobody"}, euid=0) == "nobody"
    # No sudo, sudo by root itself, or a SUDO_USER this machine does not have: the user running kiln.
    assert local_code_server_user({}, euid=0) == "root"
    assert local_code_server_user({"SUDO_USER": "root"}, euid=0) == "root"
    assert local_code_server_user({"SUDO_USER": "no-such-user-here"}, euid=65534) == "nobody"


def test_the_local_cluster_runs_it_as_its_own_user_not_the_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "nobody")
    spec = parse_spec(slurm_spec("pcs", code_server={"user": "alice"}), "x.yaml")
    local = LocalCluster.from_subnet("x", "/tmp/kiln-local-x", 1, "10.77.0.0/24")
    config = config_from_spec(spec, "local", local=local)
    assert (config.code_server_role, config.code_server_user) == ("controller", "nobody")
