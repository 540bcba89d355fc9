"""Instance facts: what EC2 publishes plus what kiln curates. Standard library only."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"
GENERATED_PATH = DATA_DIR / "instance_types.json"
CURATED_PATH = DATA_DIR / "curated.json"


class UnknownInstanceType(KeyError):
    """An instance type the catalog has no facts for."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(f"unknown instance type {name!r}{hint}")

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    """The accelerators of one instance: GPUs or Neuron devices."""

    kind: str
    manufacturer: str
    name: str
    count: int
    memory_mib: int


@dataclass(frozen=True, kw_only=True)
class BusBandwidthFloor:
    """All-reduce busbw (GB/s) below which a node or node pair is degraded."""

    intra_node: float
    inter_node: float


@dataclass(frozen=True, kw_only=True)
class InstanceType:
    """Everything kiln knows about one EC2 instance type."""

    name: str
    vcpus: int
    default_threads_per_core: int
    memory_mib: int
    architectures: tuple[str, ...]
    accelerator: Accelerator | None
    network_performance: str
    network_cards: int
    max_network_interfaces: int
    efa_supported: bool
    max_efa_interfaces: int
    efa_only_interfaces: bool
    instance_storage_gb: int
    nvlink_generation: int | None
    nvswitch: bool
    hyperpod: bool
    busbw_floor_gbps: BusBandwidthFloor | None

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def gpu_count(self) -> int:
        return self.accelerator.count if self.accelerator and self.accelerator.kind == "gpu" else 0

    @property
    def efa_interface_count(self) -> int:
        """EFA interfaces a node should carry: one per network card, capped by EC2."""
        if not self.efa_supported:
            return 0
        return min(self.network_cards, self.max_efa_interfaces)

    @property
    def hyperpod_name(self) -> str:
        return f"ml.{self.name}"


def _build(name: str, ec2: dict[str, Any], curated: dict[str, Any]) -> InstanceType:
    accelerator = ec2.get("accelerator")
    floor = curated.get("busbw_floor_gbps")
    return InstanceType(
        name=name,
        vcpus=ec2["vcpus"],
        default_threads_per_core=ec2["default_threads_per_core"],
        memory_mib=ec2["memory_mib"],
        architectures=tuple(ec2["architectures"]),
        accelerator=Accelerator(**accelerator) if accelerator else None,
        network_performance=ec2["network_performance"],
        network_cards=ec2["network_cards"],
        max_network_interfaces=ec2["max_network_interfaces"],
        efa_supported=ec2["efa_supported"],
        max_efa_interfaces=ec2["max_efa_interfaces"],
        efa_only_interfaces=ec2["efa_only_interfaces"],
        instance_storage_gb=ec2["instance_storage_gb"],
        nvlink_generation=curated["nvlink_generation"],
        nvswitch=curated["nvswitch"],
        hyperpod=curated["hyperpod"],
        busbw_floor_gbps=BusBandwidthFloor(**floor) if floor else None,
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, InstanceType]:
    generated = json.loads(GENERATED_PATH.read_text())["instance_types"]
    curated = json.loads(CURATED_PATH.read_text())["instance_types"]
    return {name: _build(name, generated[name], curated[name]) for name in sorted(curated) if name in generated}


def known_instance_types() -> tuple[str, ...]:
    """Return every instance type the catalog describes, sorted."""
    return tuple(_catalog())


def instance_type(name: str) -> InstanceType:
    """Return the facts for NAME, or raise UnknownInstanceType with close matches."""
    catalog = _catalog()
    if name.startswith("ml.") and name[3:] in catalog:
        return catalog[name[3:]]
    try:
        return catalog[name]
    except KeyError:
        raise UnknownInstanceType(name, difflib.get_close_matches(name, list(catalog), n=2, cutoff=0.6)) from None
