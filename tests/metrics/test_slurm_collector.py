"""The Slurm collector against fake sinfo and squeue first on PATH: what a scrape exposes, and how it fails."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from kiln.metrics.slurm import SINFO_COMMAND, SQUEUE_COMMAND, SlurmCollector
from tests.support.metrics import (
    CONTROLLER_DOWN,
    SINFO_TEXT,
    SQUEUE_TEXT,
    exposition,
    families_of,
    labels,
    parse_exposition,
    write_fake_command,
    write_slow_command,
)

NODE_FAMILIES = {
    "kiln_slurm_nodes",
    "kiln_slurm_node_state",
    "kiln_slurm_node_cpus",
    "kiln_slurm_node_cpus_allocated",
    "kiln_slurm_node_gpus",
    "kiln_slurm_node_gpus_allocated",
    "kiln_slurm_node_neuron_devices",
    "kiln_slurm_node_neuron_devices_allocated",
    "kiln_slurm_node_reason",
}
JOB_FAMILIES = {"kiln_slurm_jobs", "kiln_slurm_jobs_pending_reason", "kiln_slurm_jobs_restarts"}
ALWAYS = {"kiln_slurm_up", "kiln_slurm_scrape_duration_seconds"}


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH for fake Slurm clients."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def _registry(collector: SlurmCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def test_a_scrape_runs_both_clients_and_exposes_every_family(fake_bin: Path, capsys: pytest.CaptureFixture) -> None:
    write_fake_command(fake_bin, "sinfo", SINFO_TEXT)
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)

    samples, types = parse_exposition(exposition(_registry(SlurmCollector())))

    assert set(samples) == ALWAYS | NODE_FAMILIES | JOB_FAMILIES
    assert set(types.values()) == {"gauge"}
    assert samples["kiln_slurm_up"] == {(): 1}
    assert 0 <= samples["kiln_slurm_scrape_duration_seconds"][()] < 10
    assert samples["kiln_slurm_nodes"][labels(partition="gpu", state="drained")] == 1
    assert samples["kiln_slurm_nodes"][labels(partition="debug", state="mixed")] == 1
    assert samples["kiln_slurm_node_state"][labels(node="cpu-1", state="down")] == 1
    assert samples["kiln_slurm_node_gpus"][labels(node="gpu-st-p5-1")] == 8
    assert samples["kiln_slurm_node_gpus_allocated"][labels(node="gpu-st-p5-1")] == 3
    assert samples["kiln_slurm_node_cpus"][labels(node="trn-st-trn1-1")] == 128
    assert samples["kiln_slurm_node_cpus_allocated"][labels(node="trn-st-trn1-1")] == 32
    assert samples["kiln_slurm_node_neuron_devices_allocated"][labels(node="trn-st-trn1-1")] == 4
    assert samples["kiln_slurm_jobs"][labels(partition="gpu", state="running")] == 2
    assert samples["kiln_slurm_jobs"][labels(partition="gpu", state="pending")] == 2
    assert samples["kiln_slurm_jobs_pending_reason"][labels(reason="Resources")] == 2
    assert samples["kiln_slurm_jobs_restarts"][labels(partition="gpu")] == 2
    assert samples["kiln_slurm_node_reason"] == {
        labels(node="gpu-st-p5-4", state="drained", reason="kiln-health: gpus: 7 of 8"): 1,
        labels(node="trn-st-trn1-1", state="draining", reason="kiln-hung: rank 3 | step 41"): 1,
        labels(node="cpu-1", state="down", reason="Not responding"): 1,
    }
    # The clients got exactly the machine-readable command lines.
    assert (fake_bin / "sinfo.args").read_text().splitlines() == list(SINFO_COMMAND[1:])
    assert (fake_bin / "squeue.args").read_text().splitlines() == list(SQUEUE_COMMAND[1:])
    assert capsys.readouterr().err == ""


def test_each_scrape_asks_slurm_again(fake_bin: Path) -> None:
    write_fake_command(fake_bin, "sinfo", SINFO_TEXT)
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)
    registry = _registry(SlurmCollector())
    assert families_of(registry)["kiln_slurm_jobs"][labels(partition="gpu", state="running")] == 2

    write_fake_command(fake_bin, "squeue", "gpu|RUNNING|0|None\n")
    assert families_of(registry)["kiln_slurm_jobs"][labels(partition="gpu", state="running")] == 1


def test_an_empty_cluster_and_queue_is_up_with_empty_families(fake_bin: Path) -> None:
    write_fake_command(fake_bin, "sinfo", "")
    write_fake_command(fake_bin, "squeue", "")

    samples = families_of(_registry(SlurmCollector()))

    assert samples["kiln_slurm_up"] == {(): 1}
    assert samples["kiln_slurm_jobs"] == {}
    assert samples["kiln_slurm_nodes"] == {}


def test_slurm_conf_reaches_the_clients_and_filters_do_not(
    fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_command(fake_bin, "sinfo", SINFO_TEXT)
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    # A partition filter left in the service's environment would hide nodes from the exporter.
    monkeypatch.setenv("SINFO_PARTITION", "gpu")

    assert families_of(_registry(SlurmCollector()))["kiln_slurm_up"] == {(): 1}
    assert (fake_bin / "sinfo.env").read_text().splitlines() == [
        f"SLURM_CONF={tmp_path / 'slurm.conf'}",
        "SINFO_PARTITION=unset",
    ]


def _assert_down(registry: CollectorRegistry, capsys: pytest.CaptureFixture) -> str:
    samples = families_of(registry)
    assert set(samples) == ALWAYS
    assert samples["kiln_slurm_up"] == {(): 0}
    assert samples["kiln_slurm_scrape_duration_seconds"][()] >= 0
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_failing_client_is_up_0_and_one_line(fake_bin: Path, capsys: pytest.CaptureFixture) -> None:
    write_fake_command(fake_bin, "sinfo", stderr=CONTROLLER_DOWN + "\n", exit_code=1)
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)

    err = _assert_down(_registry(SlurmCollector()), capsys)

    assert err == f"kiln-metrics slurm: {shlex.join(SINFO_COMMAND)} failed: exit 1: {CONTROLLER_DOWN}\n"


def test_a_failing_squeue_is_up_0_too(fake_bin: Path, capsys: pytest.CaptureFixture) -> None:
    write_fake_command(fake_bin, "sinfo", SINFO_TEXT)
    write_fake_command(fake_bin, "squeue", stderr="squeue: error: Invalid user\nsecond line\n", exit_code=1)

    err = _assert_down(_registry(SlurmCollector()), capsys)

    assert err.startswith("kiln-metrics slurm: squeue --noheader")
    assert err.endswith("failed: exit 1: squeue: error: Invalid user; second line\n")


def test_a_missing_client_is_up_0(fake_bin: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)
    monkeypatch.setenv("PATH", str(fake_bin))  # no sinfo anywhere

    err = _assert_down(_registry(SlurmCollector()), capsys)

    assert err.endswith("failed: sinfo not found on PATH\n")


def test_a_client_that_hangs_is_cut_at_the_timeout(fake_bin: Path, capsys: pytest.CaptureFixture) -> None:
    write_slow_command(fake_bin, "sinfo", 30)
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)

    started = time.monotonic()
    err = _assert_down(_registry(SlurmCollector(timeout_s=0.5)), capsys)

    assert time.monotonic() - started < 10
    assert err.endswith("failed: no answer within 0.5 s\n")


def test_output_kiln_cannot_read_is_up_0(fake_bin: Path, capsys: pytest.CaptureFixture) -> None:
    # What an sinfo too old for -O suffixes would print: the fields run together.
    write_fake_command(fake_bin, "sinfo", "gpu-st-p5-1gpumixed96/96/0/192gpu:8gpu:0\n")
    write_fake_command(fake_bin, "squeue", SQUEUE_TEXT)

    err = _assert_down(_registry(SlurmCollector()), capsys)

    assert "printed what kiln cannot read: sinfo line 1: expected 7 fields" in err
