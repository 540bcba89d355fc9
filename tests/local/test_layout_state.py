"""Pure parts of the local cluster: layout, state file, lock, process identity, hosts file."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kiln.bootstrap import BootstrapConfig, render_bundle
from kiln.bootstrap.render import LOCAL_CRED_EXPIRE_S
from kiln.local import procs
from kiln.local import state as state_file
from kiln.local.daemons import slurmd_launch
from kiln.local.errors import LocalError
from kiln.local.layout import plan_layout
from kiln.local.network import hosts_text
from kiln.local.state import ClusterState, ProcessRecord


def test_layout_addresses_names_and_paths_follow_the_bootstrap(tmp_path):
    layout = plan_layout(prefix=str(tmp_path / "p"), nodes=3, tag="kt1", subnet="10.78.5.0/24", slurmctld_port=7000)
    assert layout.controller_address == "10.78.5.1"
    assert [(n.name, n.address, n.netns, n.veth) for n in layout.nodes] == [
        ("node1", "10.78.5.2", "kt1-node1", "kt1-v1"),
        ("node2", "10.78.5.3", "kt1-node2", "kt1-v2"),
        ("node3", "10.78.5.4", "kt1-node3", "kt1-v3"),
    ]
    assert layout.bridge == "kt1-br0"
    assert layout.prefix_length == 24
    assert layout.slurmctld_port == 7000 and layout.slurmd_port == 6818
    # The paths the daemons use are where the bootstrap's rendered files say they are.
    bundle = render_bundle(BootstrapConfig(target="local", os="debian12", local=layout.local_cluster()), tmp_path / "b")
    conf = (bundle.directory / "slurm" / "slurm.conf").read_text().replace("@KILN_ROOT@", layout.prefix)
    assert f"AuthInfo=socket={layout.munge_socket},cred_expire={LOCAL_CRED_EXPIRE_S}\n" in conf
    assert layout.slurm_conf == tmp_path / "p" / "etc" / "slurm" / "slurm.conf"


def test_interface_names_fit_the_kernel_limit(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=64, tag="abcdefgh", subnet="10.78.0.0/24")
    names = [layout.bridge, *(node.veth for node in layout.nodes)]
    assert max(len(name) for name in names) <= 15


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tag": "Bad"}, "--tag: got 'Bad'"),
        ({"tag": "toolongtag"}, "--tag"),
        ({"nodes": 0}, "--nodes: got 0"),
        ({"subnet": "nonsense"}, "--subnet: got 'nonsense'"),
        ({"subnet": "8.8.8.0/24"}, "a private IPv4 network"),
        ({"subnet": "10.78.0.0/30"}, "nodes: got 2"),
        ({"slurmctld_port": 6818}, "must differ"),
    ],
)
def test_layout_rejects_values_that_cannot_work(tmp_path, changes, message):
    with pytest.raises(LocalError, match=message.replace("(", r"\(")):
        plan_layout(**{"prefix": str(tmp_path), "nodes": 2, **changes})


def test_state_round_trips_and_replaces_a_role(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=2)
    record = ProcessRecord(role="slurmd:node1", pid=10, argv=("slurmd", "-D"), start_ticks=5, log="/x")
    current = ClusterState(layout=layout, bootstrapped=True, bridge="kiln-br0", namespaces=("kiln-node1",))
    current = current.with_process(record)
    current = current.with_process(ProcessRecord(role="munged", pid=11, argv=("munged",), start_ticks=6, log="/y"))
    current = current.with_process(
        ProcessRecord(role="slurmd:node1", pid=12, argv=("slurmd",), start_ticks=7, log="/z")
    )
    state_file.save(current)
    loaded = state_file.load(tmp_path)
    assert loaded == current
    assert loaded.process("slurmd:node1").pid == 12
    assert [p.role for p in loaded.processes] == ["munged", "slurmd:node1"]
    assert state_file.load(tmp_path / "nowhere") is None


def test_a_damaged_state_file_is_a_clear_error(tmp_path):
    (tmp_path / "state.json").write_text('{"version": 99}')
    with pytest.raises(LocalError, match="not a kiln local state file"):
        state_file.load(tmp_path)


def test_the_lock_keeps_a_second_command_out(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(30)",
            str(tmp_path / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LocalError, match="another `kiln local` command"), state_file.locked(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with state_file.locked(tmp_path):
        pass


def test_stat_parsing_survives_odd_command_names():
    line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0"
    assert procs.parse_stat(line) == ("S", 987654)


def test_a_record_runs_only_while_command_and_start_time_match():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 5
        while (found := procs.identity(child.pid)).argv[:1] != (sys.executable,) and time.monotonic() < deadline:
            time.sleep(0.01)
        record = ProcessRecord(role="t", pid=child.pid, argv=found.argv, start_ticks=found.start_ticks, log="")
        assert procs.is_running(record)
        assert not procs.is_running(ProcessRecord(**{**vars(record), "start_ticks": found.start_ticks + 1}))
        assert not procs.is_running(ProcessRecord(**{**vars(record), "argv": ("slurmd",)}))
        procs.stop_pids([child.pid], grace_s=5)
        child.wait()
        assert not procs.is_running(record)
    finally:
        child.kill()
        child.wait()


def test_stop_pids_kills_what_ignores_sigterm():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    started = time.monotonic()
    # Our own child stays a zombie until we wait for it; stop_pids rightly counts a zombie as gone.
    procs.stop_pids([child.pid], grace_s=0.5)
    assert child.wait(timeout=5) == -9
    assert time.monotonic() - started < 5


def test_processes_of_this_network_namespace_are_found():
    assert os.getpid() in procs.pids_in_netns(procs.PROC / "self" / "ns" / "net")
    assert procs.pids_in_netns(procs.PROC / "no-such-namespace") == []


def test_hosts_file_names_every_node_and_keeps_forward_lookups_ipv4(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=2, subnet="10.78.9.0/24")
    lines = hosts_text(layout).splitlines()
    assert "10.78.9.2\tnode1" in lines and "10.78.9.3\tnode2" in lines
    assert "::ffff:10.78.9.2\tnode1-v4mapped" in lines
    assert not any(line.endswith("\tnode1") and ":" in line.split()[0] for line in lines)


def test_slurmd_starts_in_the_node_namespace_with_its_own_hosts_and_name(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=2, tag="kt2")
    node = layout.nodes[1]
    launch = slurmd_launch(layout, node)
    assert launch[:2] == ["nsenter", f"--net={node.netns_path}"]
    assert launch[-6:] == ["slurmd", "-D", "-f", str(layout.slurm_conf), "-N", "node2"]
    # Run the shell part for real with harmless commands in place of mount and hostname.
    shell = launch[launch.index("-c") + 1]
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("mount", "hostname"):
        (fake / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls"\n')
        (fake / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["sh", "-c", shell, "kiln-node", "/h", "node2", "echo", "exec'd"], env=env, capture_output=True, text=True
    )
    assert result.stdout == "exec'd\n"
    assert (tmp_path / "calls").read_text() == "mount --bind /h /etc/hosts\nhostname node2\n"


def test_a_nodes_hardware_address_follows_its_ip_address_so_a_replaced_node_keeps_it():
    from kiln.local.network import node_mac

    assert node_mac("10.77.0.3") == "02:6b:0a:4d:00:03" == node_mac("10.77.0.3")
    assert node_mac("10.77.0.4") != node_mac("10.77.0.3")
    # Locally administered (bit 1 of the first octet) and unicast (bit 0 clear).
    assert int(node_mac("10.77.0.3").split(":")[0], 16) & 0b11 == 0b10
