"""What `kiln validate` and `kiln report` say about resilience on each platform: which checks run, what replaces a
node and how jobs resume, from platforms.json's sentences (kiln.catalog.resilience)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kiln.catalog.platforms import SOURCE
from kiln.catalog.resilience import FACTS, resilience_summary
from kiln.cli.main import main
from kiln.contracts.backends import PLATFORMS
from kiln.review.report import resilience_lines
from kiln.spec.models import Resilience
from tests.support.specs import MINIMAL_SPEC


def test_every_platform_has_its_sentences_with_a_source() -> None:
    assert set(FACTS) == {platform.name for platform in PLATFORMS}
    for name in FACTS:
        summary = resilience_summary(name, Resilience())
        assert summary.checks and summary.replacement and summary.resume
        assert SOURCE.match(summary.source), summary.source


@pytest.mark.parametrize("platform", ["pcs", "parallelcluster", "hyperpod"])
def test_the_slurm_check_names_its_interval_and_resume_follows_auto_resume(platform: str) -> None:
    on = resilience_summary(platform, Resilience(health_check_interval_s=900))
    assert "every 900 s" in on.checks and "kiln-launch health" in on.checks
    assert "SBATCH_REQUEUE" in on.resume
    off = resilience_summary(platform, Resilience(health_checks=False, auto_resume=False))
    assert "kiln-launch health" not in off.checks and "SBATCH_NO_REQUEUE" in off.resume


def test_hyperpod_says_what_its_node_recovery_and_deep_checks_do() -> None:
    automatic = resilience_summary("hyperpod", Resilience())
    assert "NodeRecovery Automatic" in automatic.replacement and "Action:Replace" in automatic.replacement
    assert "deep health checks" in automatic.checks and "--auto-resume=1" in automatic.resume
    plain = resilience_summary("hyperpod", Resilience(node_recovery="none", deep_health_checks=False))
    assert "NodeRecovery None" in plain.replacement and "deep health checks" not in plain.checks


def test_eks_says_node_repair_or_none() -> None:
    assert "node repair" in resilience_summary("eks", Resilience()).replacement
    assert resilience_summary("eks", Resilience(node_recovery="none")).replacement.startswith("no node repair")


def test_parallelcluster_names_its_gpu_check_and_clustermgtd() -> None:
    summary = resilience_summary("parallelcluster", Resilience())
    assert "HealthCheckProgram" in summary.checks and "GPU health check" in summary.checks
    assert "clustermgtd" in summary.replacement


def test_validate_prints_one_resilience_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["resilience"] = {"health_check_interval_s": 120, "auto_resume": False}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["validate", "--accept-unready", str(path)]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  resilience: ")]
    assert line.startswith(
        "  resilience: checks: kiln-launch health on every compute node from a systemd timer every 120 s"
    )
    assert "; replacement: PCS's own" in line and line.endswith("(SBATCH_NO_REQUEUE)")


def test_the_reports_section_names_the_spec_on_each_line() -> None:
    lines = resilience_lines("c.yaml", "parallelcluster", Resilience())
    assert [line.split(": ", 2)[1] for line in lines] == ["checks", "replacement", "jobs", "source"]
    assert all(line.startswith("c.yaml: ") for line in lines)
