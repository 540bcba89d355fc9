"""The watchdog with real torchrun on CPU (gloo): a SIGSTOPped rank is named, its node drained and the job requeued
(a fake scontrol records both); a rank that fails once leaves its attempt in the record; a rank whose NCCL chose TCP
on an EFA node stops the run in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kiln.launcher.watchdog import EXIT_HUNG, EXIT_TCP_FALLBACK
from tests.support.efa_node import simulate_efa_node
from tests.support.fake_scontrol import fake_scontrol
from tests.support.launcher import clean_env, free_port, only_record, run_launcher
from tests.support.nccl_logs import EFA_NEW, SOCKET

# Each test starts torchrun and workers that import torch.
pytestmark = pytest.mark.slow

HANG_MIN_S = 4

# Rank 1 stops itself at step 6 of the first attempt, the way `kill -STOP` would; rank 0 then waits in all_reduce.
STALLING = """
import json, os, signal, sys, time
import torch
import torch.distributed as dist
from kiln.launcher.heartbeat import Heartbeat

dist.init_process_group("gloo")
rank = dist.get_rank()
beat = Heartbeat.from_env()
for step in range(1, 10_000):
    if step == 6 and rank == 1:
        with open(sys.argv[1], "w") as handle:
            json.dump({"pid": os.getpid(), "at": time.time()}, handle)
        os.kill(os.getpid(), signal.SIGSTOP)
    total = torch.ones(4)
    dist.all_reduce(total)
    time.sleep(0.05)
    beat.step(step)
"""


def slurm_env(tmp_path: Path) -> dict[str, str]:
    """One Slurm node, node2, in job 77's second run (requeued once), with a scontrol that logs its argv."""
    path_env, _ = fake_scontrol(tmp_path)
    return clean_env(
        SLURM_JOB_ID="77",
        SLURM_JOB_NODELIST="127.0.0.1",
        SLURM_STEP_NODELIST="127.0.0.1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_NNODES="1",
        SLURM_STEP_NUM_NODES="1",
        SLURM_STEP_NUM_TASKS="1",
        SLURM_NODEID="0",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
        SLURMD_NODENAME="node2",
        SLURM_RESTART_COUNT="1",
        KILN_RDZV_PORT=str(free_port()),
        TMPDIR=str(tmp_path),
        **path_env,
    )


def test_a_stopped_rank_is_named_its_node_drained_and_the_job_requeued(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(STALLING)
    stopped = tmp_path / "stopped.json"
    done = run_launcher(
        ["--nproc-per-node", "2", "--hang-min-s", str(HANG_MIN_S), "--hang-factor", "2", str(script), str(stopped)],
        env=slurm_env(tmp_path),
    )
    assert done.returncode == EXIT_HUNG, done.stdout + done.stderr
    hung = [line for line in done.stderr.splitlines() if line.startswith("kiln-launch: hung:")]
    assert len(hung) == 1, done.stderr
    assert hung[0].startswith(f"kiln-launch: hung: rank 1 on {os.uname().nodename} has not reached step 6 for ")
    assert "(process stopped; last reported step" in hung[0] and "others wait at step 6" in hung[0]

    job_dir = tmp_path / "checkpoints" / "77"
    [record_file] = (job_dir / "runs").glob("*.json")
    assert "-node2-restart1-" in record_file.name
    record = json.loads(record_file.read_text())
    assert record["format"] == 2 and record["slurm_restart_count"] == 1
    assert (record["status"], record["exit_code"]) == ("hung", EXIT_HUNG)
    verdict = record["watchdog"]["verdict"]
    assert verdict["culprits"][0]["rank"] == 1 and verdict["culprits"][0]["why"] == "process stopped"
    assert verdict["drain"] == "drained" and verdict["requeue"] == "requeued"
    [attempt] = record["attempts"]
    assert attempt["ended"] == "hung" and attempt["last_steps"]["0"] == 5

    # Detection: the stop, then the stall limit (the median step is tiny, so hang_min_s), then at most a poll or two.
    stop = json.loads(stopped.read_text())
    detection_s = verdict["detected_at"] - stop["at"]
    assert HANG_MIN_S <= detection_s + 0.1 <= HANG_MIN_S + 3, detection_s
    print(f"watchdog detection: {detection_s:.2f} s after SIGSTOP with hang_min_s={HANG_MIN_S}")

    calls = (tmp_path / "scontrol.log").read_text().splitlines()
    assert calls[0].startswith("update NodeName=node2 State=DRAIN Reason=kiln-hung: rank 1 on ")
    assert calls[1:] == ["show job 77 --oneliner", "requeue 77"]

    # The live rank dumped its flight recorder (gloo's, on this CPU torch) and its stacks; the stopped one could not.
    kinds = {entry["kind"] for entry in verdict["flight_recorder"] if entry["rank"] == 0}
    assert kinds == {"flight recorder (_dump_fr_trace)", "python thread stacks"}
    dumps = sorted(path.name for path in (job_dir / "flight-recorder").iterdir())
    assert len(dumps) == 2 and all("-rank0-attempt0." in name for name in dumps)
    # The stopped worker was woken to die: nothing is left running.
    with pytest.raises(ProcessLookupError):
        os.kill(stop["pid"], 0)
    # The heartbeat directory was on the node's TMPDIR, and it is gone.
    assert not list(tmp_path.glob("kiln-heartbeat-77-r1-*"))


FAILS_ONCE = """
import os, sys, time
import torch.distributed as dist
from kiln.launcher.heartbeat import Heartbeat

dist.init_process_group("gloo")
beat = Heartbeat.from_env()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
for step in range(1, 4):
    time.sleep(0.05)
    beat.step(step)
    if attempt == 0 and step == 2 and dist.get_rank() == 1:
        sys.exit(3)
    dist.barrier()
"""


def test_every_torchrun_attempt_is_in_the_record(tmp_path):
    script = tmp_path / "fails_once.py"
    script.write_text(FAILS_ONCE)
    done = run_launcher(["--nproc-per-node", "2", "--job-id", "once", str(script)], env=clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    record = only_record(tmp_path / "checkpoints" / "once")
    assert record["status"] == "succeeded"
    first, second = record["attempts"]
    assert (first["attempt"], first["ended"], second["attempt"], second["ended"]) == (0, "failed", 1, "succeeded")
    failures = {f["rank"]: (f["exitcode"], f["signal"]) for f in first["failures"]}
    # Rank 1 exited 3; torchrun may also list rank 0, which it stopped with SIGTERM when rank 1 failed.
    assert failures[1] == (3, None)
    assert set(failures) <= {0, 1} and failures.get(0, (-15, "SIGTERM")) == (-15, "SIGTERM")
    assert first["last_steps"]["1"] == 2
    assert second["last_steps"] == {"0": 3, "1": 3}
    assert record["watchdog"]["status"] == "no hang"


# A fake worker on a GPU node with EFA: it writes the NCCL debug log NCCL would (to NCCL_DEBUG_FILE, %h and %p
# expanded) from argv[1], then trains on (until stopped, or for a few seconds).
FAKE_NCCL_WORKER = """
import os, socket, sys, time
from kiln.launcher.heartbeat import Heartbeat

target = os.environ["NCCL_DEBUG_FILE"].replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
with open(target, "w") as handle:
    handle.write(open(sys.argv[1]).read())
beat = Heartbeat.from_env()
for step in range(1, 40):
    time.sleep(0.1)
    beat.step(step)
"""


@pytest.mark.parametrize(("log", "code"), [(SOCKET, EXIT_TCP_FALLBACK), (EFA_NEW, 0)])
def test_nccl_on_tcp_on_an_efa_node_stops_the_run_in_one_line(tmp_path, log, code):
    root = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so", fi_info=True)
    script = tmp_path / "worker.py"
    script.write_text(FAKE_NCCL_WORKER)
    (tmp_path / "nccl.txt").write_text(log)
    env = clean_env(KILN_ROOT=str(root), KILN_INSTANCE_TYPE="p5.48xlarge", TMPDIR=str(tmp_path))
    args = ["--nproc-per-node", "1", "--job-id", "tcp", str(script), str(tmp_path / "nccl.txt")]
    done = run_launcher(args, env=env)
    assert done.returncode == code, done.stdout + done.stderr
    record = only_record(tmp_path / "checkpoints" / "tcp")
    assert record["transport_check"] is True
    assert record["worker_env"]["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    lines = [line for line in done.stderr.splitlines() if line.startswith("kiln-launch: tcp_fallback:")]
    if code:
        assert len(lines) == 1 and "NCCL chose Socket (provider none), not EFA" in lines[0], done.stderr
        assert record["status"] == "tcp_fallback"
        assert record["watchdog"]["verdict"]["evidence"]
    else:
        assert lines == [] and record["status"] == "succeeded"


def test_allow_tcp_turns_the_transport_check_off(tmp_path):
    root = simulate_efa_node(tmp_path / "node", plugin="libnccl-net-ofi.so", fi_info=True)
    script = tmp_path / "train.py"
    script.write_text("")
    env = clean_env(KILN_ROOT=str(root), KILN_INSTANCE_TYPE="p5.48xlarge", KILN_ALLOW_TCP="1")
    plan = json.loads(run_launcher(["--nproc-per-node", "1", "--dry-run", str(script)], env=env).stdout)
    assert plan["transport_check"] is False
    plan = json.loads(
        run_launcher(
            ["--nproc-per-node", "1", "--dry-run", str(script)],
            env=clean_env(KILN_ROOT=str(root), KILN_INSTANCE_TYPE="p5.48xlarge"),
        ).stdout
    )
    assert plan["transport_check"] is True
