"""Helpers for the local cluster tests: running `kiln local`, unique settings per cluster, whether e2e runs can."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT


def e2e_skip_reason() -> str | None:
    """Return why the end-to-end tests cannot run here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "the local cluster needs Linux"
    if os.geteuid() != 0:
        return "the local cluster needs root (network namespaces, Slurm daemons)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True)
    if probe.returncode != 0 or subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        return "network namespaces are not available here"
    return None


def free_port() -> int:
    """Return a TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))  # noqa: S104 - slurmctld binds all addresses, so check the same
        return probe.getsockname()[1]


KILN_LOCAL = (sys.executable, "-m", "kiln.cli", "local")


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "SLURM_"))}
    return {**base, **(extra or {})}


def kiln_local(
    *args: str, env: dict[str, str] | None = None, wrapper: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run `kiln local ARGS` in a fresh process (under WRAPPER, e.g. setpriv), as a user would; capture its output."""
    return subprocess.run(
        [*wrapper, *KILN_LOCAL, *args], cwd=ROOT, env=_env(env), capture_output=True, text=True, timeout=timeout
    )


def kiln_local_popen(*args: str) -> subprocess.Popen:
    """Start `kiln local ARGS` in the background, output captured."""
    return subprocess.Popen(
        [*KILN_LOCAL, *args], cwd=ROOT, env=_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@dataclass(frozen=True)
class Settings:
    """Names, subnet and ports of a test cluster, unique per test process so nothing collides."""

    prefix: Path
    tag: str
    subnet: str
    slurmctld_port: int
    slurmd_port: int

    def up_args(self, nodes: int = 2) -> list[str]:
        return [
            "up",
            "--prefix",
            str(self.prefix),
            "--nodes",
            str(nodes),
            "--tag",
            self.tag,
            "--subnet",
            self.subnet,
            "--slurmctld-port",
            str(self.slurmctld_port),
            "--slurmd-port",
            str(self.slurmd_port),
        ]


def unique_settings(base: Path, index: int = 0) -> Settings:
    """Return settings no developer cluster and no other test process uses."""
    pid = os.getpid()
    return Settings(
        prefix=base / f"cluster{index}",
        tag=f"kt{pid % 10000}{index}",
        # 10.78-10.79: away from the default 10.77.0.0/24 of a developer's cluster.
        subnet=f"10.{78 + index % 2}.{pid % 250}.0/24",
        slurmctld_port=free_port(),
        slurmd_port=free_port(),
    )
