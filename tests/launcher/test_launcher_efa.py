"""The launcher's first step on a GPU node with EFA: NCCL's EFA stack is really there, or the launch stops in one line
(unless --allow-tcp); the workers get the plugin on their loader's path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.catalog import instance_type
from kiln.launcher import efa
from kiln.launcher.errors import LaunchError
from tests.support.efa_node import LIBFABRIC_DIR, PLUGIN_DIR, TOOL_DIR, simulate_efa_node
from tests.support.launcher import clean_env, run_launcher

P5 = instance_type("p5.48xlarge")
IMAGE = "public.ecr.aws/example/pytorch:2.13"


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """A PATH with nothing on it and the image kiln job submit names: only the simulated root holds tools."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    return {"PATH": str(empty), "KILN_IMAGE": IMAGE}


def test_a_stock_image_on_an_efa_node_stops_in_one_line_naming_what_is_missing_and_the_fix(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node")
    with pytest.raises(LaunchError) as caught:
        efa.gate(P5, environ, root=root)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("p5.48xlarge has 32 EFA device(s) here, but NCCL would fall back to TCP sockets")
    assert f"in image {IMAGE}" in line
    assert "no aws-ofi-nccl plugin (libnccl-net-ofi.so or libnccl-net.so on LD_LIBRARY_PATH" in line
    assert "no libfabric efa provider (fi_info, libfabric's tool, is not on PATH or in /opt/amazon/efa/bin)" in line
    assert "AWS Deep Learning Container for PyTorch" in line and "--allow-tcp" in line


def test_allow_tcp_starts_with_a_warning_that_the_plan_keeps(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node")
    gate = efa.gate(P5, environ, allow_tcp=True, root=root)
    assert gate.status == efa.TCP_ALLOWED
    assert gate.warning.startswith("--allow-tcp: p5.48xlarge has 32 EFA device(s) here, but NCCL would fall back")
    record = gate.as_dict()
    assert record["status"] == "tcp_allowed" and record["devices"] == 32 and len(record["missing"]) == 2


def test_libfabric_without_the_efa_provider_is_refused_with_what_fi_info_said(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so", fi_info=False)
    with pytest.raises(LaunchError, match=r"no libfabric efa provider \(.*fi_info -p efa: exit 1, fi_getinfo: -61"):
        efa.gate(P5, environ, root=root)


def test_a_plugin_without_fi_info_is_not_enough(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so")
    with pytest.raises(LaunchError) as caught:
        efa.gate(P5, environ, root=root)
    assert "no aws-ofi-nccl plugin" not in str(caught.value)
    assert "fi_info, libfabric's tool, is not on PATH" in str(caught.value)


def test_an_image_that_carries_the_stack_starts_with_the_plugin_on_the_workers_loader_path(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so", fi_info=True)
    environ["LD_LIBRARY_PATH"] = "/usr/local/cuda/lib64"
    gate = efa.gate(P5, environ, root=root)
    assert gate.status == efa.READY and gate.warning is None
    assert gate.stack.fi_info == str(root / TOOL_DIR / "fi_info")
    # The plugin's directory and libfabric's first, then the image's own path; NCCL loads libnccl-net.so by default,
    # so a plugin named libnccl-net-ofi.so alone is named to NCCL.
    assert gate.worker_env == {
        "LD_LIBRARY_PATH": f"{root / PLUGIN_DIR}:{root / LIBFABRIC_DIR}:/usr/local/cuda/lib64",
        "NCCL_NET_PLUGIN": "ofi",
    }


def test_nccl_net_plugin_is_left_alone_when_nccl_finds_the_plugin_by_default_or_the_user_named_one(tmp_path, environ):
    linked = simulate_efa_node(tmp_path / "a", plugin="libnccl-net-ofi.so", libnccl_net_link=True, fi_info=True)
    assert "NCCL_NET_PLUGIN" not in efa.gate(P5, environ, root=linked).worker_env
    named = simulate_efa_node(tmp_path / "b", plugin="libnccl-net-ofi.so", fi_info=True)
    assert "NCCL_NET_PLUGIN" not in efa.gate(P5, {**environ, "NCCL_NET_PLUGIN": "ofi"}, root=named).worker_env
    # Already on LD_LIBRARY_PATH: nothing to add.
    on_path = {**environ, "LD_LIBRARY_PATH": f"{named / PLUGIN_DIR}:{named / LIBFABRIC_DIR}", "NCCL_NET_PLUGIN": "x"}
    assert efa.gate(P5, on_path, root=named).worker_env == {}


@pytest.mark.parametrize(
    ("instance", "devices", "why"),
    [
        ("g6.xlarge", 0, "g6.xlarge runs no NCCL over EFA"),
        ("trn1.32xlarge", 8, "trn1.32xlarge runs no NCCL over EFA"),
        (None, 32, "instance type unknown: no EFA expectation"),
        ("p5.48xlarge", 0, "no EFA device visible on this p5.48xlarge"),
    ],
)
def test_no_gate_without_nccl_over_efa_or_without_devices(tmp_path, environ, instance, devices, why):
    root = simulate_efa_node(tmp_path / "node", devices=devices)
    gate = efa.gate(instance_type(instance) if instance else None, environ, root=root)
    assert (gate.status, gate.detail, gate.worker_env) == (efa.NOT_APPLICABLE, why, {})


def test_the_device_plugins_uverbs_nodes_count_when_sysfs_shows_none(tmp_path, environ):
    root = simulate_efa_node(tmp_path / "node", devices=0)
    (root / "dev/infiniband").mkdir(parents=True)
    for index in range(4):
        (root / "dev/infiniband" / f"uverbs{index}").touch()
    with pytest.raises(LaunchError, match="has 4 EFA device"):
        efa.gate(P5, environ, root=root)


def test_kiln_launch_refuses_tcp_on_an_efa_node_and_allow_tcp_is_explicit_and_logged(tmp_path):
    """kiln-launch itself, on a simulated p5 with a stock image: exit 1 in one line; --allow-tcp plans the run."""
    root = simulate_efa_node(tmp_path / "node")
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    env = clean_env(KILN_ROOT=str(root), KILN_INSTANCE_TYPE="p5.48xlarge", KILN_IMAGE=IMAGE)
    env["PATH"] = str(Path(env["PATH"].split(":")[0]))
    refused = run_launcher(["--nproc-per-node", "1", "--dry-run", str(script)], env=env)
    assert refused.returncode == 1, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("kiln-launch: error: p5.48xlarge has 32 EFA device(s) here, but NCCL would fall back")
    allowed = run_launcher(["--nproc-per-node", "1", "--allow-tcp", "--dry-run", str(script)], env=env)
    assert allowed.returncode == 0, allowed.stderr
    [warning] = allowed.stderr.strip().splitlines()
    assert warning.startswith("kiln-launch: warning: --allow-tcp: p5.48xlarge has 32 EFA device(s)")
    plan = json.loads(allowed.stdout)
    assert plan["efa"]["status"] == "tcp_allowed"
