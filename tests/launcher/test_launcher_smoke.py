"""The smoke job through the launcher: its loss falls, a killed rank restarts and resumes, FSDP resumes.

Tolerance: the data are a pure function of (seed, step, rank), the learning
rate a pure function of the step, and checkpoints carry model and optimizer
state exactly (float32, no compression). gloo sums the two ranks' gradients
(a + b == b + a) and torchrun pins one OpenMP thread per worker, so CPU
kernels run in the same order: a resumed run repeats the uninterrupted one bit
for bit. RESUME_TOLERANCE (1e-6 relative) only leaves room for last-bit
differences should a kernel pick another order; a resume that lost or
repeated an optimizer step moves the loss by more than 1e-2 here.
"""

from __future__ import annotations

import json

import pytest

from tests.support.launcher import clean_env, only_record, run_launcher

# Each test starts several processes that import torch.
pytestmark = pytest.mark.slow

RESUME_TOLERANCE = 1e-6
# FSDP reduce-scatters where DDP all-reduces: same maths, maybe another summation order
# (on CPU with gloo the two agree bit for bit today; 1e-5 leaves room for a reordering).
FSDP_TOLERANCE = 1e-5
STEPS = 30


@pytest.fixture(scope="module")
def reference(tmp_path_factory, refused_endpoint):
    """Run the issue's own command once: `kiln-launch --nproc-per-node 2 smoke --steps 30`."""
    root = tmp_path_factory.mktemp("reference")
    env = clean_env(KILN_CHECKPOINT_DIR=str(root), KILN_IMDS_ENDPOINT=refused_endpoint, KILN_JOB_ID="reference")
    done = run_launcher(["--nproc-per-node", "2", "smoke", "--steps", str(STEPS)], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        "stdout": done.stdout,
        "summary": json.loads((root / "reference" / "smoke-summary.json").read_text()),
        "record": only_record(root / "reference"),
    }


def losses(summary: dict) -> dict[int, float]:
    return {int(step): loss for step, loss in summary["losses"].items()}


def test_smoke_loss_falls_on_cpu(reference):
    summary = reference["summary"]
    curve = losses(summary)
    assert sorted(curve) == list(range(1, STEPS + 1))
    first, last_five = curve[1], [curve[s] for s in range(STEPS - 4, STEPS + 1)]
    assert max(last_five) < 0.75 * first
    assert (summary["world_size"], summary["strategy"], summary["device"]) == (2, "ddp", "cpu")
    assert 100_000 < summary["parameters"] < 1_000_000
    # Each step prints loss, step time and tokens/s.
    assert "step    30/30  loss " in reference["stdout"]
    assert "tokens/s" in reference["stdout"]
    assert "step_time" in reference["stdout"]


def test_smoke_run_record(reference):
    record = reference["record"]
    assert record["status"] == "succeeded"
    assert record["exit_code"] == 0
    assert record["environment"]["scheduler"] == "plain"
    assert record["environment"]["nproc_per_node"] == 2
    assert record["torchrun_args"][-4:] == ["--module", "kiln.launcher.smoke", "--steps", str(STEPS)]
    assert "--rdzv-backend=c10d" in record["torchrun_args"]
    assert {"python", "torch", "cuda", "nccl", "kiln"} <= set(record["versions"])
    assert record["timings"]["total_s"] >= record["timings"]["run_s"] > 0


def test_killed_rank_restarts_and_resumes(tmp_path, reference):
    every, kill_at = 5, 19
    done = run_launcher(
        ["--nproc-per-node", "2", "--job-id", "killed", "smoke", "--steps", str(STEPS)]
        + ["--checkpoint-every", str(every), "--kill-at-step", str(kill_at)]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 1 kills itself at step 19" in done.stdout
    summary = json.loads((tmp_path / "checkpoints" / "killed" / "smoke-summary.json").read_text())
    assert summary["attempt"] == 1
    # Rank 1 reached step 19, so both ranks finished step 18; the last checkpoint before it is 15.
    assert summary["resumed_from"] == 15
    lost = (kill_at - 1) - summary["resumed_from"]
    assert 0 <= lost <= every
    resumed, uninterrupted = losses(summary), losses(reference["summary"])
    assert sorted(resumed) == list(range(16, STEPS + 1))
    for step, loss in resumed.items():
        assert loss == pytest.approx(uninterrupted[step], rel=RESUME_TOLERANCE), step
    assert only_record(tmp_path / "checkpoints" / "killed")["status"] == "succeeded"


def test_fsdp_resumes_across_launches(tmp_path, reference):
    # A requeued job: same job id, a second launch carries on from the first one's checkpoint.
    first = run_launcher(
        ["--nproc-per-node", "2", "--job-id", "fsdp", "smoke", "--strategy", "fsdp", "--steps", "6"]
        + ["--checkpoint-every", "3"]
    )
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_launcher(
        ["--nproc-per-node", "2", "--job-id", "fsdp", "smoke", "--strategy", "fsdp", "--steps", "9"]
        + ["--checkpoint-every", "3"]
    )
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "checkpoints" / "fsdp" / "smoke-summary.json").read_text())
    assert (summary["strategy"], summary["resumed_from"], summary["attempt"]) == ("fsdp", 6, 0)
    uninterrupted = losses(reference["summary"])
    for step, loss in losses(summary).items():
        assert loss == pytest.approx(uninterrupted[step], rel=FSDP_TOLERANCE), step
