"""Instance facts: what EC2 publishes plus what kiln curates. Standard library only."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kiln.catalog.names import ec2_type_name, hyperpod_type_name

DATA_DIR = Path(__file__).parent / "data"
GENERATED_PATH = DATA_DIR / "instance_types.json"
CURATED_PATH = DATA_DIR / "curated.json"

# Values of InstanceType.gpu_interconnect, from weakest to strongest link between the GPUs of one instance.
SINGLE_GPU = "single"
PCIE = "pcie"
NVLINK = "nvlink"
NVSWITCH = "nvswitch"
UNKNOWN = "unknown"
GPU_INTERCONNECTS = (SINGLE_GPU, PCIE, NVLINK, NVSWITCH, UNKNOWN)
# Values of InstanceType.accelerator_kind.
ACCELERATOR_KINDS = ("gpu", "neuron")

# Logical NeuronCore configuration (LNC, NEURON_LOGICAL_NC_CONFIG): from NeuronCore-v3 (Trainium2) on, the Neuron
# runtime accepts 1 or 2 physical cores per logical core and groups them in pairs unless told otherwise; older cores
# are exposed one by one. Keyed on EC2's CoreInfo.Version so a newer generation needs no listing. Source: AWS Neuron
# docs, "Logical NeuronCore configuration" (github.com/aws-neuron/aws-neuron-sdk, about-neuron/arch/neuron-features/
# logical-neuroncore-config.rst) and the compiler's error page NCC_EVRF066 (its LNC default is 2 on Trn2 and later).
LNC_FIRST_CORE_VERSION = 3


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
    count: int  # devices the guest sees
    memory_mib: int
    fraction: float = 1.0  # share of one physical GPU per device: below 1 on fractional-GPU types (g6f)
    core_count: int | None = None  # physical NeuronCores per Neuron device (EC2 CoreInfo.Count); None on GPUs
    core_version: int | None = None  # NeuronCore generation (EC2 CoreInfo.Version: 3 is Trainium2's v3)


@dataclass(frozen=True, kw_only=True)
class LogicalCoreConfig:
    """The logical NeuronCore configurations (LNC) a Neuron device accepts, and the runtime's default."""

    default: int
    allowed: tuple[int, ...]


PAIRED_CORES = LogicalCoreConfig(default=2, allowed=(1, 2))
SINGLE_CORES = LogicalCoreConfig(default=1, allowed=(1,))


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
    gpu_interconnect: str | None
    efa_device_rdma: bool
    hyperpod: bool
    busbw_floor_gbps: BusBandwidthFloor | None
    ena_only_cards: tuple[int, ...] = ()

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def accelerator_kind(self) -> str | None:
        """Return 'gpu', 'neuron' or None."""
        return self.accelerator.kind if self.accelerator else None

    @property
    def gpu_count(self) -> int:
        return self.accelerator.count if self.accelerator and self.accelerator.kind == "gpu" else 0

    @property
    def neuron_count(self) -> int:
        return self.accelerator.count if self.accelerator and self.accelerator.kind == "neuron" else 0

    @property
    def neuron_core_count(self) -> int:
        """Physical NeuronCores of the instance (0 without Neuron devices)."""
        return self.neuron_count * (self.accelerator.core_count or 0) if self.neuron_count else 0

    @property
    def lnc(self) -> LogicalCoreConfig | None:
        """Return the LNC settings the Neuron runtime accepts here (None without Neuron devices)."""
        if not self.neuron_count:
            return None
        return PAIRED_CORES if (self.accelerator.core_version or 0) >= LNC_FIRST_CORE_VERSION else SINGLE_CORES

    def logical_neuron_cores(self, lnc: int | None = None) -> int:
        """Return the NeuronCores the runtime exposes under LNC (None: its default); ValueError if not accepted."""
        config = self.lnc
        if config is None:
            raise ValueError(f"{self.name} has no Neuron devices")
        setting = config.default if lnc is None else lnc
        if setting not in config.allowed:
            allowed = " or ".join(str(a) for a in config.allowed)
            raise ValueError(f"LNC {setting} is not supported by {self.accelerator.name} ({self.name}): {allowed}")
        return self.neuron_core_count // setting

    @property
    def efa_interface_count(self) -> int:
        """EFA interfaces a node should carry: one per EFA-capable network card, capped by EC2."""
        return len(self.efa_cards)

    @property
    def efa_cards(self) -> tuple[int, ...]:
        """Network card indices that carry an EFA interface (not always 0..n-1: p6-b300's card 0 is ENA only)."""
        if not self.efa_supported:
            return ()
        cards = [card for card in range(self.network_cards) if card not in self.ena_only_cards]
        return tuple(cards[: self.max_efa_interfaces])

    @property
    def hyperpod_name(self) -> str:
        return hyperpod_type_name(self.name)


def _interconnect(accelerator: dict[str, Any] | None, model: dict[str, Any] | None, nvswitch_min: int) -> dict:
    """Derive NVLink, NVSwitch and the GPU interconnect from the accelerator model's curated row."""
    if not accelerator or accelerator["kind"] != "gpu":
        return {"nvlink_generation": None, "nvswitch": False, "gpu_interconnect": None}
    count = accelerator["count"]
    if model is None:
        return {"nvlink_generation": None, "nvswitch": False, "gpu_interconnect": UNKNOWN}
    if count < 2:
        # One GPU (or a slice of one) has no peer to link to, whatever the part supports.
        return {"nvlink_generation": None, "nvswitch": False, "gpu_interconnect": SINGLE_GPU}
    generation = model["nvlink_generation"]
    nvswitch = bool(generation) and model["nvswitch"] and count >= nvswitch_min
    kind = NVSWITCH if nvswitch else NVLINK if generation else PCIE
    return {"nvlink_generation": generation, "nvswitch": nvswitch, "gpu_interconnect": kind}


def _build(name: str, ec2: dict[str, Any], generated: dict[str, Any], curated: dict[str, Any]) -> InstanceType:
    accelerator = ec2.get("accelerator")
    omitted = curated["accelerators_ec2_omits"]["instance_types"].get(name)
    if accelerator is None and omitted:
        accelerator = generated.get(omitted["same_as"], {}).get("accelerator")
    models = curated["accelerator_models"]
    model = models["models"].get(accelerator["name"]) if accelerator else None
    floor = curated["busbw_floor_gbps"]["instance_types"].get(name)
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
        **_interconnect(accelerator, model, models["nvswitch_min_gpus"]),
        efa_device_rdma=bool(ec2["efa_supported"] and model and model["efa_device_rdma"]),
        hyperpod=hyperpod_type_name(name) in curated["hyperpod"]["instance_types"],
        busbw_floor_gbps=BusBandwidthFloor(**floor) if floor else None,
        ena_only_cards=tuple(ec2.get("ena_only_cards", ())),
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, InstanceType]:
    generated = json.loads(GENERATED_PATH.read_text())["instance_types"]
    curated = json.loads(CURATED_PATH.read_text())
    curated["hyperpod"]["instance_types"] = frozenset(curated["hyperpod"]["instance_types"])
    return {name: _build(name, generated[name], generated, curated) for name in sorted(generated)}


def known_instance_types() -> tuple[str, ...]:
    """Return every instance type the catalog describes, sorted."""
    return tuple(_catalog())


def instance_type(name: str) -> InstanceType:
    """Return the facts for NAME, or raise UnknownInstanceType with close matches."""
    catalog = _catalog()
    if ec2_type_name(name) != name and ec2_type_name(name) in catalog:
        return catalog[ec2_type_name(name)]
    try:
        return catalog[name]
    except KeyError:
        raise UnknownInstanceType(name, difflib.get_close_matches(name, list(catalog), n=2, cutoff=0.6)) from None
