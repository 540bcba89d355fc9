"""The errors `kiln local` promises: one clear line, the right exit code, nothing created, never a traceback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.support.local import kiln_local, unique_settings
from tests.support.paths import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kiln-local")]


def _one_line_error(result: subprocess.CompletedProcess, command: str, code: int = 2) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"kiln local {command}: error: ")
    return lines[0]


def test_up_as_a_normal_user_says_it_needs_root(e2e_ready, searchable_dir):
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    probe = subprocess.run([*nobody, sys.executable, "-c", "import kiln.cli.local"], cwd=ROOT, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user nobody cannot run this venv's Python here")
    prefix = searchable_dir / "not-root"
    result = kiln_local("up", "--prefix", str(prefix), wrapper=nobody)
    line = _one_line_error(result, "up")
    assert "must run as root" in line
    assert not prefix.exists()


def test_up_names_a_port_in_use_and_creates_nothing(e2e_ready, searchable_dir):
    settings = unique_settings(searchable_dir, index=1)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))  # noqa: S104 - slurmctld would bind all addresses
        holder.listen()
        port = holder.getsockname()[1]
        args = settings.up_args()
        args[args.index("--slurmctld-port") + 1] = str(port)
        line = _one_line_error(kiln_local(*args), "up")
    assert f"port {port} is in use" in line and "--slurmctld-port" in line
    assert not settings.prefix.exists()
    assert settings.tag not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_up_reports_packages_that_cannot_be_installed(e2e_ready, searchable_dir, tmp_path):
    # A package manager that has nothing installed and cannot install anything.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (shims / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package slurmctld' >&2\nexit 100\n")
    for shim in shims.iterdir():
        shim.chmod(0o755)
    settings = unique_settings(searchable_dir, index=2)
    env = {"PATH": f"{shims}:{os.environ['PATH']}", "KILN_RETRY_ATTEMPTS": "1"}
    result = kiln_local(*settings.up_args(), env=env)
    line = _one_line_error(result, "up", code=1)
    assert "packages could not be installed (bootstrap step install_slurm)" in line
    assert f"{settings.prefix}/var/log/kiln/bootstrap.log" in line
    assert "bootstrap step install_slurm ... failed" in result.stdout
    down = kiln_local("down", "--prefix", str(settings.prefix))
    assert down.returncode == 0, down.stderr
    assert not settings.prefix.exists()


@pytest.mark.parametrize("command", ["status", "run", "smoke", "down"])
def test_commands_on_a_cluster_that_is_not_up(e2e_ready, searchable_dir, command):
    extra = ["--", "true"] if command == "run" else []
    line = _one_line_error(kiln_local(command, "--prefix", str(searchable_dir / "never-up"), *extra), command)
    assert "no kiln local cluster is up under" in line and "kiln local up" in line
    assert "--prefix" in line and "$KILN_LOCAL_PREFIX" in line


def test_up_refuses_a_prefix_that_holds_other_files(e2e_ready, searchable_dir):
    prefix = searchable_dir / "busy"
    prefix.mkdir()
    (prefix / "keep-me").write_text("not kiln's\n")
    line = _one_line_error(kiln_local("up", "--prefix", str(prefix)), "up")
    assert "holds no kiln local cluster" in line
    assert (prefix / "keep-me").read_text() == "not kiln's\n"


def test_up_refuses_a_prefix_munged_cannot_use(e2e_ready, tmp_path):
    # pytest's own temporary directories are 0700: munged would refuse its socket there.
    line = _one_line_error(kiln_local("up", "--prefix", str(tmp_path / "cluster")), "up")
    assert "is not searchable by other users" in line
    assert not (tmp_path / "cluster").exists()
