"""Checks before `up` touches anything: platform, root, namespaces, tools, ports, names, subnet, prefix."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

from kiln.host.safe_output import protected_reason
from kiln.local import network
from kiln.local.errors import LocalError
from kiln.local.layout import DEFAULT_PREFIX, ClusterLayout

# What the local cluster runs itself; Slurm and munge come from the bootstrap's install steps.
TOOLS = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    # code-server runs as the user who ran kiln (kiln.local.code_server), and writes its config as that user.
    "setpriv": "util-linux",
    "mount": "mount",
    "bash": "bash",
}


def check_platform(platform: str = sys.platform) -> None:
    if not platform.startswith("linux"):
        raise LocalError(f"kiln local needs Linux (nodes are network namespaces); this is {platform}")


def check_root(euid: int | None = None) -> None:
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise LocalError(
            "kiln local must run as root (it creates network namespaces and starts Slurm's daemons): run it with sudo"
        )


def check_tools(which=shutil.which) -> None:
    missing = [f"{tool} (package {package})" for tool, package in TOOLS.items() if which(tool) is None]
    if missing:
        raise LocalError(f"missing commands: {', '.join(missing)}; install them and run again")


def check_netns(probe: tuple[str, ...] = ("unshare", "--net", "true")) -> None:
    """Create and drop a throwaway network namespace; raise when the kernel or sandbox refuses."""
    try:
        result = subprocess.run(probe, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LocalError(f"no network-namespace support: `{' '.join(probe)}` could not run ({error})") from None
    if result.returncode != 0:
        detail = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
        raise LocalError(
            f"no network-namespace support: `{' '.join(probe)}` failed ({detail}); "
            "kiln local needs a kernel with CONFIG_NET_NS and the right to use it (not an unprivileged container)"
        )


def port_in_use(port: int, address: str = "0.0.0.0") -> bool:  # noqa: S104 - slurmctld listens on all addresses
    """True when something already listens on PORT (a socket merely in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # slurmctld sets SO_REUSEADDR too, so only a real listener stops it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def check_port(port: int) -> None:
    if port_in_use(port):
        raise LocalError(
            f"port {port} is in use on this machine and slurmctld needs it: stop what listens there "
            f"(see `ss -ltnp 'sport = :{port}'`) or choose another with --slurmctld-port"
        )


def check_names_free(layout: ClusterLayout) -> None:
    """Refuse names that already exist: they belong to someone else (or another kiln local cluster)."""
    taken = [name for name in (layout.bridge, *(n.veth for n in layout.nodes)) if network.link_exists(name)]
    taken += [node.netns for node in layout.nodes if network.netns_exists(node)]
    if taken:
        raise LocalError(
            f"{', '.join(taken)} already exist on this machine and are not this cluster's "
            f"(another kiln local cluster? `kiln local down --prefix` it) or choose another --tag"
        )


def check_subnet(layout: ClusterLayout, routes: list[dict] | None = None) -> None:
    clashes = network.overlapping_routes(layout.subnet, network.host_routes() if routes is None else routes)
    if clashes:
        raise LocalError(
            f"subnet {layout.subnet} overlaps routes this machine already has ({'; '.join(clashes)}): "
            "choose another with --subnet"
        )


def check_prefix(prefix: Path) -> None:
    """Accept a new or empty directory whose parents all may search: `down` removes the prefix as a whole."""
    reason = protected_reason(prefix)
    if reason:
        raise LocalError(f"--prefix {prefix}: {reason}; `down` removes the whole prefix, so choose a new directory")
    if prefix.is_symlink() or (prefix.exists() and (not prefix.is_dir() or any(prefix.iterdir()))):
        raise LocalError(
            f"{prefix} exists and holds no kiln local cluster; `down` removes the whole prefix, "
            "so choose a new or empty directory with --prefix"
        )
    for directory in (prefix, *prefix.parents):
        if not directory.exists():
            continue
        mode = directory.stat().st_mode
        # munged refuses a socket below a directory that other users cannot search.
        if not mode & stat.S_IXOTH:
            raise LocalError(
                f"{directory} is not searchable by other users (mode {stat.filemode(mode)}) and munged refuses "
                f"a socket below it: choose a --prefix elsewhere (default {DEFAULT_PREFIX}) or `chmod o+x {directory}`"
            )
