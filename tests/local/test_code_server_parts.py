"""The local cluster's code-server without a cluster: how node 1 starts it, as whom, where its files go, and how its
listening socket is read from the kernel's view of a network namespace (/proc/PID/net/tcp)."""

from __future__ import annotations

import os
import socket

import pytest

from kiln.local import code_server
from kiln.local.errors import LocalFailure
from kiln.local.layout import ClusterLayout, plan_layout
from kiln.local.state import ClusterState

NODE = "/opt/kiln/code-server/node/bin/node"
ENTRY = "/opt/kiln/code-server/lib/node_modules/code-server/out/node/entry.js"


def test_without_code_server_in_the_spec_nothing_runs_it(tmp_path):
    assert code_server.code_server_process(plan_layout(prefix=str(tmp_path), nodes=1)) is None


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_node1_runs_it_in_its_namespace_as_the_user_with_everything_under_the_prefix(tmp_path, user):
    layout = plan_layout(prefix=str(tmp_path), nodes=2, tag="kt3", code_server_user=user)
    server = code_server.code_server_process(layout)
    assert server.role == "code-server:node1" and server.node == layout.nodes[0]
    assert server.argv == (
        f"{tmp_path}{NODE}",
        f"{tmp_path}{ENTRY}",
        "--bind-addr",
        "127.0.0.1:8080",
        "--disable-telemetry",
        "--disable-update-check",
    )
    switch = () if user == "root" else ("setpriv", "--reuid=65534", "--regid=65534", "--init-groups", "--")
    assert server.launch == ("nsenter", f"--net={layout.nodes[0].netns_path}", *switch, *server.argv)
    home = tmp_path / "home" / user
    assert server.config == home / ".config/code-server/config.yaml"
    for variable in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert server.env[variable].startswith(str(home)), variable
    assert server.env["TMPDIR"] == str(layout.tmp_dir) and server.env["USER"] == user
    assert not any(name.startswith(("KILN_", "SLURM_")) for name in server.env)


def test_the_user_is_part_of_the_recorded_layout(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=1, code_server_user="nobody")
    assert ClusterState.from_dict(ClusterState(layout=layout).to_dict()).layout.code_server_user == "nobody"
    # A state written before code-server existed has none.
    older = ClusterState(layout=plan_layout(prefix=str(tmp_path), nodes=1)).to_dict()
    del older["layout"]["code_server_user"]
    assert ClusterLayout.from_dict(older["layout"]).code_server_user == ""


def test_a_user_gone_from_this_machine_is_one_line(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=1, code_server_user="no-such-user-here")
    with pytest.raises(LocalFailure, match="user no-such-user-here .* no longer exists on this machine"):
        code_server.code_server_process(layout)


def test_starting_it_needs_the_install_and_the_config(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=1, code_server_user="root")
    server = code_server.code_server_process(layout)
    with pytest.raises(LocalFailure, match="code-server is missing at .*entry.js: the bootstrap did not finish it"):
        code_server.prepare(server, layout.tmp_dir)
    for path in (tmp_path / ENTRY.lstrip("/"), server.config):
        path.parent.mkdir(parents=True)
        path.write_text("")
    code_server.prepare(server, layout.tmp_dir)
    assert layout.tmp_dir.stat().st_mode & 0o7777 == 0o1777


def _proc(tmp_path, pid: int, tcp: str, tcp6: str = "") -> None:
    net = tmp_path / str(pid) / "net"
    net.mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (net / "tcp").write_text(header + tcp)
    (net / "tcp6").write_text(header + tcp6)


def test_listening_reads_the_namespaces_sockets_as_the_kernel_lists_them(tmp_path):
    _proc(
        tmp_path,
        7,
        # 127.0.0.1:8080 listening; 10.77.0.2:6818 listening; an established connection to 8080 (state 01).
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 02004D0A:1AA2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n",
        # [::]:9100 listening.
        "   0: 00000000000000000000000000000000:238C 00000000000000000000000000000000:0000 0A 00000000:00000000 "
        "00:00000000 00000000     0        0 4 1\n",
    )
    assert code_server.listening(7, proc=tmp_path) == {
        ("127.0.0.1", 8080),
        ("10.77.0.2", 6818),
        ("0000:0000:0000:0000:0000:0000:0000:0000", 9100),
    }
    assert code_server.listening(8, proc=tmp_path) == set()


def test_listening_finds_a_real_socket_in_this_process_namespace():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert ("127.0.0.1", port) in code_server.listening(os.getpid())
