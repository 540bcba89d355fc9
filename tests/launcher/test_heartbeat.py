"""The worker's heartbeat: a no-op outside kiln-launch, a file per rank rewritten each second, dumps on request, and
NCCL's transport judged from the rank's own debug log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.launcher import heartbeat
from kiln.launcher.heartbeat import DUMP_REQUEST, Heartbeat, beat_file, read_json, transport_verdict, write_json
from tests.support.launcher import SUBPROCESS_TIMEOUT_S, clean_env
from tests.support.nccl_logs import EFA_NEW, LIBFABRIC_TCP, SOCKET


def wait_for(path: Path, predicate, timeout: float = 5.0) -> dict:
    """Return the JSON in PATH once PREDICATE holds for it (the heartbeat thread writes about every second)."""
    deadline = time.monotonic() + timeout
    while True:
        data = read_json(path)
        if data is not None and predicate(data):
            return data
        assert time.monotonic() < deadline, f"{path}: {data}"
        time.sleep(0.05)


def test_outside_kiln_launch_it_is_a_no_op(tmp_path):
    beat = Heartbeat.from_env({"RANK": "3"})
    assert not beat.enabled
    beat.step(1)
    assert beat._thread is None
    assert list(tmp_path.iterdir()) == []


def test_the_rank_file_holds_step_attempt_and_median(tmp_path):
    env = {heartbeat.DIR_VARIABLE: str(tmp_path), "RANK": "5", "LOCAL_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2"}
    beat = Heartbeat.from_env(env)
    path = beat_file(tmp_path, 2, 5)
    # Written at once, before any step: the watchdog then knows the script reports steps.
    first = read_json(path)
    assert (first["rank"], first["local_rank"], first["attempt"], first["step"]) == (5, 1, 2, None)
    assert first["pid"] == os.getpid()
    for step in (1, 2, 3):
        time.sleep(0.02)
        beat.step(step)
    data = wait_for(path, lambda d: d["step"] == 3)
    assert data["median_step_s"] >= 0.02 and len(data["step_times_s"]) == 2
    assert data["step_at"] <= data["alive_at"] <= time.time()
    # The thread keeps the process's liveness fresh without new steps.
    later = wait_for(path, lambda d: d["alive_at"] > data["alive_at"] + 0.5, timeout=3)
    assert later["step"] == 3
    beat.close()
    assert not beat._thread.is_alive()


def test_a_dump_request_is_served_once_with_the_thread_stacks(tmp_path):
    directory = tmp_path / "beats"
    directory.mkdir()
    beat = Heartbeat.from_env({heartbeat.DIR_VARIABLE: str(directory), "RANK": "0"})
    target = tmp_path / "flight-recorder"
    write_json(directory / DUMP_REQUEST, {"id": "0-1", "dir": str(target)})
    data = wait_for(beat.path, lambda d: d["dumps"])
    [dump] = data["dumps"]
    assert dump["request"] == "0-1"
    kinds = {entry["kind"]: entry["path"] for entry in dump["files"]}
    stacks = Path(kinds["python thread stacks"])
    assert stacks.parent == target
    assert "test_heartbeat.py" in stacks.read_text()
    time.sleep(1.5)
    assert len(read_json(beat.path)["dumps"]) == 1
    beat.close()


def nccl_log(tmp_path: Path, text: str, pid: int) -> dict[str, str]:
    (tmp_path / f"nccl.node-0.{pid}.log").write_text(text)
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}


@pytest.mark.parametrize(
    ("text", "ok", "detail"),
    [
        (EFA_NEW, True, "NCCL over libfabric efa (Libfabric)"),
        (SOCKET, False, "NCCL chose Socket (provider none), not EFA, on this EFA node"),
        (LIBFABRIC_TCP, False, "NCCL chose Libfabric (provider tcp;ofi_rxm), not EFA, on this EFA node"),
    ],
)
def test_transport_from_the_ranks_own_nccl_log(tmp_path, text, ok, detail):
    env = nccl_log(tmp_path, text, 4242)
    # Another rank's file (another pid) is not this rank's evidence.
    (tmp_path / "nccl.node-0.4243.log").write_text(SOCKET if ok else EFA_NEW)
    verdict = transport_verdict(env, 4242, final=False)
    assert (verdict["ok"], verdict["detail"]) == (ok, detail)


def test_transport_not_yet_known_or_not_checkable(tmp_path):
    env = nccl_log(tmp_path, "node-0:1:1 [0] NCCL INFO Bootstrap : Using eth0\n", 7)
    assert transport_verdict(env, 7, final=False) is None
    final = transport_verdict(env, 7, final=True)
    assert final["ok"] is None and final["detail"].startswith("not checked: no NCCL transport line in ")
    quiet = transport_verdict(env | {"NCCL_DEBUG": "WARN"}, 7, final=False)
    assert quiet == {"ok": None, "detail": "not checked: NCCL_DEBUG=WARN prints no transport lines"}


def test_a_fake_worker_on_tcp_reports_it_in_its_heartbeat(tmp_path, capsys):
    env = nccl_log(tmp_path, SOCKET, os.getpid()) | {
        heartbeat.DIR_VARIABLE: str(tmp_path),
        heartbeat.TRANSPORT_VARIABLE: "efa",
        "RANK": "1",
    }
    beat = Heartbeat.from_env(env)
    assert read_json(beat.path)["transport"] is None
    beat.step(1)
    data = wait_for(beat.path, lambda d: d["transport"] is not None)
    assert data["transport"]["ok"] is False and data["transport"]["step"] == 1
    assert "Using network Socket" in " ".join(data["transport"]["evidence"])
    assert "kiln-launch: rank 1: NCCL chose Socket" in capsys.readouterr().err
    beat.close()


def test_the_thread_ends_when_kiln_launch_removes_the_directory(tmp_path):
    directory = tmp_path / "beats"
    directory.mkdir()
    beat = Heartbeat.from_env({heartbeat.DIR_VARIABLE: str(directory)})
    beat.path.unlink()
    directory.rmdir()
    beat._thread.join(timeout=3)
    assert not beat._thread.is_alive()


def test_importing_the_heartbeat_imports_no_torch():
    program = "import sys, json, kiln.launcher.heartbeat; print(json.dumps('torch' in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    assert json.loads(done.stdout) is False


def test_a_directory_it_cannot_write_leaves_training_unwatched_with_a_warning(tmp_path, capsys):
    beat = Heartbeat.from_env({heartbeat.DIR_VARIABLE: str(tmp_path / "missing"), "RANK": "2"})
    assert not beat.enabled and beat._thread is None
    beat.step(1)
    assert capsys.readouterr().err.startswith("kiln-launch: warning: no heartbeat for rank 2: ")


def test_a_users_nccl_debug_to_stdout_is_left_alone_and_not_judged():
    verdict = transport_verdict({"NCCL_DEBUG": "INFO"}, 7, final=True)
    assert verdict == {
        "ok": None,
        "detail": "not checked: NCCL_DEBUG is set without NCCL_DEBUG_FILE, so NCCL logs to stdout",
    }
