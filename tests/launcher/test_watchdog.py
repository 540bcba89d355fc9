"""The hang watchdog's judgement and actions: fake heartbeat files, a fake clock, a fake /proc and a fake scontrol."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kiln.launcher import watchdog
from kiln.launcher.drain_request import request_dir, take
from kiln.launcher.errors import UsageError
from kiln.launcher.heartbeat import DUMP_REQUEST, beat_file, read_json, write_json
from kiln.launcher.launch import heartbeat_dir
from kiln.launcher.watchdog import EXIT_HUNG, EXIT_TCP_FALLBACK, Context, Judge, Settings, Watchdog
from tests.support.fake_scontrol import fake_scontrol
from tests.support.fake_slurm_state import fake_slurm, job_record

T0 = 1_000_000.0


def beat(directory: Path, rank: int, *, step: int | None, step_at: float | None, alive_at: float, **extra) -> dict:
    """Write rank RANK's heartbeat file the way kiln.launcher.heartbeat does; return its data."""
    data = {
        "rank": rank,
        "local_rank": rank,
        "host": "node2",
        "pid": 1000 + rank,
        "attempt": 0,
        "step": step,
        "step_at": step_at,
        "alive_at": alive_at,
        "median_step_s": 2.0,
        "transport": None,
        "dumps": [],
    } | extra
    write_json(beat_file(directory, data["attempt"], rank), data)
    return data


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def beats_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "heartbeats"
    directory.mkdir()
    return directory


def judge_at(directory: Path, now: float, states: dict[int, str | None], limits: Settings, judge: Judge | None = None):
    judge = judge or Judge(limits, started_at=T0)
    return judge, judge.observe(watchdog.read_beats(directory), now, lambda pid: states.get(pid - 1000))


def test_limit_is_factor_times_median_but_never_below_the_minimum():
    limits = Settings(factor=10, min_s=300)
    assert limits.limit(None) == 300
    assert limits.limit(2.0) == 300
    assert limits.limit(60.0) == 600


def test_no_hang_within_the_limit_and_a_hang_past_it_names_the_stopped_rank(beats_dir):
    limits = Settings(factor=10, min_s=30)
    judge = Judge(limits, started_at=T0)
    for rank in range(4):
        beat(beats_dir, rank, step=40, step_at=T0 + 10, alive_at=T0 + 10)
    states = {0: "S", 1: "S", 2: "S", 3: "S"}
    judge, first = judge_at(beats_dir, T0 + 10, states, limits, judge)
    assert first is None  # the first look only starts the attempt's clock
    beat(beats_dir, 3, step=40, step_at=T0 + 10, alive_at=T0 + 11)
    _, early = judge_at(beats_dir, T0 + 39, states | {3: "T"}, limits, judge)
    assert early is None
    for rank in range(3):  # the waiting ranks keep beating
        beat(beats_dir, rank, step=40, step_at=T0 + 10, alive_at=T0 + 40)
    _, hang = judge_at(beats_dir, T0 + 41, states | {3: "T"}, limits, judge)
    assert hang is not None and hang.limit_s == 30 and hang.stall_s == pytest.approx(31)
    assert [(s.beat.rank, s.why) for s in hang.culprits] == [(3, "process stopped")]
    line = watchdog.describe(hang, "node2", Path("/fsx/checkpoints/j/flight-recorder"))
    assert line == (
        "rank 3 on node2 has not reached step 41 for 31 s (process stopped; last reported step 40); others wait at "
        "step 41; flight recorder in /fsx/checkpoints/j/flight-recorder"
    )


def test_a_silent_heartbeat_is_a_culprit_even_when_the_process_runs(beats_dir):
    limits = Settings(factor=2, min_s=10)
    beat(beats_dir, 0, step=7, step_at=T0, alive_at=T0 + 20)
    beat(beats_dir, 1, step=7, step_at=T0, alive_at=T0 + 2)
    judge, _ = judge_at(beats_dir, T0, {0: "S", 1: "R"}, limits)
    _, hang = judge_at(beats_dir, T0 + 20, {0: "S", 1: "R"}, limits, judge)
    assert [(s.beat.rank, s.why) for s in hang.culprits] == [(1, "no heartbeat for 18 s")]


def test_when_all_are_alive_the_ranks_at_the_lowest_step_are_blamed(beats_dir):
    limits = Settings(factor=2, min_s=10)
    beat(beats_dir, 0, step=12, step_at=T0, alive_at=T0 + 20)
    beat(beats_dir, 1, step=11, step_at=T0 - 3, alive_at=T0 + 20)
    beat(beats_dir, 2, step=12, step_at=T0, alive_at=T0 + 20)
    judge, _ = judge_at(beats_dir, T0, {0: "S", 1: "R", 2: "S"}, limits)
    _, hang = judge_at(beats_dir, T0 + 20, {0: "S", 1: "R", 2: "S"}, limits, judge)
    assert [(s.beat.rank, s.why) for s in hang.culprits] == [(1, "behind the others")]


def test_all_alive_at_one_step_means_the_culprit_is_elsewhere(beats_dir):
    limits = Settings(factor=2, min_s=10)
    for rank in range(2):
        beat(beats_dir, rank, step=5, step_at=T0, alive_at=T0 + 20)
    judge, _ = judge_at(beats_dir, T0, {0: "S", 1: "S"}, limits)
    _, hang = judge_at(beats_dir, T0 + 20, {0: "S", 1: "S"}, limits, judge)
    assert hang.culprits == ()
    assert "all 2 local rank(s) are alive and wait at step 6: the culprit is on another node" in watchdog.describe(
        hang, "node1", None
    )


def test_before_the_first_step_only_the_minimum_counts(beats_dir):
    limits = Settings(factor=10, min_s=60)
    beat(beats_dir, 0, step=None, step_at=None, alive_at=T0 + 50, median_step_s=None)
    judge, _ = judge_at(beats_dir, T0, {0: "S"}, limits)
    _, early = judge_at(beats_dir, T0 + 59, {0: "S"}, limits, judge)
    assert early is None
    _, hang = judge_at(beats_dir, T0 + 61, {0: "S"}, limits, judge)
    assert hang.limit_s == 60 and hang.median_step_s is None


def test_a_new_attempt_restarts_the_clock_and_old_attempts_are_ignored(beats_dir):
    limits = Settings(factor=2, min_s=10)
    beat(beats_dir, 0, step=3, step_at=T0, alive_at=T0)
    judge, _ = judge_at(beats_dir, T0, {0: None}, limits)
    # torchrun restarted the group: the old rank's process is gone, the new one has not beaten yet.
    _, between = judge_at(beats_dir, T0 + 50, {0: None}, limits, judge)
    assert between is None
    beat(beats_dir, 0, step=None, step_at=None, alive_at=T0 + 55, attempt=1, pid=2000)
    _, fresh = judge_at(beats_dir, T0 + 55, {0: "S", 1000: "S"}, limits, judge)
    assert fresh is None and judge.attempt == 1
    _, still = judge_at(beats_dir, T0 + 64, {0: "S", 1000: "S"}, limits, judge)
    assert still is None


def test_process_state_reads_proc_stat_and_a_gone_or_zombie_process_is_none(tmp_path):
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "stat").write_text("41 (python (x) y) T 1 41 41 0 -1\n")
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (python) Z 1 42\n")
    assert watchdog.process_state(41, tmp_path) == "T"
    assert watchdog.process_state(42, tmp_path) is None
    assert watchdog.process_state(43, tmp_path) is None
    assert watchdog.process_state(os.getpid()) in ("R", "S")


def test_flags_beat_the_environment_which_beats_the_defaults():
    assert watchdog.settings({}) == Settings(factor=10, min_s=300, source="defaults")
    env = {"KILN_HANG_FACTOR": "4", "KILN_HANG_MIN_S": "120"}
    assert watchdog.settings(env) == Settings(factor=4, min_s=120, source="KILN_HANG_FACTOR, KILN_HANG_MIN_S")
    chosen = watchdog.settings(env, factor=3, min_s=None)
    assert (chosen.factor, chosen.min_s, chosen.source) == (3, 120, "--hang-factor, KILN_HANG_MIN_S")
    with pytest.raises(UsageError, match=r"^KILN_HANG_MIN_S: expected a number of at least 1 \(got 'soon'\)$"):
        watchdog.settings({"KILN_HANG_MIN_S": "soon"})
    with pytest.raises(UsageError, match="KILN_HANG_FACTOR: expected a number of at least 1"):
        watchdog.settings({"KILN_HANG_FACTOR": "0"})


def hung_watchdog(tmp_path: Path, beats_dir: Path, environ: dict[str, str], states: dict[int, str | None], **kw):
    clock = Clock()
    stops: list[str] = []
    verdicts = []
    context = Context(
        heartbeat_dir=beats_dir,
        flight_recorder_dir=tmp_path / "flight-recorder",
        node="node2",
        slurm_job_id=kw.pop("slurm_job_id", "77"),
        node_root=kw.pop("node_root", None),
    )
    dog = Watchdog(
        context,
        Settings(factor=2, min_s=10),
        environ=environ,
        clock=clock,
        sleep=clock.sleep,
        state_of=lambda pid: states.get(pid - 1000),
        stop_run=lambda: stops.append("stopped"),
        on_verdict=verdicts.append,
        dump_wait_s=1.0,
        **kw,
    )
    return dog, clock, stops, verdicts


def test_a_local_culprit_drains_this_node_requeues_the_job_and_stops_the_run(tmp_path, beats_dir, capsys):
    environ, log = fake_scontrol(tmp_path)
    for rank in range(2):
        beat(beats_dir, rank, step=40, step_at=T0, alive_at=T0 + 30)
    dog, clock, stops, verdicts = hung_watchdog(tmp_path, beats_dir, environ, {0: "S", 1: "T"})
    assert dog.poll() is False
    clock.now += 11
    assert dog.poll() is True
    assert stops == ["stopped"]
    assert dog.verdict.status == "hung" and dog.verdict.exit_code == EXIT_HUNG
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kiln-launch: hung: rank 1 on node2 has not reached step 41 for 11 s (process stopped")
    calls = log.read_text().splitlines()
    reason = f"Reason=kiln-hung: {dog.verdict.message}"[: 200 + len("Reason=") - 3]
    assert calls[0].startswith(f"update NodeName=node2 State=DRAIN {reason}")
    assert calls[1:] == ["show job 77 --oneliner", "requeue 77"]
    details = dog.verdict.details
    assert details["drain"] == "drained" and details["requeue"] == "requeued"
    assert details["auto_resume"] == {"on": True, "why": "job 77 is a batch job with Requeue=1"}
    # The live rank was asked for a dump (it wrote none here, so the line names no flight recorder).
    assert read_json(beats_dir / DUMP_REQUEST)["dir"] == str(tmp_path / "flight-recorder")
    # The record got the verdict before the requeue, and again at the end.
    assert [v.status for v in verdicts] == ["hung", "hung"]
    assert dog.summary()["verdict"]["culprits"] == [{"rank": 1, "host": "node2", "step": 40, "why": "process stopped"}]


def test_only_a_batch_job_with_requeue_on_is_requeued_by_default(tmp_path):
    refused = (False, "job 77 may not requeue")
    cases = {("1", "1"): (True, "job 77 is a batch job with Requeue=1"), ("1", "0"): refused, ("0", "1"): refused}
    for (requeue, batch), expected in cases.items():
        environ, _ = fake_scontrol(tmp_path / f"{requeue}{batch}", requeue=requeue, batch=batch)
        assert watchdog.auto_resume(environ, "77") == expected, (requeue, batch)
    assert watchdog.auto_resume({"PATH": str(tmp_path / "nowhere")}, "77") == (
        False,
        "scontrol cannot say whether the job may requeue",
    )


def test_auto_resume_off_or_a_job_that_cannot_requeue_is_not_requeued(tmp_path, beats_dir):
    environ, log = fake_scontrol(tmp_path, requeue="0")
    beat(beats_dir, 0, step=4, step_at=T0, alive_at=T0)
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, environ, {0: "T"})
    dog.poll()
    clock.now += 11
    assert dog.poll() is True
    assert log.read_text().splitlines()[1:] == ["show job 77 --oneliner"]
    assert dog.verdict.details["auto_resume"] == {"on": False, "why": "job 77 may not requeue"}
    assert "requeue" not in dog.verdict.details

    off_env, off_log = fake_scontrol(tmp_path / "off")
    off_dir = tmp_path / "off" / "beats"
    off_dir.mkdir(parents=True)
    beat(off_dir, 0, step=4, step_at=T0, alive_at=T0)
    dog, clock, _, _ = hung_watchdog(tmp_path / "off", off_dir, off_env | {"KILN_AUTO_RESUME": "0"}, {0: "T"})
    dog.poll()
    clock.now += 11
    dog.poll()
    # Drained (the culprit is here), never asked about nor requeued.
    [drained] = off_log.read_text().splitlines()
    assert drained.startswith("update NodeName=node2 State=DRAIN")
    assert dog.verdict.details["auto_resume"] == {"on": False, "why": "KILN_AUTO_RESUME=0"}


def test_a_node_whose_ranks_all_wait_does_not_drain_itself_and_waits_the_grace_period(tmp_path, beats_dir, capsys):
    environ, log = fake_scontrol(tmp_path)
    for rank in range(2):
        beat(beats_dir, rank, step=9, step_at=T0, alive_at=T0 + 1000)
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, environ, {0: "S", 1: "S"}, grace_s=45)
    dog.poll()
    clock.now += 11
    began = clock.now
    assert dog.poll() is True
    assert clock.now - began >= 45
    calls = log.read_text().splitlines()
    assert not any(call.startswith("update") for call in calls)
    assert calls == ["show job 77 --oneliner", "requeue 77"]
    assert dog.verdict.details["drain"] == "no culprit on this node: not drained"
    assert "the culprit is on another node" in capsys.readouterr().err
    assert stops == ["stopped"]


def test_outside_slurm_nothing_is_drained_or_requeued(tmp_path, beats_dir):
    environ, log = fake_scontrol(tmp_path)
    beat(beats_dir, 0, step=4, step_at=T0, alive_at=T0)
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, environ, {0: "T"}, slurm_job_id=None)
    dog.poll()
    clock.now += 11
    assert dog.poll() is True
    assert not log.exists()
    assert dog.verdict.details["drain"] == "not a Slurm job: nothing to drain"
    assert dog.verdict.details["auto_resume"] == {"on": False, "why": "not a Slurm job"}


def test_a_rank_reporting_tcp_ends_the_run_in_one_line(tmp_path, beats_dir, capsys):
    environ, log = fake_scontrol(tmp_path)
    transport = {"ok": False, "detail": "NCCL chose Socket (provider none), not EFA, on this EFA node", "evidence": []}
    beat(beats_dir, 0, step=1, step_at=T0, alive_at=T0, transport=transport)
    dog, _, stops, _ = hung_watchdog(tmp_path, beats_dir, environ, {0: "S"})
    assert dog.poll() is True
    assert (dog.verdict.status, dog.verdict.exit_code) == ("tcp_fallback", EXIT_TCP_FALLBACK)
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kiln-launch: tcp_fallback: rank(s) 0 on node2: NCCL chose Socket (provider none), not EFA")
    assert "--allow-tcp" in line
    assert stops == ["stopped"] and not log.exists()


def test_a_script_without_heartbeats_turns_the_watchdog_off_with_one_note(tmp_path, beats_dir, capsys):
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, {}, {})
    assert dog.poll() is False
    clock.now += watchdog.FIRST_BEAT_S + 1
    assert dog.poll() is False
    clock.now += 1000
    assert dog.poll() is False
    assert dog.status == "off: the script writes no heartbeat"
    [note] = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("kiln-launch: note: no rank reports its steps")
    assert stops == []


def test_a_run_that_ends_during_the_grace_period_is_hung_without_a_requeue_or_a_signal(tmp_path, beats_dir):
    environ, log = fake_scontrol(tmp_path)
    for rank in range(2):
        beat(beats_dir, rank, step=9, step_at=T0, alive_at=T0 + 1000)
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, environ, {0: "S", 1: "S"}, grace_s=45)

    def ended_meanwhile(seconds: float) -> None:
        clock.sleep(seconds)
        if seconds == 45:
            dog.stop()  # what kiln-launch does when torchrun returns (here: the culprit node's requeue ended it)

    dog.sleep = ended_meanwhile
    dog.poll()
    clock.now += 11
    assert dog.poll() is True
    assert not log.exists() and stops == []
    assert dog.verdict.status == "hung"
    assert dog.verdict.details["grace"] == "the run ended while this node waited"


def test_the_heartbeat_directory_is_node_local_per_job_and_restart_with_a_fallback(tmp_path):
    made = heartbeat_dir("llm", {"TMPDIR": str(tmp_path), "SLURM_RESTART_COUNT": "2"})
    assert made.parent == tmp_path and made.name.startswith("kiln-heartbeat-llm-r2-")
    fallback = heartbeat_dir("llm", {"TMPDIR": str(tmp_path / "missing")})
    try:
        assert fallback.parent == Path(tempfile.gettempdir()) and fallback.name.startswith("kiln-heartbeat-llm-r0-")
    finally:
        fallback.rmdir()


def test_a_user_who_may_not_drain_hands_the_drain_to_the_nodes_root_side(tmp_path, beats_dir):
    root = tmp_path / "root"
    request_dir(root).mkdir(parents=True)
    slurm = fake_slurm(tmp_path, jobs={"77": job_record("77")}, deny_update=True)
    for rank in range(2):
        beat(beats_dir, rank, step=40, step_at=T0, alive_at=T0 + 30)
    dog, clock, stops, _ = hung_watchdog(tmp_path, beats_dir, slurm.environ, {0: "S", 1: "T"}, node_root=root)

    def root_side() -> None:
        # The path unit: as soon as a request is there, root (who may drain) takes it.
        while not any(request_dir(root).iterdir()):
            time.sleep(0.05)
        slurm.write({**slurm.read(), "deny_update": False})
        take(root, ["node2"], slurm.environ)

    helper = threading.Thread(target=root_side, daemon=True)
    helper.start()
    assert dog.poll() is False
    clock.now += 11
    assert dog.poll() is True
    helper.join(timeout=10)
    drained = dog.verdict.details["drain"]
    assert drained.startswith("the node's hand-off: drained node2: kiln-hung: job 77 (uid 1001): rank 1 on node2 has")
    assert slurm.node("node2")["state"] == "MIXED+DRAIN"
    assert dog.verdict.details["requeue"] == "requeued" and stops == ["stopped"]


def test_without_a_hand_off_the_refusal_is_said(tmp_path, beats_dir):
    slurm = fake_slurm(tmp_path, jobs={"77": job_record("77")}, deny_update=True)
    for rank in range(2):
        beat(beats_dir, rank, step=40, step_at=T0, alive_at=T0 + 30)
    dog, clock, _, _ = hung_watchdog(tmp_path, beats_dir, slurm.environ, {1: "T"}, node_root=tmp_path / "bare")
    dog.poll()
    clock.now += 11
    assert dog.poll() is True
    assert dog.verdict.details["drain"] == (
        "scontrol update failed: slurm_update error: Invalid user id; "
        f"no drain hand-off on this node ({request_dir(tmp_path / 'bare')} is missing)"
    )


def test_in_a_container_without_scontrol_both_the_drain_and_the_requeue_go_through_the_hand_off(tmp_path, beats_dir):
    root = tmp_path / "root"
    request_dir(root).mkdir(parents=True)
    slurm = fake_slurm(tmp_path, jobs={"77": job_record("77")})
    container_env = {"PATH": str(tmp_path / "no-slurm")}
    for rank in range(2):
        beat(beats_dir, rank, step=40, step_at=T0, alive_at=T0 + 30)
    dog, clock, _, _ = hung_watchdog(tmp_path, beats_dir, container_env, {1: "T"}, node_root=root)
    stop = threading.Event()

    def root_side() -> None:
        while not stop.is_set():
            take(root, ["node2"], slurm.environ)
            time.sleep(0.05)

    helper = threading.Thread(target=root_side, daemon=True)
    helper.start()
    try:
        dog.poll()
        clock.now += 11
        assert dog.poll() is True
    finally:
        stop.set()
        helper.join(timeout=10)
    details = dog.verdict.details
    assert details["drain"].startswith("the node's hand-off: drained node2: kiln-hung: job 77 (uid 1001)")
    assert details["requeue"] == "the node's hand-off: requeued job 77"
    assert ["requeue", "77"] in slurm.calls()
