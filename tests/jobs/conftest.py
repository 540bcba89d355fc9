"""What every test of `kiln job submit` starts from: kiln's launcher wheel, built once, and a training script."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.jobs.pytorchjob import launcher_wheel


@pytest.fixture(scope="session")
def wheel() -> bytes:
    return launcher_wheel()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("import torch\nprint('training')\n")
    return path
