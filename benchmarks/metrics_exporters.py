"""Measure kiln-metrics' exporter code paths at cluster scale: the Slurm scrape, the targets refresh, the EFA collector.

Usage: .venv/bin/python benchmarks/metrics_exporters.py [--repeat N] [--sizes 16,256,2048]

Fake `sinfo` and `squeue` first on PATH print pre-generated text (generation not timed) for clusters of each size:
every node in partition gpu, every 4th also in long, a mix of states (allocated, mixed, idle, powered off,
powering up, drained, draining, down, completing, reserved), gres gpu:h100:8, and 10 jobs per node in squeue (running,
completing, pending for a spread of reasons). Each figure is over N runs:
  slurm scrape      kiln.metrics.slurm.scrape(): both clients run side by side, their text parsed;
  slurm exposition  generate_latest() over a registry holding a SlurmCollector: the scrape plus the families
                    and the text a Prometheus scrape of the Slurm exporter gets;
  targets first     kiln.metrics.targets.refresh() for node, dcgm and efa into an empty directory (writes all);
  targets again     the same refresh over its own files with sinfo unchanged (reads, writes nothing);
  efa exposition    generate_latest() over an EfaCollector reading a fake sysfs of 32 EFA devices (p5.48xlarge).
The spawned clients are shell scripts running cat, so the Slurm figures include two process starts per scrape
but no Slurm controller.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.registry import Collector, CollectorRegistry  # noqa: E402

from kiln.metrics.efa import EfaCollector  # noqa: E402
from kiln.metrics.slurm import SlurmCollector, scrape  # noqa: E402
from kiln.metrics.targets import TARGETS_COMMAND, parse_exporters, refresh  # noqa: E402

CPUS = 192  # p5.48xlarge
GRES = "gpu:h100:8(S:0-1)"
# One node in every 50 has each state this many times; sinfo's StateLong, flags included.
STATE_MIX = (
    ("allocated", 22),
    ("mixed", 10),
    ("idle", 6),
    ("idle~", 5),
    ("idle#", 1),
    ("drained", 2),
    ("draining", 1),
    ("down*", 1),
    ("completing", 1),
    ("reserved", 1),
)
STATES = [state for state, count in STATE_MIX for _ in range(count)]
# CPUsState (allocated/idle/other/total) and GresUsed per state.
USE = {
    "allocated": (f"{CPUS}/0/0/{CPUS}", "gpu:h100:8(IDX:0-7)"),
    "completing": (f"{CPUS}/0/0/{CPUS}", "gpu:h100:8(IDX:0-7)"),
    "mixed": (f"96/96/0/{CPUS}", "gpu:h100:4(IDX:0-3)"),
    "draining": (f"96/0/96/{CPUS}", "gpu:h100:4(IDX:0-3)"),
    "drained": (f"0/0/{CPUS}/{CPUS}", "gpu:h100:0(IDX:N/A)"),
    "down*": (f"0/0/{CPUS}/{CPUS}", "gpu:h100:0(IDX:N/A)"),
}
IDLE_USE = (f"0/{CPUS}/0/{CPUS}", "gpu:h100:0(IDX:N/A)")
JOBS_PER_NODE = 10
# One job in every 20: 8 running, 1 completing, 11 pending; %r as squeue prints it.
JOB_MIX = (
    *[("RUNNING", "None")] * 8,
    ("COMPLETING", "None"),
    *[("PENDING", "Resources")] * 4,
    *[("PENDING", "Priority")] * 2,
    ("PENDING", "Dependency"),
    ("PENDING", "ReqNodeNotAvail, UnavailableNodes:gpu-dy-p5-[3-6,41]"),
    ("PENDING", "QOSMaxGRESPerUser"),
    ("PENDING", "JobHeldUser"),
    ("PENDING", "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"),
)
EFA_DEVICES = 32
# Port counters the efa driver exposes, plus the rdma core's lifespan (not a counter).
EFA_COUNTERS = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_bytes",
    "rdma_read_wrs",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_wrs",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "impaired_remote_conn_events",
    "unresponsive_remote_events",
    "lifespan",
)
TARGET_EXPORTERS = "node,dcgm,efa"


def node_name(index: int, size: int) -> str:
    # ParallelCluster's names: three quarters static nodes, the rest dynamic.
    static = size * 3 // 4
    return f"gpu-st-p5-{index + 1}" if index < static else f"gpu-dy-p5-{index - static + 1}"


def cluster_text(size: int) -> tuple[str, str, str]:
    """Return what sinfo prints for the Slurm exporter and for the targets, and what squeue prints, for SIZE nodes."""
    sinfo, targets, squeue = [], [], []
    for index in range(size):
        name = node_name(index, size)
        state = STATES[index * 7 % len(STATES)]
        if "-dy-" not in name and state in ("idle~", "idle#"):
            state = "idle"  # static nodes are never powered off
        cpus, gres_used = USE.get(state, IDLE_USE)
        # A powered-off or launching cloud node has no address yet: sinfo shows its name.
        address = name if state in ("idle~", "idle#") else f"10.0.{index // 250}.{index % 250 + 4}"
        for partition in ("gpu", "long") if index % 4 == 0 else ("gpu",):
            sinfo.append(f"{name}|{partition}|{state}|{cpus}|{GRES}|{gres_used}")
            targets.append(f"{name}|{address}|{state}|{GRES}")
    for job in range(size * JOBS_PER_NODE):
        state, reason = JOB_MIX[job * 3 % len(JOB_MIX)]
        partition = "gpu,long" if state == "PENDING" and job % 5 == 0 else ("long" if job % 4 == 0 else "gpu")
        squeue.append(f"{partition}|{state}|{reason}")
    return "\n".join(sinfo) + "\n", "\n".join(targets) + "\n", "\n".join(squeue) + "\n"


def install_fake_slurm(bin_dir: Path, data: Path) -> None:
    """Put sinfo and squeue in BIN_DIR that print DATA's files; sinfo tells the targets' fields from the exporter's."""
    bin_dir.mkdir(parents=True)
    marker = TARGETS_COMMAND[-1]
    scripts = {
        "sinfo": f'case "$*" in\n  *{shlex.quote(marker)}*) exec cat {shlex.quote(str(data / "targets.txt"))} ;;\n'
        f"  *) exec cat {shlex.quote(str(data / 'sinfo.txt'))} ;;\nesac\n",
        "squeue": f"exec cat {shlex.quote(str(data / 'squeue.txt'))}\n",
    }
    for name, body in scripts.items():
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)


def add_efa_device(sysfs: Path, index: int) -> None:
    """Lay out one EFA device as the kernel does: class link, PCI function bound to efa, port 1 and its counters."""
    name = f"rdmap{index + 16}s0"
    pci_dir = sysfs / "devices" / "pci0000:00" / f"0000:{index + 16:02x}:00.0"
    device_dir = pci_dir / "infiniband" / name
    drivers = sysfs / "bus" / "pci" / "drivers" / "efa"
    drivers.mkdir(parents=True, exist_ok=True)
    device_dir.mkdir(parents=True)
    os.symlink(os.path.relpath(drivers, pci_dir), pci_dir / "driver")
    os.symlink(os.path.relpath(pci_dir, device_dir), device_dir / "device")
    class_dir = sysfs / "class" / "infiniband"
    class_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device_dir, class_dir), class_dir / name)
    port_dir = device_dir / "ports" / "1"
    (port_dir / "hw_counters").mkdir(parents=True)
    (port_dir / "state").write_text("4: ACTIVE\n")
    for number, counter in enumerate(EFA_COUNTERS):
        (port_dir / "hw_counters" / counter).write_text(f"{(index + 1) * (number + 1) * 1_000_003}\n")


def registry_of(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def timings(repeat: int, action: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def median_p95(samples: list[float]) -> str:
    p95 = statistics.quantiles(samples, n=20, method="inclusive")[18]
    return f"{statistics.median(samples) * 1000:8.1f} {p95 * 1000:8.1f}"


def series(exposition: bytes) -> int:
    return sum(1 for line in exposition.decode().splitlines() if line and not line.startswith("#"))


def bench_size(size: int, repeat: int, data: Path, targets_dir: Path, registry: CollectorRegistry) -> tuple[str, str]:
    """Write SIZE nodes' Slurm output into DATA, time the Slurm scrape and the targets refresh; return their rows."""
    sinfo_text, targets_text, squeue_text = cluster_text(size)
    (data / "sinfo.txt").write_text(sinfo_text)
    (data / "targets.txt").write_text(targets_text)
    (data / "squeue.txt").write_text(squeue_text)
    lines = f"{sinfo_text.count(chr(10))}/{squeue_text.count(chr(10))}"

    scraped = timings(repeat, scrape)
    exposed = timings(repeat, lambda: generate_latest(registry))
    exposition = generate_latest(registry)
    slurm_row = (
        f"{size:6d} {lines:>12} {median_p95(scraped)} {median_p95(exposed)} "
        f"{len(exposition):10,d} {series(exposition):7,d}"
    )

    exporters = parse_exporters(TARGET_EXPORTERS)
    runs = iter(range(repeat))
    first = timings(repeat, lambda: refresh(targets_dir / str(next(runs)), exporters))
    directory = targets_dir / "0"
    again = timings(repeat, lambda: refresh(directory, exporters))
    rewritten = len(refresh(directory, exporters))
    files = "  ".join(
        f"{path.stem} {path.stat().st_size:,}/{len(json.loads(path.read_text())):,}"
        for path in sorted(directory.glob("*.json"))
    )
    return slurm_row, f"{size:6d} {median_p95(first)} {median_p95(again)} {rewritten:8d}  {files}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--sizes", default="16,256,2048", help="cluster sizes in nodes, separated by commas")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    slurm_rows, targets_rows = [], []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-metrics-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        install_fake_slurm(work / "bin", data)
        os.environ["PATH"] = f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}"
        registry = registry_of(SlurmCollector())
        for size in sizes:
            slurm_row, targets_row = bench_size(size, args.repeat, data, work / "targets" / str(size), registry)
            slurm_rows.append(slurm_row)
            targets_rows.append(targets_row)

        sysfs = work / "sys"
        for index in range(EFA_DEVICES):
            add_efa_device(sysfs, index)
        efa_registry = registry_of(EfaCollector(sysfs))
        efa = timings(args.repeat, lambda: generate_latest(efa_registry))
        efa_exposition = generate_latest(efa_registry)

    print(f"{args.repeat} runs each; times in ms (median, p95)")
    print()
    print("Slurm exporter (fake sinfo/squeue)        scrape()        generate_latest()   exposition")
    print(" nodes  sinfo/squeue   median      p95   median      p95      bytes  series")
    for row in slurm_rows:
        print(row)
    print()
    print(f"kiln-metrics targets refresh ({TARGET_EXPORTERS})")
    print(" nodes    first refresh    unchanged refresh   writes  files")
    print("         median      p95   median      p95    again  (name bytes/targets)")
    for row in targets_rows:
        print(row)
    print()
    ports = f"{EFA_DEVICES} devices x 1 port x {len(EFA_COUNTERS)} counter files"
    print(f"EFA exporter ({ports})")
    median, p95 = median_p95(efa).split()
    print(f"  collect + generate_latest  median {median} ms, p95 {p95} ms")
    print(f"  exposition {len(efa_exposition):,} bytes, {series(efa_exposition):,} series")


if __name__ == "__main__":
    main()
