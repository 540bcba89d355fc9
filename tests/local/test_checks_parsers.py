"""Pure parts of the local cluster: preflight checks, Slurm output parsers, the smoke job's script and report."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.cli.main import main as kiln_main
from kiln.local import jobs, preflight, slurm
from kiln.local.errors import LocalError
from kiln.local.jobs import SmokeResult, job_preamble, parse_step, report_lines, run_command, smoke_script
from kiln.local.layout import plan_layout
from kiln.local.network import overlapping_routes
from kiln.local.torchlink import link_torch, requirement_names


def test_not_linux_is_a_clear_error():
    with pytest.raises(LocalError, match="needs Linux .* this is darwin"):
        preflight.check_platform("darwin")
    preflight.check_platform("linux")


def test_not_root_is_a_clear_error():
    with pytest.raises(LocalError, match="must run as root"):
        preflight.check_root(1000)
    preflight.check_root(0)


def test_missing_network_namespace_support_is_a_clear_error():
    with pytest.raises(LocalError, match="no network-namespace support: `false` failed"):
        preflight.check_netns(("false",))
    with pytest.raises(LocalError, match="no network-namespace support: .* could not run"):
        preflight.check_netns(("/nonexistent/unshare",))


def test_missing_tools_are_named_with_their_package():
    with pytest.raises(LocalError, match=r"nsenter \(package util-linux\)"):
        preflight.check_tools(which=lambda tool: None if tool == "nsenter" else "/bin/" + tool)


def test_a_listening_port_is_in_use_and_a_free_one_is_not():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert preflight.port_in_use(port)
        with pytest.raises(LocalError, match=f"port {port} is in use .* --slurmctld-port"):
            preflight.check_port(port)
    assert not preflight.port_in_use(port)


def test_subnets_overlapping_a_host_route_are_refused(tmp_path):
    routes = [
        {"dst": "default", "dev": "eth0"},
        {"dst": "10.77.0.0/16", "dev": "wg0"},
        {"dst": "192.168.1.0/24", "dev": "eth0"},
    ]
    assert overlapping_routes("10.77.3.0/24", routes) == ["10.77.0.0/16 dev wg0"]
    assert overlapping_routes("10.78.0.0/24", routes) == []
    with pytest.raises(LocalError, match=r"overlaps routes .*\(10.77.0.0/16 dev wg0\)"):
        preflight.check_subnet(plan_layout(prefix=str(tmp_path), nodes=1, subnet="10.77.9.0/24"), routes)


def test_sinfo_output_parses_and_only_flagless_working_states_are_ready():
    text = "node1|idle|1|1024|none\nnode2|down*|1|1024|Not responding\nnode3|allocated|2|2048|none\n"
    nodes = slurm.parse_sinfo(text)
    assert nodes["node2"].reason == "Not responding"
    assert nodes["node1"].reason == ""
    assert [name for name, node in nodes.items() if node.ready] == ["node1", "node3"]
    assert not slurm.is_ready("idle*") and not slurm.is_ready("drained") and not slurm.is_ready("completing")


def test_job_records_parse_with_spaces_in_values_and_exit_codes_follow_the_shell():
    record = slurm.parse_record(
        "JobId=7 JobName=kiln smoke UserId=root(0) JobState=COMPLETED Reason=None ExitCode=3:0 NodeList=node[1-2]\n"
    )
    assert record["JobName"] == "kiln smoke"
    assert record["JobState"] == "COMPLETED" and record["NodeList"] == "node[1-2]"
    assert slurm.exit_code(record) == 3
    assert slurm.exit_code({"ExitCode": "0:9"}) == 137
    assert slurm.exit_code({"ExitCode": "0:0"}) == 0


def test_smoke_step_lines_parse():
    step = parse_step("step     3/20  loss 5.5172  step_time 0.0412 s  tokens/s 24,854")
    assert (step.step, step.total, step.loss, step.step_time_s, step.tokens_per_s) == (3, 20, 5.5172, 0.0412, 24854)
    assert parse_step("smoke: done, final loss 4.0653") is None


def _result(tmp_path: Path, lines: list[str]) -> SmokeResult:
    return SmokeResult(
        job_id="7",
        state="COMPLETED",
        exit_code=0,
        node_list="node[1-2]",
        steps=tuple(parse_step(line) for line in lines),
        first_step_after_s=4.31,
        checkpoint_dir=tmp_path / "7",
        output=tmp_path / "smoke-7.out",
    )


def test_smoke_report_leaves_out_the_warm_up_step_and_names_the_checkpoints(tmp_path):
    result = _result(
        tmp_path,
        [
            "step 1/3 loss 5.0 step_time 1.0 s tokens/s 100",
            "step 2/3 loss 4.5 step_time 0.1 s tokens/s 1,000",
            "step 3/3 loss 4.0 step_time 0.2 s tokens/s 500",
        ],
    )
    assert result.median_tokens_per_s == 750
    (tmp_path / "7" / "step-00000003").mkdir(parents=True)
    lines = report_lines(result)
    assert "smoke: 3 steps, loss 5.0000 -> 4.0000 (falls)" in lines
    assert "smoke: throughput 750 tokens/s (median step time 0.1500 s)" in lines
    assert "smoke: first step 4.3 s after submission" in lines
    assert f"smoke: checkpoints: {tmp_path / '7'} (step-00000003)" in lines


def test_smoke_script_is_valid_bash_and_uses_the_bootstrap_launcher(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=2)
    script = smoke_script(layout, 12)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert job_preamble(layout) in script
    assert script.endswith("\nexec srun --ntasks-per-node=1 --kill-on-bad-exit=1 kiln-launch smoke --steps 12\n")
    # torch has numpy on the nodes now: nothing hides its warnings.
    assert "PYTHONWARNINGS" not in script


def _fake_node_root(prefix: Path) -> None:
    """Give PREFIX what the bootstrap leaves there for jobs: launcher.env and /usr/local/bin/kiln-launch."""
    env = prefix / "etc/kiln/launcher.env"
    env.parent.mkdir(parents=True)
    env.write_text(f"KILN_CLUSTER_NAME=kiln-local\nKILN_CHECKPOINT_DIR={prefix}/checkpoints\n")
    launcher = prefix / "usr/local/bin/kiln-launch"
    launcher.parent.mkdir(parents=True)
    launcher.write_text('#!/bin/sh\necho "launcher $*"\n')
    launcher.chmod(0o755)


def test_run_gives_a_command_the_job_preamble_with_the_launcher_on_path(tmp_path, monkeypatch):
    prefix = tmp_path / "cluster"
    layout = plan_layout(prefix=str(prefix), nodes=2)
    _fake_node_root(prefix)
    submitted, really_run = [], subprocess.run
    monkeypatch.setattr(jobs, "usable_nodes", lambda layout, nodes: 2)
    monkeypatch.setattr(
        jobs.subprocess, "run", lambda argv, env: submitted.append(argv) or subprocess.CompletedProcess(argv, 0)
    )
    command = ["sh", "-c", 'kiln-launch "$1"; env', "-", "train.py --lr 'a b'"]
    assert run_command(layout, None, command) == 0
    srun, task = submitted[0][: submitted[0].index("--") + 1], submitted[0][submitted[0].index("--") + 1 :]
    assert srun == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--job-name=kiln-run", "--"]
    assert task[:2] == ["bash", "-c"] and task[2].startswith(job_preamble(layout)) and task[-5:] == command
    # What srun's task then runs on a node, from a shell whose Python settings must not leak into the job.
    leaky = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere", "VIRTUAL_ENV": "/venv", "SLURM_CPUS_ON_NODE": "3"}
    result = really_run(task, env=leaky, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "launcher train.py --lr 'a b'"
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert env["KILN_CHECKPOINT_DIR"] == f"{prefix}/checkpoints"
    assert env["KILN_CLUSTER_NAME"] == "kiln-local" and env["KILN_INSTANCE_TYPE"] == "local"
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["PATH"] == f"{prefix}/usr/local/bin:/usr/bin:/bin"
    assert env["TMPDIR"] == f"{prefix}/tmp" and (prefix / "tmp").is_dir()
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env


def test_run_names_a_command_the_node_cannot_find_in_one_line(tmp_path, monkeypatch):
    layout = plan_layout(prefix=str(tmp_path / "cluster"), nodes=1)
    _fake_node_root(tmp_path / "cluster")
    submitted, really_run = [], subprocess.run
    monkeypatch.setattr(jobs, "usable_nodes", lambda layout, nodes: 1)
    monkeypatch.setattr(
        jobs.subprocess, "run", lambda argv, env: submitted.append(argv) or subprocess.CompletedProcess(argv, 0)
    )
    run_command(layout, None, ["train-nowhere", "--x"])
    task = submitted[0][submitted[0].index("--") + 1 :]
    result = really_run(task, env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node1"}, capture_output=True, text=True)
    assert result.returncode == 127
    assert result.stderr == "kiln local run: train-nowhere: command not found on node1\n"


def test_a_job_without_launcher_env_fails_on_its_first_line(tmp_path):
    layout = plan_layout(prefix=str(tmp_path), nodes=1)
    script = job_preamble(layout) + "echo ran\n"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert result.returncode != 0 and "ran" not in result.stdout
    assert f"{layout.launcher_env}: No such file or directory" in result.stderr


def test_torch_requirements_skip_extras_and_false_markers():
    requires = ["filelock", "sympy>=1.13", 'optree>=0.13; extra == "optree"', 'pywin32; sys_platform == "win32"']
    assert requirement_names(requires) == ["filelock", "sympy"]


def test_the_launcher_venv_gets_numpy_with_torch_so_torch_imports_without_a_warning(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    source = link_torch(venv, tmp_path / "torch")
    assert source is not None and ", numpy " in source, source
    assert (tmp_path / "torch" / "numpy").is_symlink()
    # -W error: torch's "Failed to initialize NumPy" UserWarning would fail the import.
    code = "import numpy, torch; print(torch.from_numpy(numpy.ones(2)).sum().item())"
    result = subprocess.run([str(venv / "bin/python"), "-W", "error", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "2.0\n" and result.stderr == ""


def test_status_without_a_cluster_names_the_prefix_flag_and_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KILN_LOCAL_PREFIX", str(tmp_path / "elsewhere"))
    assert kiln_main(["local", "status"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"kiln local status: error: no kiln local cluster is up under {tmp_path / 'elsewhere'}: run `kiln local up` "
        "first, or name the prefix it was brought up with (--prefix, or $KILN_LOCAL_PREFIX)\n"
    )
