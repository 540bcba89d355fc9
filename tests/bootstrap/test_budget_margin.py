"""The boot budget's margin: a node whose estimated setup fits its platform's deadline but leaves less than BOOT_MARGIN
of it is boot-ready with one warning that recommends a bake; past a fixed deadline a group that scales from zero is
still refused. Where kiln sets the deadline itself (ParallelCluster's timeouts) the margin always holds."""

from __future__ import annotations

import math

import pytest

from kiln.bootstrap.budget import (
    BOOT_MARGIN,
    PLATFORM_SECONDS,
    BootWork,
    StepWork,
    deadline,
    deadline_seconds,
    tight_budget,
)
from kiln.catalog.platforms import service_fact
from kiln.cli.main import main
from kiln.node_config.judge import load_and_judge
from tests.support.paths import ROOT

PCS_SECONDS = service_fact("pcs", "resume_timeout_seconds").value


def _busy(total_seconds: int) -> BootWork:
    """A node whose whole setup, the platform's own boot included, takes TOTAL_SECONDS."""
    steps = (StepWork(step="install_x", work="install", seconds=total_seconds - PLATFORM_SECONDS),)
    return BootWork(instance_type="p5.48xlarge", steps=steps)


BAKED = _busy(PLATFORM_SECONDS + 360)


def test_the_margin_is_a_fifth_of_pcs_thirty_minutes() -> None:
    assert BOOT_MARGIN == 0.2 and PCS_SECONDS == 1800
    assert math.ceil(PCS_SECONDS * BOOT_MARGIN) == 360


@pytest.mark.parametrize(
    ("total", "tight"),
    [(1200, False), (1440, False), (1441, True), (1560, True), (1800, True), (2100, True)],
    ids=["20 min", "24 min: the margin exactly", "just inside", "26 min", "30 min", "past it: static nodes"],
)
def test_a_fixed_deadline_warns_inside_its_margin(total: int, tight: bool) -> None:
    limit = deadline("pcs", "worker")
    line = tight_budget("gpu", _busy(total), limit, baked=BAKED)
    assert (line is not None) == tight
    minutes = math.ceil(total / 60)
    if line and total <= PCS_SECONDS:
        assert line.startswith(
            f"boot budget tight: gpu nodes (p5.48xlarge) take ~{minutes} of the 30 min PCS's ResumeTimeout gives "
            "them by kiln's estimate, inside the 6-min margin (20%) kiln keeps for mirror speed and instance boot time"
        )
    if line and total > PCS_SECONDS:
        assert line.startswith(
            f"boot budget tight: gpu nodes (p5.48xlarge) take ~{minutes} min by kiln's estimate, past the 30 min "
            "PCS's ResumeTimeout gives them and the 6-min margin (20%)"
        )
    if line:
        assert line.endswith(
            "bake the install steps into the image (compute.image.bake: true; `kiln ami build --spec SPEC` bakes "
            "again), and they boot in ~11 min"
        )
        assert "\n" not in line


def test_a_baked_image_inside_the_margin_is_told_to_move_work_off_the_boot() -> None:
    work = _busy(1700)
    line = tight_budget("gpu", work, deadline("pcs", "worker"), baked=work)
    assert line is not None and line.endswith(
        "on a baked image already: move work off the node's boot (bootstrap.steps)"
    )
    assert "compute.image.bake" not in line


def test_no_deadline_no_warning() -> None:
    assert tight_budget("gpu", _busy(3000), deadline("eks", "worker"), baked=BAKED) is None


@pytest.mark.parametrize("role", ["controller", "worker"])
def test_a_deadline_kiln_sets_always_leaves_the_margin(role: str) -> None:
    """ParallelCluster's bootstrap timeouts: kiln sets them from the estimate with headroom, so every estimate, however
    long, leaves the margin of the timeout kiln writes."""
    limit = deadline("parallelcluster", role)
    assert limit is not None and limit.settable
    for total in range(PLATFORM_SECONDS, 6 * 3600, 30):
        work = _busy(total)
        assert deadline_seconds(work, limit) - work.seconds >= deadline_seconds(work, limit) * BOOT_MARGIN, total
        assert tight_budget("p5", work, limit, baked=BAKED) is None, total


def test_the_p5_pcs_example_is_warned_with_a_bake_and_stays_boot_ready() -> None:
    """Its static p5 group's setup is estimated at 26 of PCS's 30 minutes."""
    _, readiness = load_and_judge(str(ROOT / "examples" / "p5-pcs.yaml"))
    assert readiness.ready and readiness.over_budget == ()
    [warning] = readiness.tight_budget
    assert warning.startswith("boot budget tight: gpu nodes (p5.48xlarge) take ~26 of the 30 min")
    assert "compute.image.bake: true" in warning


def test_the_baked_example_leaves_the_margin() -> None:
    _, readiness = load_and_judge(str(ROOT / "examples" / "p5-pcs-baked.yaml"))
    assert readiness.tight_budget == ()


def test_validate_prints_the_warning_in_one_line_and_exits_zero(capsys: pytest.CaptureFixture) -> None:
    path = str(ROOT / "examples" / "p5-pcs.yaml")
    assert main(["validate", path]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{path}: ok (pcs; ") and "boot-ready" in captured.out.splitlines()[0]
    [warning] = [line for line in captured.err.splitlines() if "boot budget tight" in line]
    assert warning.startswith(f"{path}: boot budget tight: gpu nodes (p5.48xlarge)")
    assert "`kiln ami build --spec SPEC`" in warning
