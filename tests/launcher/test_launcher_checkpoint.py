"""The checkpoint API: atomic saves, a manifest, keep-N, and loading the newest complete checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from kiln.launcher import checkpoint as ckpt_module
from kiln.launcher.checkpoint import Checkpointer


def state(step: int) -> dict:
    return {"model": {"w": torch.full((4,), float(step))}, "step": step}


def test_save_and_load_round_trip(tmp_path):
    ckpt = Checkpointer(tmp_path / "job", every=5)
    directory = ckpt.save(5, state(5))
    assert directory == tmp_path / "job" / "step-00000005"
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["step"] == 5
    assert manifest["files"] == {"state.pt": (directory / "state.pt").stat().st_size}
    resumed = ckpt.load_latest()
    assert resumed.step == 5
    assert torch.equal(resumed.state["model"]["w"], torch.full((4,), 5.0))
    # No temporary files survive a save.
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", "state.pt"]


def test_nothing_to_resume(tmp_path):
    assert Checkpointer(tmp_path / "never-written", every=1).load_latest() is None


def test_due_every_k_steps(tmp_path):
    ckpt = Checkpointer(tmp_path, every=5)
    assert [s for s in range(1, 16) if ckpt.due(s)] == [5, 10, 15]


def test_newest_complete_wins_over_newer_partial_saves(tmp_path):
    ckpt = Checkpointer(tmp_path, every=1, keep=10)
    for step in (1, 2, 3):
        ckpt.save(step, state(step))
    # A crash after state.pt but before the manifest:
    (tmp_path / "step-00000003" / "manifest.json").unlink()
    # A manifest whose file was truncated afterwards:
    ckpt.save(4, state(4))
    state_file = tmp_path / "step-00000004" / "state.pt"
    state_file.write_bytes(state_file.read_bytes()[:10])
    # A manifest that is not JSON:
    ckpt.save(5, state(5))
    (tmp_path / "step-00000005" / "manifest.json").write_text("{trunc")
    assert [c.step for c in ckpt.complete()] == [1, 2]
    assert ckpt.load_latest().step == 2


def test_crash_mid_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path, every=1)
    ckpt.save(1, state(1))

    def dies_half_way(obj, handle):
        handle.write(b"partial bytes")
        raise OSError("disk vanished")

    monkeypatch.setattr(ckpt_module.torch, "save", dies_half_way)
    with pytest.raises(OSError, match="disk vanished"):
        ckpt.save(2, state(2))
    assert not (tmp_path / "step-00000002" / "state.pt").exists()
    assert not (tmp_path / "step-00000002" / "manifest.json").exists()
    assert ckpt.latest().step == 1


def test_keeps_the_newest_n_and_drops_abandoned_partials(tmp_path):
    ckpt = Checkpointer(tmp_path, every=1, keep=2)
    (tmp_path / "step-00000001").mkdir(parents=True)
    (tmp_path / "step-00000001" / ".state.pt.tmp-99").write_bytes(b"abandoned")
    for step in (2, 3, 4):
        ckpt.save(step, state(step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000004"]


def test_other_ranks_do_not_write(tmp_path):
    assert Checkpointer(tmp_path, every=1, rank=1).save(1, state(1)) is None
    assert list(tmp_path.iterdir()) == []


def test_from_env_uses_checkpoint_dir_and_job_id(tmp_path):
    env = {"KILN_CHECKPOINT_DIR": str(tmp_path), "KILN_JOB_ID": "8812", "RANK": "3"}
    ckpt = Checkpointer.from_env(every=7, environ=env)
    assert (ckpt.job_dir, ckpt.every, ckpt.rank) == (tmp_path / "8812", 7, 3)
    default = Checkpointer.from_env(every=1, environ={"KILN_JOB_ID": "9"})
    assert str(default.job_dir) == "/fsx/checkpoints/9"
    with pytest.raises(ValueError, match="KILN_JOB_ID"):
        Checkpointer.from_env(every=1, environ={})


@pytest.mark.parametrize(("every", "keep"), [(0, 1), (1, 0)])
def test_rejects_nonsense_intervals(tmp_path, every, keep):
    with pytest.raises(ValueError):
        Checkpointer(tmp_path, every=every, keep=keep)


def test_loads_only_plain_data(tmp_path):
    ckpt = Checkpointer(tmp_path, every=1)
    ckpt.save(1, {"callable": print})
    # weights_only loading refuses arbitrary pickled objects from a shared file system.
    with pytest.raises(Exception, match="[Ww]eights only|Unsupported"):
        ckpt.load_latest()
