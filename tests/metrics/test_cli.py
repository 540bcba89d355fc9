"""`python -m kiln.metrics` as a service runs it: serve on loopback, answer scrapes, stop on a signal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.metrics import (
    CONTROLLER_DOWN,
    EXIT_TIMEOUT_S,
    SINFO_TEXT,
    SQUEUE_TEXT,
    STARTUP_TIMEOUT_S,
    add_rdma_device,
    exporter,
    labels,
    parse_exposition,
    write_fake_command,
)
from tests.support.paths import ROOT


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:  # noqa: S310 - loopback
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def _run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln.metrics", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    add_rdma_device(
        root,
        "rdmap16s27",
        "efa",
        "0000:10:1b.0",
        {"1": ("4: ACTIVE", {"tx_bytes": "1000\n", "rx_bytes": "2000\n", "lifespan": "10\n"})},
    )
    add_rdma_device(root, "mlx5_0", "mlx5_core", "0000:30:00.0", {"1": ("4: ACTIVE", {"port_xmit_data": "1\n"})})
    return root


def test_efa_serves_metrics_on_the_bound_port_and_stops_on_sigterm(sysfs: Path) -> None:
    with exporter(["efa", "--listen", "127.0.0.1:0", "--sysfs", str(sysfs)]) as running:
        port = running.port()
        assert port > 0

        samples, types = parse_exposition(_get(port))
        assert samples["kiln_efa_devices"] == {(): 1}
        assert samples["kiln_efa_port_active"] == {labels(device="rdmap16s27", port="1"): 1}
        assert samples["kiln_efa_tx_bytes"] == {labels(device="rdmap16s27", port="1"): 1000}
        assert samples["kiln_efa_rx_bytes"] == {labels(device="rdmap16s27", port="1"): 2000}
        assert types["kiln_efa_tx_bytes"] == "counter"
        # Only kiln's collector: no process_*, python_* or lifespan families.
        assert set(samples) == {"kiln_efa_devices", "kiln_efa_port_active", "kiln_efa_tx_bytes", "kiln_efa_rx_bytes"}

        counters = sysfs / "class" / "infiniband" / "rdmap16s27" / "ports" / "1" / "hw_counters"
        (counters / "tx_bytes").write_text("1500\n")
        samples, _ = parse_exposition(_get(port))
        assert samples["kiln_efa_tx_bytes"] == {labels(device="rdmap16s27", port="1"): 1500}

        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        assert running.rest() == ["kiln-metrics efa: stopping on SIGTERM"]
    with pytest.raises(OSError):
        _get(port)


def test_sigint_stops_it_too_without_a_traceback(sysfs: Path) -> None:
    with exporter(["efa", "--listen", "127.0.0.1:0", "--sysfs", str(sysfs)]) as running:
        running.port()
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        assert running.rest() == ["kiln-metrics efa: stopping on SIGINT"]


def test_efa_without_devices_serves_zero_and_says_so_once(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    with exporter(["efa", "--listen", "127.0.0.1:0", "--sysfs", str(tmp_path / "sys")]) as running:
        port = running.port()
        assert running.next_line() == (
            f"kiln-metrics efa: no EFA device under {tmp_path / 'sys' / 'class' / 'infiniband'}; "
            "serving kiln_efa_devices 0"
        )
        for _ in range(2):
            samples, _ = parse_exposition(_get(port))
            assert samples == {"kiln_efa_devices": {(): 0}, "kiln_efa_port_active": {}}
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        assert running.rest() == ["kiln-metrics efa: stopping on SIGTERM"]


def test_slurm_serves_what_sinfo_and_squeue_print(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    write_fake_command(bin_dir, "sinfo", SINFO_TEXT)
    write_fake_command(bin_dir, "squeue", SQUEUE_TEXT)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    with exporter(["slurm", "--listen", "127.0.0.1:0"], env) as running:
        port = running.port()
        samples, _ = parse_exposition(_get(port))
        assert samples["kiln_slurm_up"] == {(): 1}
        assert samples["kiln_slurm_nodes"][labels(partition="gpu", state="idle")] == 1
        assert samples["kiln_slurm_node_gpus_allocated"][labels(node="gpu-st-p5-2")] == 8
        assert samples["kiln_slurm_jobs"][labels(partition="trn", state="pending")] == 1

        # The controller goes away: the next scrape says so, and the exporter keeps serving.
        write_fake_command(bin_dir, "sinfo", stderr=CONTROLLER_DOWN + "\n", exit_code=1)
        samples, _ = parse_exposition(_get(port))
        assert samples["kiln_slurm_up"] == {(): 0}
        assert set(samples) == {"kiln_slurm_up", "kiln_slurm_scrape_duration_seconds"}
        line = running.next_line()
        assert line.startswith("kiln-metrics slurm: sinfo --noheader") and line.endswith(CONTROLLER_DOWN)

        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(EXIT_TIMEOUT_S) == 0
        assert running.rest() == ["kiln-metrics slurm: stopping on SIGTERM"]


def test_a_port_in_use_is_exit_1_and_one_line(sysfs: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = _run(["efa", "--listen", f"127.0.0.1:{port}", "--sysfs", str(sysfs)])

    assert done.returncode == 1
    assert done.stderr == f"kiln-metrics efa: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


@pytest.mark.parametrize(
    "listen",
    ["127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:http", "localhost:9100", "1.2.3:9100",
     "[::1]:9100", "127.0.0.1:9100:1", ""],
)  # fmt: skip
def test_a_bad_listen_is_exit_2_and_one_line(listen: str, sysfs: Path) -> None:
    done = _run(["efa", "--listen", listen, "--sysfs", str(sysfs)])

    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("kiln-metrics efa: error: argument --listen: expected ")


def test_a_missing_sysfs_is_exit_2_and_one_line(tmp_path: Path) -> None:
    done = _run(["efa", "--listen", "127.0.0.1:0", "--sysfs", str(tmp_path / "missing")])

    assert done.returncode == 2
    assert done.stderr == f"kiln-metrics efa: error: argument --sysfs: '{tmp_path / 'missing'}' is not a directory\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "kiln-metrics: error: the following arguments are required: {slurm,efa,targets,agent-config}"),
        (
            ["prometheus"],
            "kiln-metrics: error: argument {slurm,efa,targets,agent-config}: invalid choice: 'prometheus'",
        ),
        (["slurm"], "kiln-metrics slurm: error: the following arguments are required: --listen"),
    ],
)
def test_a_bad_command_line_is_exit_2_and_one_line(args: list[str], message: str) -> None:
    done = _run(args)

    assert done.returncode == 2
    assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1
