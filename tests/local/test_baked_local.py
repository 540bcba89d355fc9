"""The local target baked: `--phase bake` under a private prefix installs for real, then the same bundle boots
from that prefix with every network command stubbed out, runs configure steps only and calls none of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.bootstrap import LocalCluster, render_bundle
from kiln.launcher.image import scan_image
from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from tests.support.node_root import stub_network
from tests.support.specs import MINIMAL_SPEC

pytestmark = [pytest.mark.e2e]


def bootstrap_env(prefix: Path, **extra: str) -> dict[str, str]:
    """Return the environment `kiln local` runs its bootstrap with, under PREFIX."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("KILN_", "SLURM_"))}
    # The launcher venv starts from this interpreter, as `kiln local up` does it.
    return {**env, "KILN_ROOT": str(prefix), "KILN_PYTHON": sys.executable, **extra}


def run_entry(entry: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(entry), *args], env=env, capture_output=True, text=True, timeout=600)


def files_with_times(directory: Path) -> dict[str, int]:
    """Return every path under DIRECTORY with its modification time: a venv that nothing touched keeps them all."""
    return {str(path): path.lstat().st_mtime_ns for path in [directory, *directory.rglob("*")]}


def test_a_baked_local_bundle_boots_with_configure_steps_only_and_no_network(e2e_ready, tmp_path):
    prefix = tmp_path / "prefix"
    local = LocalCluster.from_subnet("baked", str(prefix), 2, "10.77.0.0/24")
    bundle = render_bundle(config_from_spec(parse_spec(MINIMAL_SPEC), "local", local=local), tmp_path / "bundle")
    entry = bundle.directory / bundle.entry_point

    baked = run_entry(entry, "--phase", "bake", env=bootstrap_env(prefix))
    assert baked.returncode == 0, baked.stdout + baked.stderr
    assert (prefix / "etc/kiln/baked").read_text() == "local\n"
    markers = sorted(path.name for path in (prefix / "etc/kiln/image").iterdir())
    # install_code_server skipped (the spec has no code_server) and, like every install step that ran, left a marker.
    assert markers == [
        "install_code_server.env",
        "install_exporters.env",
        "install_launcher.env",
        "install_munge.env",
        "install_slurm.env",
    ]
    assert (prefix / "etc/kiln/image/install_slurm.env").read_text() == "KILN_SLURM_SOURCE='distro'\n"
    assert not (prefix / "etc/slurm/slurm.conf").exists(), "a bake runs no configure step"
    venv = prefix / "opt/kiln/venv"
    assert (venv / "bin/python").is_file()
    untouched = files_with_times(venv) | files_with_times(prefix / "var/lib/kiln/installed")

    network = stub_network(tmp_path / "network")
    # Install steps would ask dpkg first: recording it too shows that none of them ran.
    (network.bin_dir / "dpkg-query").symlink_to(network.bin_dir / "network-stub.sh")
    booted = run_entry(entry, env=bootstrap_env(prefix, KILN_BIN_DIR=str(network.bin_dir)))
    assert booted.returncode == 0, booted.stdout + booted.stderr
    assert network.calls() == []
    # python -m pip cannot be stubbed: the venv and kiln's install records must be exactly as the bake left them.
    assert files_with_times(venv) | files_with_times(prefix / "var/lib/kiln/installed") == untouched
    boot_log = (prefix / "var/log/kiln/bootstrap.log").read_text().split("phase all")[1]
    assert "baked yes" in boot_log
    assert "baked image: install steps ran at image build; checking their markers against this bundle" in boot_log
    for step in ("install_slurm", "install_munge", "install_launcher", "install_exporters"):
        assert f"[{step}] the image matches this bundle" in boot_log
    assert "ClusterName=baked" in (prefix / "etc/slurm/slurm.conf").read_text()
    assert (prefix / "etc/munge/munge.key").stat().st_size == 1024
    # What kiln-launch check will find on these nodes: every step's marker matches the bundle they booted.
    image = scan_image(prefix)
    assert sorted(image.wanted or {}) == [
        "install_code_server",
        "install_exporters",
        "install_launcher",
        "install_munge",
        "install_slurm",
    ]
    assert (image.missing, image.mismatches(), image.error) == ([], [], None)
    assert f"KILN_ROOT={prefix}" in (prefix / "etc/kiln/launcher.env").read_text()
