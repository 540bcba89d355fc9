"""End to end: `kiln local up` with code_server in the spec installs code-server from the npm registry (each tarball
checked by its published integrity) and runs it on node 1, inside its network namespace, on 127.0.0.1:8080 only, as
the user who ran kiln; `status` lists it and `down` leaves nothing of it.

One cluster for the module: the install (Node 24, npm, code-server and a node-gyp build of VS Code's native modules,
minutes on two cores) happens once, and every test reads that cluster. They run in file order: up, checks, down.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from kiln.local import procs
from kiln.local.state import load
from tests.support.local import Settings, kiln_local, unique_settings
from tests.support.specs import MINIMAL_SPEC

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("kiln-local")]

# A user of this machine other than root, as `sudo kiln local up` by them would name it (Debian has nobody).
USER = "nobody"
# The install alone took about 4 minutes on two cores; the whole `up` gets room for a slower machine.
UP_TIMEOUT_S = 1800
PREFIX = "opt/kiln/code-server"


@pytest.fixture(scope="module")
def cluster(e2e_ready, searchable_dir):
    """Bring up one node with code-server once for the module, timing it; take it down at the end in any case."""
    settings = unique_settings(searchable_dir, index=1)
    spec = settings.prefix.parent / f"{settings.tag}-code-server.json"
    spec.write_text(json.dumps({**MINIMAL_SPEC, "name": "editor", "code_server": {}}))
    started = time.monotonic()
    result = kiln_local(*settings.up_args(nodes=1), "--spec", str(spec), env={"SUDO_USER": USER}, timeout=UP_TIMEOUT_S)
    elapsed = time.monotonic() - started
    yield settings, result, elapsed
    if (settings.prefix / "state.json").exists():
        kiln_local("down", "--prefix", str(settings.prefix))


def _netns(settings: Settings) -> str:
    return str(load(settings.prefix).layout.nodes[0].netns_path)


def _code_server_pids(settings: Settings) -> set[int]:
    """Return every process that runs code-server's install (the server and the processes it started)."""
    install = str(settings.prefix / PREFIX)
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if install in cmdline:
                found.add(int(entry.name))
    return found


def test_up_installs_code_server_and_starts_it_on_node1(cluster):
    settings, result, elapsed = cluster
    assert result.returncode == 0, result.stdout + result.stderr
    phases = {m.group(1): float(m.group(2)) for m in re.finditer(r"^  (.+?) \.\.\. (\d+\.\d)s$", result.stdout, re.M)}
    install = phases["bootstrap step install_code_server"]
    assert "start code-server on node1 as nobody" in phases
    print(f"\nkiln local up with code-server: {elapsed:.0f}s, of which install_code_server {install:.0f}s")
    state = load(settings.prefix)
    [record] = [r for r in state.processes if r.role == "code-server:node1"]
    assert procs.is_running(record)
    config = settings.prefix / "home" / USER / ".config/code-server/config.yaml"
    line = f"code-server: http://127.0.0.1:8080/ inside node1's network namespace (nsenter --net={_netns(settings)})"
    assert f"{line}, as {USER}; password in {config}" in result.stdout


def test_its_login_page_answers_200_on_node1s_loopback(cluster):
    settings, _, _ = cluster
    answer = subprocess.run(
        ["nsenter", f"--net={_netns(settings)}", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"]
        + ["--max-time", "10", "http://127.0.0.1:8080/login"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert answer.stdout == "200", answer


def test_it_listens_on_no_other_address(cluster):
    settings, _, _ = cluster
    pids = _code_server_pids(settings)
    assert pids
    sockets = subprocess.run(
        ["nsenter", f"--net={_netns(settings)}", "ss", "-H", "-t", "-l", "-n", "-p"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.splitlines()
    # ss names each socket's processes as ("name",pid=N,fd=M).
    ours = [line.split()[3] for line in sockets if {int(p) for p in re.findall(r"pid=(\d+)", line)} & pids]
    assert ours and set(ours) == {"127.0.0.1:8080"}, sockets
    # From this machine (outside the namespace), the node's own address has nothing on 8080.
    node = load(settings.prefix).layout.nodes[0]
    refused = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "--max-time", "5", f"http://{node.address}:8080/login"], timeout=30
    )
    assert refused.returncode != 0


def test_it_runs_as_the_user_with_its_home_and_config_under_the_prefix(cluster):
    settings, _, _ = cluster
    record = next(r for r in load(settings.prefix).processes if r.role == "code-server:node1")
    status = (Path("/proc") / str(record.pid) / "status").read_text()
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    assert uid == 65534
    environ = dict(
        item.split("=", 1) for item in (Path("/proc") / str(record.pid) / "environ").read_text().split("\0") if item
    )
    home = settings.prefix / "home" / USER
    assert environ["HOME"] == str(home)
    config = home / ".config/code-server/config.yaml"
    info = config.stat()
    assert info.st_uid == 65534 and info.st_mode & 0o777 == 0o600
    assert re.fullmatch(
        r"bind-addr: 127\.0\.0\.1:8080\nauth: password\npassword: [0-9a-f]{40}\ncert: false\n", config.read_text()
    )
    # Its data went there too, not to the user's real home.
    assert (home / ".local/share/code-server").is_dir()


def test_status_lists_it_with_its_address_and_where_the_password_is(cluster):
    settings, _, _ = cluster
    result = kiln_local("status", "--prefix", str(settings.prefix))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^code-server:node1\s+\d+\s+running$", result.stdout, re.M), result.stdout
    config = settings.prefix / "home" / USER / ".config/code-server/config.yaml"
    assert f", as {USER}: listening; password in {config}" in result.stdout


def test_down_stops_it_and_leaves_nothing_of_it(cluster):
    settings, _, _ = cluster
    result = kiln_local("down", "--prefix", str(settings.prefix))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not _code_server_pids(settings)
    assert not settings.prefix.exists()
