"""The smoke model and its data: data a pure function of (seed, step, rank); the job runs without a launcher."""

from __future__ import annotations

import pytest
import torch

from kiln.launcher import smoke
from kiln.launcher.model import GPTConfig, TinyGPT, synthetic_batch

CONFIG = GPTConfig(seq_len=16, d_model=32, n_heads=4, n_layers=1)


def test_data_is_a_pure_function_of_seed_step_rank():
    first = synthetic_batch(CONFIG, seed=0, step=7, rank=1, batch_size=4)
    again = synthetic_batch(CONFIG, seed=0, step=7, rank=1, batch_size=4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    for other in ({"step": 8, "rank": 1}, {"step": 7, "rank": 0}):
        changed = synthetic_batch(CONFIG, seed=0, batch_size=4, **other)
        assert not torch.equal(first[0], changed[0])


def test_targets_are_the_inputs_shifted_and_mostly_follow_the_permutation():
    inputs, targets = synthetic_batch(CONFIG, seed=3, step=1, rank=0, batch_size=64)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    permutation = torch.randperm(CONFIG.vocab_size, generator=torch.Generator().manual_seed(3))
    follows = (permutation[inputs] == targets).float().mean().item()
    # 10% noise; a few random draws land on the permuted token anyway.
    assert 0.85 < follows < 0.95


def test_model_shapes_and_validation():
    model = TinyGPT(CONFIG)
    inputs, _ = synthetic_batch(CONFIG, seed=0, step=1, rank=0, batch_size=2)
    assert model(inputs).shape == (2, CONFIG.seq_len, CONFIG.vocab_size)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        TinyGPT(GPTConfig(d_model=30, n_heads=4))


def test_smoke_runs_alone_without_a_launcher(capsys):
    assert smoke.main(["--steps", "2", "--d-model", "32", "--layers", "1", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "KILN_JOB_ID is not set, so no checkpoints" in out
    assert "ddp over 1 rank(s) on cpu" in out
    assert "smoke: done, final loss" in out


def test_smoke_rejects_bad_arguments(capsys):
    assert smoke.main(["--steps", "x"]) == 2
    assert capsys.readouterr().err.startswith("kiln-launch: error: smoke: argument --steps")


def test_smoke_resumes_and_refuses_a_checkpoint_of_another_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_JOB_ID", "alone")
    small = ["--d-model", "32", "--layers", "1", "--seq-len", "16", "--checkpoint-every", "1"]
    assert smoke.main(["--steps", "2", *small]) == 0
    assert smoke.main(["--steps", "3", *small]) == 0
    assert "smoke: resumed from step 2" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="use another --job-id"):
        smoke.main(["--steps", "4", "--d-model", "64", "--layers", "1", "--seq-len", "16"])
