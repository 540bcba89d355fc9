"""launcher.env names the FSx for Lustre mount point where the bootstrap mounts one, so kiln-launch health (run by
slurmd with an almost empty environment) checks that mount; without Lustre it names none."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, make_node


def launcher_env(tmp_path: Path, bundle: Path) -> dict[str, str]:
    """Run configure_training_env on a p5 node of BUNDLE; return launcher.env as a job's shell reads it."""
    node = make_node(tmp_path, bundle, cluster_env=CLUSTER_ENV)
    result = node.run("configure_training_env")
    assert result.returncode == 0, result.stderr
    path = node.root / "etc/kiln/launcher.env"
    script = f"set -a; source {shlex.quote(str(path))}; env -0"
    shown = subprocess.run(["bash", "-c", script], env={}, capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in shown.split("\0") if item.startswith("KILN_"))


@pytest.mark.parametrize(("lustre", "expected"), [(True, CLUSTER_ENV["KILN_MOUNT_POINT"]), (False, None)])
def test_launcher_env_names_the_lustre_mount_only_where_there_is_one(tmp_path, lustre, expected):
    bundle = render_bundle(pcs_config(lustre=lustre), tmp_path / "bundle").directory
    assert launcher_env(tmp_path / "node", bundle).get("KILN_LUSTRE_MOUNT") == expected
