"""kiln-metrics agent-config: the Prometheus agent's configuration, checked by promtool and run by Prometheus."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiln.catalog.exporters import EXPORTERS
from kiln.metrics.agent import (
    FILE_SD_REFRESH_S,
    SCRAPE_INTERVAL_S,
    SCRAPE_TIMEOUT_S,
    agent_config,
    check_label_value,
    check_region,
    check_remote_write_url,
    write_agent_config,
)
from kiln.metrics.slurm import DEFAULT_TIMEOUT_S
from kiln.metrics.targets import parse_exporters, refresh
from tests.support.metrics import (
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

AMP_URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef/api/v1/remote_write"
ALL = parse_exporters("node,slurm,dcgm,efa")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
PROMETHEUS_TIMEOUT_S = 20.0


def _file_sd(directory: Path, job: str) -> list[dict]:
    return [{"files": [str(directory / f"{job}.json")], "refresh_interval": f"{FILE_SD_REFRESH_S}s"}]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln.metrics", "agent-config", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def _args(tmp_path: Path, *more: str, exporters: str = "node,slurm,dcgm,efa") -> list[str]:
    return [
        "--cluster", "p5-demo", "--targets-dir", str(tmp_path / "targets"), "--exporters", exporters,
        "--self", "head", "--out", str(tmp_path / "etc" / "agent.yml"), *more,
    ]  # fmt: skip


# Every target gets the cluster label the dashboards select, so a Prometheus queried where it scrapes has it too.
CLUSTER_LABEL = [{"target_label": "cluster", "replacement": "p5-demo"}]


def test_the_whole_configuration(tmp_path: Path) -> None:
    targets = tmp_path / "targets"

    config = agent_config(
        cluster="p5-demo",
        targets_dir=targets,
        exporters=ALL,
        self_name="head",
        remote_write_url=AMP_URL,
        region="us-east-1",
    )

    assert config == {
        # __replica__: Amazon Managed Prometheus deduplicates the agents of one cluster (PCS with two login nodes).
        "global": {
            "scrape_interval": "30s",
            "scrape_timeout": "20s",
            "external_labels": {"cluster": "p5-demo", "__replica__": "head"},
        },
        "scrape_configs": [
            {
                "job_name": "node",
                "static_configs": [{"targets": ["localhost:9100"], "labels": {"instance": "head", "node": "head"}}],
                "file_sd_configs": _file_sd(targets, "node"),
                "relabel_configs": CLUSTER_LABEL,
            },
            {
                "job_name": "slurm",
                # No node label: the Slurm exporter's samples carry their own, naming the node they describe.
                "static_configs": [{"targets": ["localhost:9341"], "labels": {"instance": "slurmctld"}}],
                "relabel_configs": CLUSTER_LABEL,
            },
            {"job_name": "dcgm", "file_sd_configs": _file_sd(targets, "dcgm"), "relabel_configs": CLUSTER_LABEL},
            {
                "job_name": "efa",
                "static_configs": [{"targets": ["localhost:9342"], "labels": {"instance": "head", "node": "head"}}],
                "file_sd_configs": _file_sd(targets, "efa"),
                "relabel_configs": CLUSTER_LABEL,
            },
        ],
        "remote_write": [{"url": AMP_URL, "sigv4": {"region": "us-east-1"}}],
    }


def test_remote_write_only_with_a_url_and_sigv4_only_with_a_region(tmp_path: Path) -> None:
    common = {"cluster": "c", "targets_dir": tmp_path, "exporters": ALL, "self_name": "head"}

    assert "remote_write" not in agent_config(**common)
    assert "remote_write" not in agent_config(**common, region="us-east-1")
    assert agent_config(**common, remote_write_url=AMP_URL)["remote_write"] == [{"url": AMP_URL}]
    local = agent_config(**common, remote_write_url="http://127.0.0.1:9090/api/v1/write", region="eu-west-2")
    assert local["remote_write"] == [{"url": "http://127.0.0.1:9090/api/v1/write", "sigv4": {"region": "eu-west-2"}}]


def test_jobs_follow_the_catalog_whatever_the_order_asked(tmp_path: Path) -> None:
    common = {"cluster": "c", "targets_dir": tmp_path, "self_name": "head"}

    assert agent_config(**common, exporters=reversed(ALL)) == agent_config(**common, exporters=ALL)
    assert agent_config(**common, exporters=parse_exporters("dcgm"))["scrape_configs"] == [
        {
            "job_name": "dcgm",
            "file_sd_configs": _file_sd(tmp_path, "dcgm"),
            "relabel_configs": [{"target_label": "cluster", "replacement": "c"}],
        }
    ]
    jobs = agent_config(**common, exporters=parse_exporters("efa,slurm"))["scrape_configs"]
    assert [job["job_name"] for job in jobs] == ["slurm", "efa"]


def test_a_relative_targets_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    config = agent_config(cluster="c", targets_dir=Path("targets"), exporters=ALL, self_name="head")

    assert config["scrape_configs"][0]["file_sd_configs"] == _file_sd(tmp_path / "targets", "node")


def test_a_scrape_outlasts_the_slurm_clients_and_ends_within_the_interval() -> None:
    # Prometheus refuses a timeout above the interval; below the clients' timeout, a slow controller would
    # read as a failed scrape rather than kiln_slurm_up 0.
    assert DEFAULT_TIMEOUT_S < SCRAPE_TIMEOUT_S < SCRAPE_INTERVAL_S


@pytest.mark.parametrize("value", ["p5-demo", "Cluster 1", "é-cluster"])
def test_check_label_value_accepts(value: str) -> None:
    assert check_label_value("cluster name", value) == value


@pytest.mark.parametrize("value", ["", " ", "a\nb", "a\tb", "a\x00"])
def test_check_label_value_refuses(value: str) -> None:
    with pytest.raises(ValueError, match="expected a non-empty, printable cluster name"):
        check_label_value("cluster name", value)
    with pytest.raises(ValueError, match="printable cluster name"):
        agent_config(cluster=value, targets_dir=Path("/t"), exporters=ALL, self_name="head")


@pytest.mark.parametrize(
    "url", [AMP_URL, "https://receiver.example:8443/write", "http://127.0.0.1:9090/api/v1/write", "http://localhost/w"]
)
def test_check_remote_write_url_accepts(url: str) -> None:
    assert check_remote_write_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://aps-workspaces.us-east-1.amazonaws.com/x", "expected an https:// URL"),
        ("http://10.0.0.1:9090/api/v1/write", "expected an https:// URL"),
        ("ftp://example.com/x", "expected an https:// URL"),
        ("https://", "expected an https:// URL"),
        ("aps-workspaces.us-east-1.amazonaws.com", "expected an https:// URL"),
        ("https://example.com:99999/x", "expected an https:// URL"),
        ("https://example.com/a b", "expected an https:// URL"),
        ("https://user:secret@example.com/x", "without credentials"),
    ],
)
def test_check_remote_write_url_refuses(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        check_remote_write_url(url)
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-2", "us-gov-west-1", "ap-southeast-7"])
def test_check_region_accepts(region: str) -> None:
    assert check_region(region) == region


@pytest.mark.parametrize("region", ["US-EAST-1", "useast1", "us-east-1 ", "us-east", "us-east-1a"])
def test_check_region_refuses(region: str) -> None:
    with pytest.raises(ValueError, match="expected an AWS region name such as us-east-1"):
        check_region(region)


def test_write_agent_config_writes_json_once(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "prometheus" / "agent.yml"
    config = agent_config(cluster="c", targets_dir=tmp_path, exporters=ALL, self_name="head")

    assert write_agent_config(path, config) is True
    assert json.loads(path.read_text()) == config
    age(path.parent)
    before = snapshot(path.parent)
    assert write_agent_config(path, config) is False
    assert snapshot(path.parent) == before


def test_the_cli_writes_prints_one_line_and_leaves_an_unchanged_file_alone(tmp_path: Path) -> None:
    out = tmp_path / "etc" / "agent.yml"
    args = _args(tmp_path, "--remote-write-url", AMP_URL, "--region", "us-east-1")

    done = _run(args)

    assert (done.returncode, done.stdout, done.stderr) == (0, f"wrote {out}\n", "")
    assert json.loads(out.read_text()) == agent_config(
        cluster="p5-demo",
        targets_dir=tmp_path / "targets",
        exporters=ALL,
        self_name="head",
        remote_write_url=AMP_URL,
        region="us-east-1",
    )
    age(out.parent)
    before = snapshot(out.parent)
    again = _run(args)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert snapshot(out.parent) == before

    # The bootstrap passes its variables set or not: empty means no remote write.
    empty = _run(_args(tmp_path, "--remote-write-url", "", "--region", ""))
    assert (empty.returncode, empty.stdout) == (0, f"wrote {out}\n")
    assert "remote_write" not in json.loads(out.read_text())


def test_the_cli_that_cannot_write_is_exit_1_and_one_line(tmp_path: Path) -> None:
    (tmp_path / "etc").write_text("")

    done = _run(_args(tmp_path))

    assert done.returncode == 1
    assert (
        done.stderr
        == f"kiln-metrics agent-config: error: cannot write {tmp_path / 'etc' / 'agent.yml'}: Not a directory\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", ""], "argument --cluster: expected a non-empty, printable cluster name (got '')"),
        (["--cluster", "a\tb"], "argument --cluster: expected a non-empty, printable cluster name"),
        (["--self", " "], "argument --self: expected a non-empty, printable node name"),
        (["--remote-write-url", "http://10.0.0.1/w"], "argument --remote-write-url: expected an https:// URL"),
        (["--remote-write-url", "https://u:p@h/w"], "argument --remote-write-url: expected a URL without credentials"),
        (["--region", "US-EAST-1"], "argument --region: expected an AWS region name such as us-east-1"),
        (["--exporters", "node,prometheus"], "argument --exporters: unknown exporter 'prometheus'"),
    ],
)
def test_a_bad_command_line_is_exit_2_and_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = _run(_args(tmp_path, *args))

    assert done.returncode == 2
    assert done.stderr.startswith(f"kiln-metrics agent-config: error: {message}"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "etc").exists()


def test_a_missing_argument_is_exit_2_and_one_line(tmp_path: Path) -> None:
    done = _run(_args(tmp_path)[:-2])

    assert done.returncode == 2
    assert done.stderr == "kiln-metrics agent-config: error: the following arguments are required: --out\n"


@pytest.fixture
def targets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The targets kiln-metrics targets writes from a fake sinfo: promtool reads them too."""
    bin_dir = tmp_path / "bin"
    fake_sinfo(bin_dir, sinfo_prints(SINFO_TEXT))
    monkeypatch.setenv("PATH", path_first(bin_dir)["PATH"])
    directory = tmp_path / "targets"
    refresh(directory, parse_exporters("node,dcgm,efa"), "head")
    return directory


def _promtool(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), "check", "config", *flags, str(config)],
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
@pytest.mark.parametrize("mode", [("--agent",), ()], ids=["agent", "server"])
@pytest.mark.parametrize(
    "remote_write",
    [(), ("--remote-write-url", AMP_URL), ("--remote-write-url", AMP_URL, "--region", "us-east-1")],
    ids=["local", "remote-write", "sigv4"],
)
def test_promtool_accepts_the_configuration_and_the_targets(
    targets_dir: Path, tmp_path: Path, mode: tuple[str, ...], remote_write: tuple[str, ...]
) -> None:
    assert _run(_args(tmp_path, *remote_write)).returncode == 0

    done = _promtool(tmp_path / "etc" / "agent.yml", *mode)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "WARNING" not in done.stdout + done.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
def test_promtool_reads_the_targets_files_named_in_the_configuration(targets_dir: Path, tmp_path: Path) -> None:
    assert _run(_args(tmp_path)).returncode == 0
    (targets_dir / "dcgm.json").write_text('[{"targets": "10.0.64.11:9400"}]\n')

    done = _promtool(tmp_path / "etc" / "agent.yml", "--agent")

    assert done.returncode == 1 and "dcgm.json" in done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _agent_flag() -> str:
    version = subprocess.run([str(PROMETHEUS), "--version"], capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"version (\d+)\.", version)
    # Prometheus 3 has --agent; 2.x (Debian 12's 2.42) the feature flag.
    return "--agent" if match and int(match.group(1)) >= 3 else "--enable-feature=agent"


def _active_targets(port: int) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/targets"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return json.load(response)["data"]["activeTargets"]
    except OSError:
        return []


@pytest.fixture
def prometheus_agent(tmp_path: Path) -> Iterator[Callable[[Path], int]]:
    """Start a Prometheus agent on a free loopback port, its storage and log in TMP_PATH; stop it afterwards."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(config: Path) -> int:
        port = _free_port()
        with (tmp_path / "prometheus.log").open("ab") as log:
            processes.append(
                subprocess.Popen(
                    [
                        str(PROMETHEUS),
                        _agent_flag(),
                        f"--config.file={config}",
                        f"--storage.agent.path={tmp_path / 'wal'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],  # fmt: skip
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        return port

    yield start
    for process in processes:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(EXIT_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus)")
def test_a_real_prometheus_agent_scrapes_the_nodes_kiln_metrics_targets_found(
    tmp_path: Path, prometheus_agent: Callable[[Path], int]
) -> None:
    # A node of its own on loopback, at the exporters' real ports: 127.0.0.1 stays for the agent's own node.
    node = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"  # noqa: S311
    bin_dir = tmp_path / "bin"
    fake_sinfo(
        bin_dir,
        sinfo_prints(f"gpu-1|{node}|mixed|gpu:h100:8(S:0-1)\nhead|127.0.0.1|idle|(null)\ngpu-2|gpu-2|idle~|gpu:8\n"),
    )
    targets = tmp_path / "targets"
    found = subprocess.run(
        [sys.executable, "-m", "kiln.metrics", "targets", "--dir", str(targets), "--exporters", "node,dcgm,efa",
         "--self", "head", "--once"],
        cwd=ROOT, env=path_first(bin_dir), capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert _run(_args(tmp_path, exporters="node,dcgm,efa")).returncode == 0
    config = json.loads((tmp_path / "etc" / "agent.yml").read_text())
    # The generated configuration as it is, but scraping every second so the test needs not wait 30.
    config["global"].update(scrape_interval="1s", scrape_timeout="1s")
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(json.dumps(config))
    (tmp_path / "sys").mkdir()

    efa = ["efa", "--listen", f"{node}:{EXPORTERS['efa'].port}", "--sysfs", str(tmp_path / "sys")]
    with exporter(efa) as served:
        assert served.next_line() == f"kiln-metrics efa: serving http://{node}:9342/metrics"
        port = prometheus_agent(config_file)
        # Discovery hands targets to the scrape manager every 5 s in Prometheus 2.x.
        deadline = time.monotonic() + PROMETHEUS_TIMEOUT_S
        while True:
            active = {(t["labels"]["job"], t["labels"]["instance"]): t for t in _active_targets(port)}
            if active.get(("efa", "gpu-1"), {}).get("health") == "up" or time.monotonic() > deadline:
                break
            time.sleep(0.2)

    assert set(active) == {("node", "head"), ("node", "gpu-1"), ("efa", "head"), ("efa", "gpu-1"), ("dcgm", "gpu-1")}
    efa_target = active[("efa", "gpu-1")]
    assert efa_target["health"] == "up", (tmp_path / "prometheus.log").read_text()[-2000:]
    assert efa_target["scrapeUrl"] == f"http://{node}:9342/metrics"
    assert efa_target["labels"] == {"cluster": "p5-demo", "instance": "gpu-1", "job": "efa", "node": "gpu-1"}
    assert efa_target["discoveredLabels"]["__meta_filepath"] == str(targets / "efa.json")
    assert active[("dcgm", "gpu-1")]["scrapeUrl"] == f"http://{node}:9400/metrics"
    assert active[("node", "head")]["scrapeUrl"] == "http://localhost:9100/metrics"
    assert active[("node", "head")]["labels"] == {
        "cluster": "p5-demo",
        "instance": "head",
        "job": "node",
        "node": "head",
    }


def test_the_agent_scrapes_only_the_exporters_its_own_node_runs_where_they_listen(tmp_path):
    # The local cluster: its controller runs the Slurm exporter on the controller's address and no node exporter.
    config = agent_config(
        cluster="local",
        targets_dir=tmp_path,
        exporters=parse_exporters("node,slurm"),
        self_name="controller",
        self_address="10.77.0.1",
        self_exporters=("slurm",),
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["slurm"]["static_configs"] == [{"targets": ["10.77.0.1:9341"], "labels": {"instance": "slurmctld"}}]
    assert config["global"]["external_labels"] == {"cluster": "local"}
    assert "static_configs" not in jobs["node"]
    assert jobs["node"]["file_sd_configs"][0]["files"] == [str(tmp_path.resolve() / "node.json")]
