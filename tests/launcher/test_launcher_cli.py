"""Bad input gets one line and a non-zero exit; a failing script's exit code and record come back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from kiln.launcher.cli import main
from tests.support.launcher import (
    SUBPROCESS_TIMEOUT_S,
    clean_env,
    kiln_launch_command,
    only_record,
    run_launcher,
    start_launcher,
    wait_all,
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "missing SCRIPT or subcommand"),
        (["missing.py"], "'missing.py' is neither a subcommand (smoke, check, health, drain-requests) nor a script"),
        (["smok"], "did you mean 'smoke'?"),
        (["chek"], "did you mean 'check'?"),
        (["--nproc-per-node", "0", "smoke"], "--nproc-per-node: expected a positive integer (got '0')"),
        (["--nproc-per-node", "-2", "smoke"], "expected a positive integer (got '-2')"),
        (["--nproc-per-node", "two", "smoke"], "expected a positive integer (got 'two')"),
        (["--max-restarts", "-1", "smoke"], "expected a non-negative integer"),
        (["--hang-factor", "0", "smoke"], "--hang-factor: expected a positive integer (got '0')"),
        (["--hang-min-s", "soon", "smoke"], "--hang-min-s: expected a positive integer (got 'soon')"),
        (["--rdzv-port", "99999", "smoke"], "--rdzv-port: expected a port in 1..65535"),
        (["--bogus", "smoke"], "unrecognized arguments: --bogus"),
        (["smoke", "--steps", "0"], "smoke: argument --steps: expected a positive integer"),
        (["smoke", "--strategy", "zero3"], "smoke: argument --strategy: invalid choice"),
        (["--nccl-env", "NCCL_DEBUG", "smoke"], "--nccl-env: expected NAME=VALUE"),
        (["--nccl-env", "RDMAV_FORK_SAFE=1", "smoke"], "RDMAV_FORK_SAFE: variables starting with RDMAV_"),
        (["--nccl-env", "LD_PRELOAD=/tmp/x.so", "smoke"], "'LD_PRELOAD': is not an NCCL, libfabric or Neuron variable"),
        (["--nccl-env", "NCCL_X=" + "a" * 257, "smoke"], "'NCCL_X': value is 257 characters; at most 256"),
        (["--job-id", "../../etc", "smoke"], "--job-id: '../../etc' is not a safe directory name"),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("kiln-launch: error: ")
    assert message in captured.err


def test_environment_errors_are_one_line_exit_1(capsys, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[1-2]")
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_NODEID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "16")
    assert main(["--nproc-per-node", "1", "smoke"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "srun started 16 tasks on 2 nodes" in err


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    assert "--nproc-per-node" in capsys.readouterr().out


@pytest.mark.parametrize("command", [kiln_launch_command(), [sys.executable, "-m", "kiln.launcher"]])
def test_real_entry_points_print_no_traceback(command):
    done = subprocess.run(
        [*command, "--nproc-per-node", "nope", "smoke"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "kiln-launch: error: argument --nproc-per-node: expected a positive integer (got 'nope')\n"


def test_failing_script_exit_code_and_record(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n")
    done = run_launcher(["--max-restarts", "0", "--job-id", "fails", str(script)])
    assert done.returncode == 3, done.stdout + done.stderr
    assert "kiln-launch: failed: rank 0 failed with exit code 3" in done.stderr
    record = only_record(tmp_path / "checkpoints" / "fails")
    assert record["status"] == "failed"
    assert record["exit_code"] == 3
    assert record["failures"][0]["exitcode"] == 3
    assert record["environment"]["scheduler"] == "plain"
    assert record["nccl_env"]["notes"] == ["no instance type known: no catalog preset applied"]
    assert record["instance_type"]["name"] is None
    assert "refused" in record["instance_type"]["note"].lower()
    assert record["versions"]["torch"].startswith("2.13")
    assert record["timings"]["run_s"] > 0
    # The one attempt and its failure; the script reported no steps, so no hang watchdog watched it.
    [attempt] = record["attempts"]
    assert (attempt["attempt"], attempt["ended"], attempt["failures"][0]["exitcode"]) == (0, "failed", 3)
    assert record["watchdog"]["status"] == "off: the script wrote no heartbeat"


def test_restart_safe_store_setting_without_clobbering(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    args = ["--nproc-per-node", "1", "--dry-run", str(script)]
    default = run_launcher(args)
    assert json.loads(default.stdout)["agent_env"] == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    chosen = run_launcher(args, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
    assert json.loads(chosen.stdout)["agent_env"] == {}


def test_sigterm_stops_the_job_and_records_it(tmp_path):
    # What scancel or a Slurm time limit does: SIGTERM to the launcher.
    started = tmp_path / "worker-started"
    script = tmp_path / "sleeps.py"
    script.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(600)\n")
    launcher = start_launcher(["--job-id", "stopped", "--nproc-per-node", "1", str(script)], env={})
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while not started.exists():
        assert launcher.poll() is None, launcher.communicate()[0]
        assert time.monotonic() < deadline, "worker never started"
        time.sleep(0.1)
    launcher.send_signal(signal.SIGTERM)
    output = wait_all([launcher])[0]
    assert launcher.returncode == 128 + signal.SIGTERM, output
    record = only_record(tmp_path / "checkpoints" / "stopped")
    assert (record["status"], record["exit_code"]) == ("interrupted", 143)
