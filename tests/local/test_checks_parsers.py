"""Pure parts of the local cluster: preflight checks, Slurm output parsers, the smoke job's script and report."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from kiln.local import preflight, slurm
from kiln.local.errors import LocalError
from kiln.local.jobs import SmokeResult, parse_step, report_lines, smoke_script
from kiln.local.layout import plan_layout
from kiln.local.network import overlapping_routes
from kiln.local.torchlink import requirement_names


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
    assert f"source {layout.launcher_env}\n" in script
    assert f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 {layout.launcher} smoke --steps 12\n" in script


def test_torch_requirements_skip_extras_and_false_markers():
    requires = ["filelock", "sympy>=1.13", 'optree>=0.13; extra == "optree"', 'pywin32; sys_platform == "win32"']
    assert requirement_names(requires) == ["filelock", "sympy"]
