"""Resolve which pinned downloads a bundle needs, with their URLs and sha256 digests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kiln.bootstrap.config import BootstrapConfig
from kiln.catalog import instance_type

ARTIFACTS_PATH = Path(__file__).parent / "artifacts.json"

_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}
_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_REPO_ARCH = {"x86_64": "x86_64", "arm64": "sbsa"}


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One download of one bundle: where from, which version, which digest ('' when none is known)."""

    name: str
    version: str
    url: str
    sha256: str

    @property
    def variable_prefix(self) -> str:
        return "KILN_ARTIFACT_" + self.name.upper().replace("-", "_")


@lru_cache(maxsize=1)
def artifact_table() -> dict[str, dict[str, Any]]:
    """Return artifacts.json keyed by artifact name."""
    return {entry["name"]: entry for entry in json.loads(ARTIFACTS_PATH.read_text())["artifacts"]}


def needed_artifacts(config: BootstrapConfig) -> tuple[str, ...]:
    """Return the names of the artifacts the install steps of CONFIG may download."""
    if config.target == "local":
        return ()
    facts = [instance_type(name) for name in config.instance_types]
    pins = config.software
    gpus = any(f.gpu_count for f in facts)
    apt = config.os.startswith("ubuntu")
    wanted = {
        "nvidia-driver": gpus and pins.nvidia_driver,
        "cuda-keyring": gpus and apt and pins.nvidia_driver and any(f.nvswitch for f in facts),
        "cuda-rpm-key": gpus and not apt and pins.nvidia_driver and any(f.nvswitch for f in facts),
        "efa-installer": any(f.efa_supported for f in facts) and pins.efa_installer,
        "nccl": gpus and pins.nccl,
        "fsx-lustre-client-key": config.lustre and apt,
        "enroot-deb": config.containers and config.runs_slurm and apt and pins.enroot,
        "enroot-caps-deb": config.containers and config.runs_slurm and apt and pins.enroot,
        "enroot-rpm": config.containers and config.runs_slurm and not apt and pins.enroot,
        "enroot-caps-rpm": config.containers and config.runs_slurm and not apt and pins.enroot,
        "pyxis": config.containers and config.runs_slurm and pins.pyxis,
        "nvidia-container-toolkit-key": config.containers and gpus and pins.nvidia_container_toolkit,
    }
    return tuple(name for name in artifact_table() if wanted.get(name))


def resolve_artifact(config: BootstrapConfig, name: str) -> Artifact:
    """Return artifact NAME with its URL filled in for CONFIG and its digest (spec first, then artifacts.json)."""
    entry = artifact_table()[name]
    version = entry.get("version") or getattr(config.software, entry["version_from"])
    if not version:
        raise ValueError(f"artifact {name}: software.{entry['version_from']} is not pinned")
    if "{nccl_cuda}" in entry["url"] and not config.software.nccl_cuda:
        raise ValueError(f"artifact {name}: software.nccl_cuda (the CUDA version of the NCCL build) is not pinned")
    url = entry["url"].format(
        version=version,
        arch=_ARCH[config.architecture],
        deb_arch=_DEB_ARCH[config.architecture],
        repo_arch=_REPO_ARCH[config.architecture],
        os=config.os,
        nccl_cuda=config.software.nccl_cuda or "",
    )
    published = entry["sha256"].get(version, "")
    return Artifact(name=name, version=version, url=url, sha256=config.checksums.get(name) or published)


def bundle_artifacts(config: BootstrapConfig) -> tuple[Artifact, ...]:
    """Return every artifact CONFIG's install steps may download, resolved."""
    return tuple(resolve_artifact(config, name) for name in needed_artifacts(config))
