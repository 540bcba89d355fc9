"""Instance facts and NCCL/EFA presets. Standard library only, so nodes can use it."""

from kiln.catalog.facts import (
    Accelerator,
    BusBandwidthFloor,
    InstanceType,
    LogicalCoreConfig,
    UnknownInstanceType,
    instance_type,
    known_instance_types,
)
from kiln.catalog.nccl import SoftwareVersions, preset_environment

__all__ = [
    "Accelerator",
    "BusBandwidthFloor",
    "InstanceType",
    "LogicalCoreConfig",
    "SoftwareVersions",
    "UnknownInstanceType",
    "instance_type",
    "known_instance_types",
    "preset_environment",
]
