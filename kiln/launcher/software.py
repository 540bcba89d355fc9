"""Report the software a run used: Python, torch, CUDA, NCCL, kiln, libfabric, aws-ofi-nccl."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata

# Where the EFA installer puts fi_info; PATH is searched after it.
FI_INFO_CANDIDATES = ("/opt/amazon/efa/bin/fi_info",)


def versions(environ: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """Return the versions worth recording for a run (None where not present)."""
    import torch

    cuda = torch.version.cuda
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": cuda,
        "nccl": nccl_version(),
        "kiln": _distribution_version("kiln"),
        "libfabric": environ.get("KILN_LIBFABRIC_VERSION") or libfabric_version(),
        "aws_ofi_nccl": environ.get("KILN_AWS_OFI_NCCL_VERSION") or None,
    }


def nccl_version() -> str | None:
    """Return the NCCL version torch was built with, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    version = torch.cuda.nccl.version()
    if isinstance(version, int):
        # Older torch encodes 2.21.5 as 22105.
        return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return ".".join(str(part) for part in version)


def libfabric_version() -> str | None:
    """Return the libfabric version fi_info reports, or None when fi_info is absent."""
    fi_info = next((p for p in FI_INFO_CANDIDATES if os.access(p, os.X_OK)), None) or shutil.which("fi_info")
    if not fi_info:
        return None
    try:
        output = subprocess.run([fi_info, "--version"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_fi_info_version(output)


def parse_fi_info_version(output: str) -> str | None:
    """Return the libfabric version from ``fi_info --version`` output."""
    match = re.search(r"^libfabric:\s*(\S+)", output, re.MULTILINE)
    return match.group(1) if match else None


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
