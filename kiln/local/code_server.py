"""code-server on the local cluster (the spec's code_server): node 1 runs it inside its network namespace on
127.0.0.1:8080, as the user who ran kiln, with its home, configuration and data under the cluster's prefix.

The bootstrap installs it (install_code_server: Node 24, npm and code-server from the npm registry, each checked by
its published integrity) and writes the user's config.yaml once with a random password (configure_code_server); `up`
starts it here like the exporters, `status` lists it, `down` stops it with node 1's processes and removes the prefix.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kiln.bootstrap.render import CODE_SERVER_PREFIX
from kiln.catalog.code_server import CODE_SERVER_CONFIG, CODE_SERVER_HOST, CODE_SERVER_PORT
from kiln.local.errors import LocalFailure
from kiln.local.layout import ClusterLayout, NodeLayout
from kiln.local.procs import log_tail

ROLE_PREFIX = "code-server"
# code-server starts in a second or two; a loaded machine (the cluster's daemons starting beside it) takes longer.
READY_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 10.0
_POLL_S = 0.2
# /proc/PID/net/tcp: the state of a listening socket, and 127.0.0.1:8080 as the kernel writes it there.
_LISTEN = "0A"


@dataclass(frozen=True, kw_only=True)
class LocalCodeServer:
    """code-server as the local cluster runs it: on which node, as whom, how it starts, where its password is."""

    node: NodeLayout
    user: str
    uid: int
    gid: int
    home: Path
    # The command as /proc shows it once it runs (what procs.start waits for), and how it is started.
    argv: tuple[str, ...]
    launch: tuple[str, ...]
    env: Mapping[str, str]

    @property
    def role(self) -> str:
        return f"{ROLE_PREFIX}:{self.node.name}"

    @property
    def url(self) -> str:
        return f"http://{CODE_SERVER_HOST}:{CODE_SERVER_PORT}/"

    @property
    def config(self) -> Path:
        """Return the file that holds the password (code-server's config.yaml in the user's home under the prefix)."""
        return self.home / CODE_SERVER_CONFIG

    @property
    def where(self) -> str:
        """Return how a line names where it listens: inside node 1's network namespace, only there."""
        return f"{self.url} inside {self.node.name}'s network namespace (nsenter --net={self.node.netns_path})"


def code_server_process(layout: ClusterLayout) -> LocalCodeServer | None:
    """Return how LAYOUT's cluster runs code-server, or None when its spec has none."""
    if not layout.code_server_user:
        return None
    node = layout.nodes[0]
    try:
        account = pwd.getpwnam(layout.code_server_user)
    except KeyError:
        raise LocalFailure(
            f"code-server: user {layout.code_server_user} (who brought the cluster up) no longer exists on this machine"
        ) from None
    home = layout.path(f"/home/{account.pw_name}")
    prefix = layout.path(CODE_SERVER_PREFIX)
    argv = (
        str(prefix / "node" / "bin" / "node"),
        str(prefix / "lib" / "node_modules" / "code-server" / "out" / "node" / "entry.js"),
        "--bind-addr",
        f"{CODE_SERVER_HOST}:{CODE_SERVER_PORT}",
        "--disable-telemetry",
        "--disable-update-check",
    )
    # setpriv execs code-server as the user: the PID started is code-server's, and it holds no root privilege.
    as_user = () if account.pw_uid == 0 else ("setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}")
    as_user += ("--init-groups", "--") if as_user else ()
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "SHELL": account.pw_shell or "/bin/sh",
        # Everything code-server writes stays under the prefix: its configuration, data, caches and temp files.
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TMPDIR": str(layout.tmp_dir),
    }
    return LocalCodeServer(
        node=node,
        user=account.pw_name,
        uid=account.pw_uid,
        gid=account.pw_gid,
        home=home,
        argv=argv,
        # Inside node 1's network namespace: its loopback is the node's, which nothing outside the node reaches.
        launch=("nsenter", f"--net={node.netns_path}", *as_user, *argv),
        env=env,
    )


def prepare(server: LocalCodeServer, tmp_dir: Path) -> None:
    """Check what `up` needs before it starts SERVER: the install and the config file the bootstrap wrote; the
    nodes' /tmp (TMPDIR), as local jobs have it."""
    for path, what in ((Path(server.argv[1]), "code-server"), (server.config, "its config.yaml")):
        if not path.is_file():
            raise LocalFailure(f"{server.role}: {what} is missing at {path}: the bootstrap did not finish it")
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir.chmod(0o1777)


def listening(pid: int, proc: Path = Path("/proc")) -> set[tuple[str, int]]:
    """Return (address, port) of every TCP socket listening in PID's network namespace: IPv4 addresses dotted, IPv6
    ones as eight groups of four hex digits; empty when PID is gone. Reading it needs no root."""
    found = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pid) / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _LISTEN:
                continue
            address, port = fields[1].split(":")
            found.add((_address(address), int(port, 16)))
    return found


def _address(hexed: str) -> str:
    """Return the address /proc/net/tcp{,6} writes as HEXED (each 32-bit word in host byte order, little-endian)."""
    words = [bytes.fromhex(hexed[i : i + 8])[::-1] for i in range(0, len(hexed), 8)]
    raw = b"".join(words)
    if len(raw) == 4:
        return ".".join(str(part) for part in raw)
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))


def is_listening(pid: int) -> bool:
    """True when code-server listens on 127.0.0.1:8080 in PID's network namespace."""
    return (CODE_SERVER_HOST, CODE_SERVER_PORT) in listening(pid)


def wait_listening(server: LocalCodeServer, pid: int, alive, log: Path) -> None:
    """Wait until SERVER listens, failing at once when ALIVE turns false, or after READY_TIMEOUT_S."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not is_listening(pid):
        if not alive():
            detail = log_tail(log)
            raise LocalFailure(f"{server.role} exited" + (f": {detail}" if detail else "") + f" (log: {log})")
        if time.monotonic() > deadline:
            raise LocalFailure(
                f"{server.role} does not listen on {CODE_SERVER_HOST}:{CODE_SERVER_PORT} after "
                f"{READY_TIMEOUT_S:.0f}s (log: {log})"
            )
        time.sleep(_POLL_S)


# Run inside the node's network namespace: print the HTTP status of the login page, or 0 when nothing answers.
_GET = (
    "import sys, urllib.error, urllib.request\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).status)\n"
    "except urllib.error.HTTPError as error:\n"
    "    print(error.code)\n"
    "except OSError:\n"
    "    print(0)\n"
)


def login_status(server: LocalCodeServer) -> int:
    """Return the HTTP status of code-server's login page as node 1 sees it (0: no answer); needs root (nsenter)."""
    command = ["nsenter", f"--net={server.node.netns_path}", sys.executable, "-c", _GET]
    command += [f"{server.url}login", str(ANSWER_TIMEOUT_S)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=ANSWER_TIMEOUT_S + 5)
    except subprocess.TimeoutExpired:
        return 0
    answer = result.stdout.strip()
    return int(answer) if result.returncode == 0 and answer.isdigit() else 0
