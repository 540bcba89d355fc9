"""systemd's own reading of the units a bootstrap writes under a node's root: `systemd-analyze verify` there, with
the targets and the programs the unit names laid out so that only the unit itself can fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# Skips a test where systemd is not installed (the Makefile's system-deps install it: package systemd).
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def verify_unit(root: Path, unit: str, *, targets: tuple[str, ...], programs: tuple[str, ...]) -> str:
    """Lay out TARGETS (the targets UNIT's dependencies name) and PROGRAMS (the absolute paths its Exec lines run)
    under ROOT, run `systemd-analyze verify` on UNIT there, fail on any error, and return what it printed."""
    folder = root / "usr/lib/systemd/system"
    folder.mkdir(parents=True, exist_ok=True)
    for name in targets:
        (folder / f"{name}.target").write_text(f"[Unit]\nDescription={name}\n")
    for program in programs:
        path = root / program.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    result = subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", unit], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stderr
