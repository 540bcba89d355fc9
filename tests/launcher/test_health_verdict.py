"""A node that fails its scheduled health check while a job runs there: the check leaves its verdict, and the job's
kiln-launch ends the run so the job requeues without the node (kiln.launcher.health_verdict, kiln.launcher.watchdog)."""

from __future__ import annotations

from pathlib import Path

from kiln.launcher import health_verdict
from kiln.launcher.health_verdict import HealthVerdict, VerdictWatch
from kiln.launcher.watchdog import EXIT_HUNG, Context, Settings, Watchdog
from tests.support.fake_scontrol import fake_scontrol

T0 = 2_000_000.0


def _verdict(node: str = "node2", *, healthy: bool, at: float) -> HealthVerdict:
    failures = () if healthy else ("container-space: /p/tmp: 0.0 GiB free, below the floor of 1 GiB",)
    return HealthVerdict(node=node, healthy=healthy, failures=failures, checked_at=at, drain="drained node node2")


def _watchdog(tmp_path: Path, environ: dict[str, str], clock) -> tuple[Watchdog, list[str]]:
    beats = tmp_path / "beats"
    beats.mkdir(exist_ok=True)
    context = Context(
        heartbeat_dir=beats,
        flight_recorder_dir=tmp_path / "fr",
        node="node2",
        slurm_job_id="77",
        health_verdict=health_verdict.verdict_path(tmp_path / "root", "node2"),
    )
    stopped: list[str] = []
    watch = Watchdog(
        context,
        Settings(factor=10, min_s=300),
        environ=environ,
        clock=clock,
        sleep=lambda seconds: None,
        stop_run=lambda: stopped.append("stop"),
    )
    return watch, stopped


def test_a_verdict_is_written_atomically_for_every_user_and_read_back(tmp_path):
    path = health_verdict.write(tmp_path, _verdict(healthy=False, at=T0))
    assert path == tmp_path / "run/kiln/health/node2.json"
    assert path.stat().st_mode & 0o777 == 0o644
    assert health_verdict.read(path) == _verdict(healthy=False, at=T0)
    assert [p.name for p in path.parent.iterdir()] == ["node2.json"]
    path.write_text("{not json")
    assert health_verdict.read(path) is None


def test_the_watch_reads_the_file_only_when_it_changed(tmp_path):
    path = health_verdict.verdict_path(tmp_path, "node2")
    watch = VerdictWatch(path)
    assert watch.poll() is None  # no check has run yet
    health_verdict.write(tmp_path, _verdict(healthy=True, at=T0))
    assert watch.poll() == _verdict(healthy=True, at=T0)
    assert watch.poll() is None
    health_verdict.write(tmp_path, _verdict(healthy=False, at=T0 + 60))
    assert watch.poll().healthy is False


def test_a_failed_check_after_the_launch_ends_the_run_requeues_and_names_the_failure(tmp_path, capsys):
    environ, log = fake_scontrol(tmp_path / "fake")
    now = [T0]
    watch, stopped = _watchdog(tmp_path, environ, lambda: now[0])
    health_verdict.write(tmp_path / "root", _verdict(healthy=True, at=T0 + 5))
    now[0] = T0 + 6
    assert watch.poll() is False
    health_verdict.write(tmp_path / "root", _verdict(healthy=False, at=T0 + 65))
    now[0] = T0 + 66
    assert watch.poll() is True
    assert watch.verdict.status == "node_unhealthy" and watch.verdict.exit_code == EXIT_HUNG
    assert watch.verdict.details["requeue"] == "requeued"
    assert log.read_text().splitlines()[-1] == "requeue 77"
    assert stopped == ["stop"]
    line = capsys.readouterr().err.strip()
    assert line == (
        "kiln-launch: unhealthy: node2 failed its health check (container-space: /p/tmp: 0.0 GiB free, below the "
        "floor of 1 GiB); ending the run so the job requeues without it"
    )


def test_a_failed_check_from_before_the_launch_is_the_nodes_past(tmp_path):
    environ, log = fake_scontrol(tmp_path / "fake")
    health_verdict.write(tmp_path / "root", _verdict(healthy=False, at=T0 - 30))
    watch, stopped = _watchdog(tmp_path, environ, lambda: T0)
    assert watch.poll() is False
    assert watch.verdict is None and stopped == [] and not log.exists()


def test_a_job_that_may_not_requeue_still_stops_but_is_not_requeued(tmp_path):
    environ, log = fake_scontrol(tmp_path / "fake", requeue="0")
    now = [T0]
    watch, stopped = _watchdog(tmp_path, environ, lambda: now[0])
    health_verdict.write(tmp_path / "root", _verdict(healthy=False, at=T0 + 1))
    now[0] = T0 + 2
    assert watch.poll() is True
    assert watch.verdict.details["auto_resume"]["on"] is False
    assert "requeue" not in watch.verdict.details and "requeue 77" not in log.read_text()
    assert stopped == ["stop"]
