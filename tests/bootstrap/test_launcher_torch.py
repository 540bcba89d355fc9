"""install_launcher with a pinned torch: torch and numpy from PyPI into the launcher venv, once."""

from __future__ import annotations

import dataclasses

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import PINS, pcs_config
from tests.support.node_root import make_node

# Stands in for the venv's python: records its arguments; installing the wheel creates kiln-launch.
_FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"${0%/*}/python-calls.log"
if [[ "$*" == *"--no-deps"* ]]; then
  printf '#!/bin/sh\\n' >"${0%/*}/kiln-launch"
  chmod +x "${0%/*}/kiln-launch"
fi
"""


def test_a_pinned_torch_is_installed_with_numpy_once(tmp_path):
    config = pcs_config(launcher_torch=True, software=dataclasses.replace(PINS, torch="2.13.0"))
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle)
    venv_bin = node.root / "opt/kiln/venv/bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(_FAKE_PYTHON)
    (venv_bin / "python").chmod(0o755)

    first = node.run("install_launcher")
    assert first.returncode == 0, first.stderr
    calls = (venv_bin / "python-calls.log").read_text().splitlines()
    # Without numpy, every `import torch` in a job warns "Failed to initialize NumPy".
    assert calls[1:] == ["-m pip install --quiet torch==2.13.0 numpy"], calls
    assert (node.root / "usr/local/bin/kiln-launch").resolve() == venv_bin / "kiln-launch"

    second = node.run("install_launcher")
    assert second.returncode == 0, second.stderr
    assert (venv_bin / "python-calls.log").read_text().splitlines() == calls
