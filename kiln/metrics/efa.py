"""The EFA exporter: each EFA device's ports and hardware counters, read from sysfs at each scrape."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

EFA_DRIVER = "efa"
# `lifespan` is how long the kernel caches the counters (a setting), not something that counts.
NOT_COUNTERS = frozenset({"lifespan"})
# Counter names that would collide with the exporter's own families.
OWN_FAMILIES = frozenset({"devices", "port_active"})
ACTIVE_PORT_STATE = 4  # IB_PORT_ACTIVE: sysfs prints "4: ACTIVE"


@dataclass(frozen=True)
class EfaPort:
    """One port of an EFA device: its state and integer hardware counters."""

    device: str
    port: str
    active: bool
    counters: Mapping[str, int] = field(default_factory=dict)


def infiniband_dir(sysfs: Path) -> Path:
    """Return where the kernel lists RDMA devices under SYSFS."""
    return sysfs / "class" / "infiniband"


def is_efa_device(device_dir: Path) -> bool:
    """Return whether DEVICE_DIR is bound to the efa driver (its device/driver link ends in `efa`)."""
    try:
        target = os.readlink(device_dir / "device" / "driver")
    except OSError:
        return False
    return os.path.basename(target.rstrip("/")) == EFA_DRIVER


def find_efa_devices(sysfs: Path) -> list[str]:
    """Return the names of the EFA devices under SYSFS, sorted (none when there is no RDMA device at all)."""
    try:
        entries = sorted(infiniband_dir(sysfs).iterdir())
    except OSError:
        return []
    return [entry.name for entry in entries if is_efa_device(entry)]


def port_is_active(state: str) -> bool:
    """Return whether a port's sysfs `state` text (e.g. `4: ACTIVE`) says it is active."""
    number, _, name = state.strip().partition(":")
    if name.strip():
        return name.strip().upper() == "ACTIVE"
    return number.strip() == str(ACTIVE_PORT_STATE)


def counter_name(file_name: str) -> str:
    """Return a hardware counter file's name as a metric name part: lowercase [a-z0-9_]."""
    name = re.sub(r"[^a-z0-9_]", "_", file_name.lower())
    # prometheus_client appends _total to a counter; a name carrying it already would be doubled.
    return name.removesuffix("_total")


def read_counters(counters_dir: Path) -> dict[str, int]:
    """Return every integer counter in COUNTERS_DIR by sanitized name; unreadable or other files are skipped."""
    counters: dict[str, int] = {}
    try:
        files = sorted(counters_dir.iterdir())
    except OSError:
        return counters
    for path in files:
        name = counter_name(path.name)
        if path.name in NOT_COUNTERS or name in OWN_FAMILIES or name in counters or not name:
            continue
        try:
            value = int(path.read_text().strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if value >= 0:
            counters[name] = value
    return counters


def read_ports(sysfs: Path, device: str) -> list[EfaPort]:
    """Return DEVICE's ports, in port order."""
    ports_dir = infiniband_dir(sysfs) / device / "ports"
    try:
        names = sorted((entry.name for entry in ports_dir.iterdir()), key=lambda n: (not n.isdigit(), n.zfill(8)))
    except OSError:
        return []
    ports = []
    for port in names:
        try:
            active = port_is_active((ports_dir / port / "state").read_text())
        except (OSError, UnicodeDecodeError):
            active = False
        ports.append(EfaPort(device, port, active, read_counters(ports_dir / port / "hw_counters")))
    return ports


def efa_families(devices: Sequence[str], ports: Sequence[EfaPort]) -> list[Metric]:
    """Return the device count, each port's state, and one counter family per hardware counter."""
    count = GaugeMetricFamily("kiln_efa_devices", "EFA devices found in sysfs.", value=len(devices))
    active = GaugeMetricFamily(
        "kiln_efa_port_active", "1 when the EFA port is ACTIVE, else 0.", labels=["device", "port"]
    )
    counters: dict[str, CounterMetricFamily] = {}
    for port in ports:
        active.add_metric([port.device, port.port], int(port.active))
        for name, value in sorted(port.counters.items()):
            family = counters.get(name)
            if family is None:
                family = counters[name] = CounterMetricFamily(
                    f"kiln_efa_{name}", f"EFA hardware counter {name} of the port.", labels=["device", "port"]
                )
            family.add_metric([port.device, port.port], value)
    return [count, active, *(counters[name] for name in sorted(counters))]


class EfaCollector(Collector):
    """Collect the kiln_efa_* families from sysfs at each scrape."""

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        self.sysfs = sysfs

    def collect(self) -> Iterator[Metric]:
        """Yield the EFA families as sysfs shows them now."""
        devices = find_efa_devices(self.sysfs)
        ports = [port for device in devices for port in read_ports(self.sysfs, device)]
        yield from efa_families(devices, ports)
