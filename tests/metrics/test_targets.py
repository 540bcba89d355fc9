"""kiln-metrics targets: Slurm's nodes from a fake sinfo as Prometheus file_sd files, and how it fails."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from kiln.catalog.exporters import EXPORTERS
from kiln.metrics import targets
from kiln.metrics.slurm import CommandError
from kiln.metrics.targets import (
    TARGETS_COMMAND,
    Node,
    file_sd_groups,
    parse_exporters,
    parse_nodes,
    per_node,
    refresh,
    write_if_changed,
)
from tests.support.metrics import (
    CONTROLLER_DOWN,
    EXIT_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    age,
    exporter,
    fake_sinfo,
    path_first,
    sinfo_prints,
    snapshot,
)
from tests.support.metrics_targets import SINFO_TEXT
from tests.support.paths import ROOT

ADDRESSES = {
    "cpu-st-c7-1": "10.0.32.5",
    "head": "10.0.0.2",
    "p5-st-p5-1": "10.0.64.11",
    "p5-st-p5-2": "10.0.64.12",
    "p5-st-p5-5": "10.0.64.15",
    "p5-st-p5-6": "10.0.64.16",
    "trn-st-trn1-1": "10.0.96.7",
}
ALL_NODES = sorted(ADDRESSES)
GPU_NODES = ["p5-st-p5-1", "p5-st-p5-2", "p5-st-p5-5", "p5-st-p5-6"]
FAILED = f"{shlex.join(TARGETS_COMMAND)} failed: exit 1: {CONTROLLER_DOWN}"


def _groups(nodes: list[str], port: int) -> list[dict]:
    return [
        {"targets": [f"{ADDRESSES[node]}:{port}"], "labels": {"instance": node, "node": node}} for node in sorted(nodes)
    ]


def _read(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def sinfo_fails(message: str = CONTROLLER_DOWN) -> str:
    return f"echo '{message}' >&2\nexit 1\n"


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    return bin_dir


def _run(args: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln.metrics", "targets", *args],
        cwd=ROOT,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def test_the_command_asks_for_machine_readable_output() -> None:
    assert TARGETS_COMMAND == (
        "sinfo",
        "--noheader",
        "--Node",
        "--all",
        "--Format=NodeList:|,NodeAddr:|,StateLong:|,Gres:",
    )


def test_parse_nodes_keeps_each_machine_once_and_drops_the_powered_off_and_powering_up() -> None:
    nodes = parse_nodes(SINFO_TEXT)

    assert nodes == sorted(
        [
            Node("p5-st-p5-1", "10.0.64.11", gpus=True),
            Node("p5-st-p5-2", "10.0.64.12", gpus=True),
            Node("p5-st-p5-5", "10.0.64.15", gpus=True),
            Node("p5-st-p5-6", "10.0.64.16", gpus=True),
            Node("cpu-st-c7-1", "10.0.32.5", gpus=False),
            Node("trn-st-trn1-1", "10.0.96.7", gpus=False),
            Node("head", "10.0.0.2", gpus=False),
        ],
        key=lambda node: node.name,
    )


@pytest.mark.parametrize("state", ["idle~", "down~", "drained~", "idle#", "mix#", "mixed#", "down#", "IDLE~"])
def test_a_node_without_a_machine_is_left_out(state: str) -> None:
    assert parse_nodes(f"n1|10.0.0.1|{state}|(null)\n") == []


@pytest.mark.parametrize(
    "state", ["idle", "down*", "drained", "drained*", "draining@", "idle%", "mixed-", "allocated+", "reboot^", "idle!"]
)
def test_down_drained_and_powering_down_nodes_stay(state: str) -> None:
    assert parse_nodes(f"n1|10.0.0.1|{state}|(null)\n") == [Node("n1", "10.0.0.1", gpus=False)]


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("gpu:h100:8(S:0-1)", True), ("gpu:8", True), ("gpu", True), ("(null)", False), ("neuron:16", False),
     ("", False), ("gpu:h100:0", False)],
)  # fmt: skip
def test_a_node_has_gpus_when_its_gres_lists_any(gres: str, gpus: bool) -> None:
    assert parse_nodes(f"n1|10.0.0.1|idle|{gres}\n")[0].gpus is gpus


@pytest.mark.parametrize(
    "text", ["n1|10.0.0.1|idle\n", "n1|10.0.0.1|idle|(null)|x\n", "|10.0.0.1|idle|(null)\n", "slurm_load_node error\n"]
)
def test_parse_nodes_refuses_a_line_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="sinfo line 1: expected 4 fields"):
        parse_nodes(text)


def test_an_empty_cluster_is_no_node() -> None:
    assert parse_nodes("") == [] and parse_nodes("\n\n") == []


def test_node_and_efa_go_to_every_node_but_the_agents_own_and_dcgm_to_gpu_nodes() -> None:
    nodes = parse_nodes(SINFO_TEXT)
    others = [node for node in ALL_NODES if node != "head"]

    assert file_sd_groups(nodes, EXPORTERS["node"], "head") == _groups(others, 9100)
    assert file_sd_groups(nodes, EXPORTERS["efa"], "head") == _groups(others, 9342)
    assert file_sd_groups(nodes, EXPORTERS["dcgm"], "head") == _groups(GPU_NODES, 9400)
    assert file_sd_groups(nodes, EXPORTERS["node"]) == _groups(ALL_NODES, 9100)


def test_the_agents_own_node_is_matched_by_name_or_address() -> None:
    nodes = [Node("n1", "10.0.0.1", gpus=True), Node("n2", "10.0.0.2", gpus=True)]

    assert [group["labels"]["node"] for group in file_sd_groups(nodes, EXPORTERS["node"], "10.0.0.1")] == ["n2"]
    assert [group["labels"]["node"] for group in file_sd_groups(nodes, EXPORTERS["efa"], "n2")] == ["n1"]
    # No static DCGM scrape on the agent's node: a GPU node that hosts the agent keeps its DCGM target.
    assert [group["labels"]["node"] for group in file_sd_groups(nodes, EXPORTERS["dcgm"], "n2")] == ["n1", "n2"]


def test_an_ipv6_address_is_bracketed() -> None:
    groups = file_sd_groups([Node("n1", "fd00::1", gpus=False)], EXPORTERS["node"])

    assert groups == [{"targets": ["[fd00::1]:9100"], "labels": {"instance": "n1", "node": "n1"}}]


def test_parse_exporters_and_per_node() -> None:
    assert parse_exporters("node,dcgm, efa,node") == (EXPORTERS["node"], EXPORTERS["dcgm"], EXPORTERS["efa"])
    with pytest.raises(ValueError, match=r"unknown exporter 'gpu' \(known: dcgm, efa, node, slurm\)"):
        parse_exporters("node,gpu")
    with pytest.raises(ValueError, match="expected exporter names separated by commas"):
        parse_exporters("node,,efa")
    with pytest.raises(ValueError, match="'slurm' is not a per-node exporter"):
        per_node(parse_exporters("node,slurm"))


def test_every_exporter_of_the_catalog_is_per_node_or_the_slurm_one() -> None:
    # A new exporter in the catalog must say which of Slurm's nodes run it before the agent can scrape it.
    assert set(EXPORTERS) == {*targets.PER_NODE_EXPORTERS, "slurm"}


def test_refresh_writes_one_file_per_job_then_only_what_changed(fake_bin: Path, tmp_path: Path) -> None:
    directory = tmp_path / "state" / "targets"
    exporters = parse_exporters("node,dcgm,efa")

    written = refresh(directory, exporters, "head")

    others = [node for node in ALL_NODES if node != "head"]
    assert written == {directory / "node.json": 6, directory / "dcgm.json": 4, directory / "efa.json": 6}
    assert _read(directory / "node.json") == _groups(others, 9100)
    assert _read(directory / "dcgm.json") == _groups(GPU_NODES, 9400)
    assert _read(directory / "efa.json") == _groups(others, 9342)
    assert (directory / "dcgm.json").read_text().endswith("]\n")
    assert {oct(path.stat().st_mode & 0o777) for path in directory.iterdir()} == {"0o644"}
    assert (fake_bin / "sinfo.args").read_text().splitlines() == list(TARGETS_COMMAND[1:])

    # Nothing changed: nothing is written (Prometheus watches these files).
    age(directory)
    before = snapshot(directory)
    assert refresh(directory, exporters, "head") == {}
    assert snapshot(directory) == before

    # The powering-up node booted: node and efa gain a CPU node; dcgm stays as it was.
    fake_sinfo(fake_bin, sinfo_prints(SINFO_TEXT.replace("cpu-st-c7-3||idle", "cpu-st-c7-3|10.0.32.7|idle")))
    written = refresh(directory, exporters, "head")

    assert written == {directory / "node.json": 7, directory / "efa.json": 7}
    assert snapshot(directory)["dcgm.json"] == before["dcgm.json"]
    assert snapshot(directory)["node.json"][1] != before["node.json"][1]
    assert "cpu-st-c7-3" in {group["labels"]["node"] for group in _read(directory / "efa.json")}
    assert sorted(path.name for path in directory.iterdir()) == ["dcgm.json", "efa.json", "node.json"]


def test_refresh_leaves_other_files_alone(fake_bin: Path, tmp_path: Path) -> None:
    directory = tmp_path / "targets"
    directory.mkdir()
    (directory / "dcgm.json").write_text("[]\n")
    (directory / "custom.json").write_text('[{"targets": ["10.9.9.9:9100"]}]\n')

    refresh(directory, parse_exporters("node"), "head")

    assert (directory / "dcgm.json").read_text() == "[]\n"
    assert (directory / "custom.json").read_text() == '[{"targets": ["10.9.9.9:9100"]}]\n'
    assert sorted(path.name for path in directory.iterdir()) == ["custom.json", "dcgm.json", "node.json"]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (sinfo_fails(), FAILED),
        (sinfo_prints("p5-st-p5-1|10.0.64.11|mixed\n"), "cannot read: sinfo line 1: expected 4 fields"),
    ],
)
def test_a_failing_sinfo_keeps_every_previous_file(fake_bin: Path, tmp_path: Path, script: str, message: str) -> None:
    directory = tmp_path / "targets"
    exporters = parse_exporters("node,dcgm,efa")
    refresh(directory, exporters, "head")
    age(directory)
    before = snapshot(directory)
    fake_sinfo(fake_bin, script)

    with pytest.raises(CommandError) as failure:
        refresh(directory, exporters, "head")

    assert message in str(failure.value)
    assert snapshot(directory) == before


def test_write_if_changed_replaces_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a" / "b" / "node.json"
    assert write_if_changed(path, "[]\n") is True
    assert write_if_changed(path, "[]\n") is False
    inode = path.stat().st_ino

    assert write_if_changed(path, '[{"targets": []}]\n') is True
    assert path.stat().st_ino != inode  # a new file renamed over the old one, never the old one rewritten
    assert os.listdir(path.parent) == ["node.json"]

    def refuse(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_if_changed(path, "[]\n")
    assert path.read_text() == '[{"targets": []}]\n'
    assert os.listdir(path.parent) == ["node.json"]


def test_once_writes_and_exits_0(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    directory = tmp_path / "targets"

    done = _run(
        ["--dir", str(directory), "--exporters", "node,dcgm,efa", "--self", "head", "--once"], path_first(bin_dir)
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"kiln-metrics targets: wrote {directory / 'node.json'}: 6 targets",
        f"kiln-metrics targets: wrote {directory / 'dcgm.json'}: 4 targets",
        f"kiln-metrics targets: wrote {directory / 'efa.json'}: 6 targets",
    ]
    assert _read(directory / "dcgm.json") == _groups(GPU_NODES, 9400)

    again = _run(["--dir", str(directory), "--exporters", "dcgm", "--once"], path_first(bin_dir))
    assert (again.returncode, again.stderr) == (0, "")


def test_once_with_a_failing_sinfo_is_exit_1_one_line_and_keeps_the_files(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    directory = tmp_path / "targets"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    assert _run(["--dir", str(directory), "--exporters", "node", "--once"], path_first(bin_dir)).returncode == 0
    before = snapshot(directory)
    fake_sinfo(bin_dir, sinfo_fails())

    done = _run(["--dir", str(directory), "--exporters", "node", "--once"], path_first(bin_dir))

    assert done.returncode == 1
    assert done.stderr == f"kiln-metrics targets: error: {FAILED}\n"
    assert snapshot(directory) == before


def test_once_without_sinfo_is_exit_1_and_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path / "empty")}

    done = _run(["--dir", str(tmp_path / "targets"), "--exporters", "node", "--once"], env)

    assert done.returncode == 1
    assert done.stderr.startswith("kiln-metrics targets: error: sinfo --noheader")
    assert done.stderr.endswith("failed: sinfo not found on PATH\n") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "targets").exists()


def test_once_that_cannot_write_is_exit_1_and_one_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    (tmp_path / "file").write_text("")

    done = _run(["--dir", str(tmp_path / "file" / "targets"), "--exporters", "node", "--once"], path_first(bin_dir))

    assert done.returncode == 1
    assert done.stderr == (
        f"kiln-metrics targets: error: cannot write the targets in {tmp_path / 'file' / 'targets'}: Not a directory\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exporters", "node,slurm"], "argument --exporters: 'slurm' is not a per-node exporter"),
        (["--exporters", "node,gpu"], "argument --exporters: unknown exporter 'gpu' (known: dcgm, efa, node, slurm)"),
        (["--exporters", ""], "argument --exporters: expected exporter names separated by commas"),
        (["--exporters", "node", "--interval", "0"], "argument --interval: expected a positive number of seconds"),
        (["--exporters", "node", "--interval", "nan"], "argument --interval: expected a positive number of seconds"),
        (["--exporters", "node", "--interval", "soon"], "argument --interval: expected a positive number of seconds"),
        (["--exporters", "node", "--self", ""], "argument --self: expected a non-empty, printable node name"),
        ([], "the following arguments are required: --exporters"),
    ],
)
def test_a_bad_command_line_is_exit_2_and_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = _run(["--dir", str(tmp_path / "targets"), *args])

    assert done.returncode == 2
    assert done.stderr.startswith(f"kiln-metrics targets: error: {message}"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "targets").exists()


def test_the_loop_follows_sinfo_keeps_the_files_through_failures_and_stops_on_sigterm(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    directory = tmp_path / "targets"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    args = ["targets", "--dir", str(directory), "--exporters", "node,dcgm", "--self", "head", "--interval", "0.05"]

    with exporter(args, path_first(bin_dir)) as running:
        assert running.next_line() == (
            f"kiln-metrics targets: writing node.json, dcgm.json in {directory} from sinfo every 0.05 s"
        )
        assert running.next_line() == f"kiln-metrics targets: wrote {directory / 'node.json'}: 6 targets"
        assert running.next_line() == f"kiln-metrics targets: wrote {directory / 'dcgm.json'}: 4 targets"

        # A node goes away: the next round says so, in node.json alone.
        fake_sinfo(
            bin_dir, sinfo_prints(SINFO_TEXT.replace("cpu-st-c7-1|10.0.32.5|idle|", "cpu-st-c7-1|10.0.32.5|idle~|"))
        )
        assert running.next_line() == f"kiln-metrics targets: wrote {directory / 'node.json'}: 5 targets"
        before = snapshot(directory)

        # The controller goes away, then answers nonsense: one line a round, and the files stay.
        fake_sinfo(bin_dir, sinfo_fails())
        assert running.next_line() == f"kiln-metrics targets: {FAILED}; the previous targets stay"
        fake_sinfo(bin_dir, sinfo_prints("p5-st-p5-1 10.0.64.11 mixed\n"))
        while "printed what kiln cannot read" not in (line := running.next_line()):
            assert line == f"kiln-metrics targets: {FAILED}; the previous targets stay"
        assert line.endswith("expected 4 fields, got 'p5-st-p5-1 10.0.64.11 mixed'; the previous targets stay")
        assert snapshot(directory) == before

        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        rest = running.rest()
    assert rest[-1] == "kiln-metrics targets: stopping on SIGTERM"
    assert all("printed what kiln cannot read" in line for line in rest[:-1])
    assert snapshot(directory) == before


def test_the_loop_stops_on_sigint_without_a_traceback(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    args = ["targets", "--dir", str(tmp_path / "targets"), "--exporters", "dcgm", "--interval", "30"]

    with exporter(args, path_first(bin_dir)) as running:
        assert running.next_line().startswith("kiln-metrics targets: writing dcgm.json in ")
        assert running.next_line().endswith("dcgm.json: 4 targets")
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        assert running.rest() == ["kiln-metrics targets: stopping on SIGINT"]
