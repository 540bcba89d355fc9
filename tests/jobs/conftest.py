"""What every test of `kiln job submit` starts from: kiln's launcher wheel, built once, and a training script."""

from pathlib import Path

import pytest

from kiln.jobs.pytorchjob import launcher_wheel
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
# An image reference a job names; no test pulls it.
IMAGE = "public.ecr.aws/example/pytorch:2.13"


@pytest.fixture(scope="session")
def wheel() -> bytes:
    return launcher_wheel()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("import torch\nprint('training')\n")
    return path
