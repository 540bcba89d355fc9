"""Fakes for the exporters: a sysfs tree laid out like the kernel's, Slurm clients that print canned text."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

# What `sinfo --noheader --Node --all --Format=NodeList:|,...,GresUsed:` prints: one line per node and partition.
SINFO_TEXT = """\
gpu-st-p5-1|gpu|mixed|96/96/0/192|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-2)
gpu-st-p5-2|gpu|allocated|192/0/0/192|gpu:h100:8(S:0-1)|gpu:h100:8(IDX:0-7)
gpu-st-p5-3|gpu|idle~|0/192/0/192|gpu:h100:8(S:0-1)|gpu:h100:0(IDX:N/A)
gpu-st-p5-4|gpu|drained*|0/0/192/192|gpu:h100:8(S:0-1)|gpu:0
gpu-st-p5-1|debug|mixed|96/96/0/192|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-2)
trn-st-trn1-1|trn|draining@|32/96/0/128|neuron:16|neuron:4
cpu-1|cpu|down*|0/0/8/8|(null)|(null)
cpu-2|cpu|idle|0/8/0/8|(null)|gpu:0
"""
# What `squeue --noheader --all --array --format=%P|%T|%r` prints.
SQUEUE_TEXT = """\
gpu|RUNNING|None
gpu|RUNNING|None
gpu|PENDING|Resources
gpu|PENDING|Priority
gpu,debug|PENDING|Resources
trn|PENDING|ReqNodeNotAvail, UnavailableNodes:trn-st-trn1-[2-4]
debug|COMPLETING|None
cpu|PENDING|Dependency
"""
CONTROLLER_DOWN = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"


def write_fake_command(bin_dir: Path, name: str, stdout: str = "", stderr: str = "", exit_code: int = 0) -> Path:
    """Write an executable NAME into BIN_DIR that records its arguments and environment, then prints canned text."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / f"{name}.stdout").write_text(stdout)
    (bin_dir / f"{name}.stderr").write_text(stderr)
    script = bin_dir / name
    script.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$@" > "$0.args"\n'
        'printf "SLURM_CONF=%s\\nSINFO_PARTITION=%s\\n" "${SLURM_CONF-unset}" "${SINFO_PARTITION-unset}" > "$0.env"\n'
        'cat "$0.stdout"\n'
        'cat "$0.stderr" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def write_slow_command(bin_dir: Path, name: str, seconds: int) -> Path:
    """Write an executable NAME into BIN_DIR that sleeps SECONDS (exec, so a kill reaches the sleep)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nexec sleep {seconds}\n")
    script.chmod(0o755)
    return script


def add_rdma_device(
    sysfs: Path,
    name: str,
    driver: str,
    pci: str,
    ports: Mapping[str, tuple[str, Mapping[str, str]]],
) -> Path:
    """Lay out an RDMA device as the kernel does; PORTS maps a port to its state text and hw_counters files."""
    pci_dir = sysfs / "devices" / "pci0000:00" / pci
    device_dir = pci_dir / "infiniband" / name
    (sysfs / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    device_dir.mkdir(parents=True)
    # The kernel's links are relative: class/infiniband/NAME -> the device, device -> its PCI function,
    # driver -> bus/pci/drivers/DRIVER.
    os.symlink(os.path.relpath(sysfs / "bus" / "pci" / "drivers" / driver, pci_dir), pci_dir / "driver")
    os.symlink(os.path.relpath(pci_dir, device_dir), device_dir / "device")
    class_dir = sysfs / "class" / "infiniband"
    class_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device_dir, class_dir), class_dir / name)
    for port, (state, counters) in ports.items():
        port_dir = device_dir / "ports" / port
        (port_dir / "hw_counters").mkdir(parents=True)
        (port_dir / "state").write_text(state + "\n")
        for counter, text in counters.items():
            (port_dir / "hw_counters" / counter).write_text(text)
    return device_dir


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    """Return a sample's labels as families_of keys them."""
    return tuple(sorted(values.items()))


def exposition(registry: CollectorRegistry) -> str:
    """Return REGISTRY's text exposition, as a scrape gets it."""
    return generate_latest(registry).decode()


def parse_exposition(text: str) -> tuple[Samples, dict[str, str]]:
    """Read TEXT back with prometheus_client's parser: family -> labels -> value, and family -> type."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        samples[family.name] = {tuple(sorted(sample.labels.items())): sample.value for sample in family.samples}
    return samples, types


def families_of(registry: CollectorRegistry) -> Samples:
    """Return what REGISTRY exposes, read back: family -> labels -> value."""
    return parse_exposition(exposition(registry))[0]
