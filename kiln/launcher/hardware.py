"""Look at the node itself: CUDA devices, EFA devices, the aws-ofi-nccl plugin (Neuron devices: neuron.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from kiln.catalog.nccl import efa_software

# EFA devices register with the RDMA core and appear here, one per interface.
INFINIBAND_SYSFS = Path("/sys/class/infiniband")
# Where the EFA installer and AWS's images put aws-ofi-nccl, and its file names (nccl_presets.json, efa_software).
OFI_NCCL_DIRS = efa_software().plugin_dirs
OFI_NCCL_NAMES = efa_software().plugin_names


def cuda_device_count() -> int:
    """Return the CUDA devices torch can see (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def efa_devices(sysfs: Path = INFINIBAND_SYSFS) -> list[str]:
    """Return the RDMA devices under SYSFS (on EC2, the EFA interfaces)."""
    if not sysfs.is_dir():
        return []
    return sorted(entry.name for entry in sysfs.iterdir())


def ofi_nccl_plugin(environ: Mapping[str, str] = os.environ, extra_dirs: Iterable[str] = OFI_NCCL_DIRS) -> str | None:
    """Return the path of the aws-ofi-nccl NCCL net plugin NCCL would find, or None."""
    named = environ.get("NCCL_NET_PLUGIN", "")
    if named.startswith("/") and Path(named).is_file():
        return named
    # NCCL dlopen()s the plugin by name, so LD_LIBRARY_PATH is where it really looks first.
    search = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(extra_dirs)
    for directory in search:
        for name in OFI_NCCL_NAMES:
            candidate = Path(directory) / name
            if candidate.is_file():
                return str(candidate)
    return None
