"""The smoke job's own fault (--kill-at-step) strikes once per job: not again after torchrun restarts the workers,
nor after Slurm requeues the job (SLURM_RESTART_COUNT), when torchrun's count starts from 0 again."""

from __future__ import annotations

import pytest
import torch

from kiln.launcher.smoke import _first_attempt, _Process


@pytest.mark.parametrize(
    ("attempt", "requeues", "first"),
    [(0, 0, True), (1, 0, False), (0, 1, False), (2, 3, False)],
)
def test_only_the_very_first_attempt_is_killed(attempt, requeues, first):
    proc = _Process(distributed=False, rank=0, world=1, attempt=attempt, requeues=requeues, device=torch.device("cpu"))
    assert _first_attempt(proc) is first
