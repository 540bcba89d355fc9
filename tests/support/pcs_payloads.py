"""Stand-ins for what a node downloads: PCS's installers and their signing key, NCCL's EFA plugin, each
pinned payload by URL."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

from kiln.bootstrap.artifacts import repository_table
from kiln.catalog.platforms import service_fact


def _tar_gz(members: dict[str, tuple[str, int]]) -> bytes:
    buffer = io.BytesIO()
    # mtime=0: the same members give the same bytes, so the checksums hold.
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w") as archive,
    ):
        for name, (text, mode) in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


PCS_KEY_FINGERPRINT = "1C2432C1862F64D1F90A239A7EEF030EDDF5C21C"


def stand_in_signature(data: bytes, fingerprint: str = PCS_KEY_FINGERPRINT) -> bytes:
    """Return the stand-in detached signature of DATA by FINGERPRINT's key, as the gpg shim checks it."""
    return f"SIGNED-BY={fingerprint}\nSHA256={hashlib.sha256(data).hexdigest()}\n".encode()


def _pcs_installer(directory: str, version_file: str, values: dict[str, str], headers: str = "") -> bytes:
    """Return a stand-in PCS installer tarball whose installer.sh records its version as the real one does (and,
    for Slurm's, puts Slurm's headers under HEADERS)."""
    lines = "".join(f"{name}={value}\n" for name, value in values.items())
    script = (
        '#!/bin/sh\necho "pcs-installer $*" >>"$SHIM_LOG"\n'
        f'mkdir -p "$KILN_ROOT{version_file.rsplit("/", 1)[0]}"\n'
        f"printf '{lines}' >\"$KILN_ROOT{version_file}\"\n"
    )
    if headers:
        script += f'mkdir -p "$KILN_ROOT{headers}/slurm"\ntouch "$KILN_ROOT{headers}/slurm/spank.h"\n'
    return _tar_gz({f"{directory}/installer.sh": (script, 0o755)})


def simulate_pcs_slurm(root: Path, major: str, version_file: str) -> None:
    """Lay out PCS's Slurm MAJOR under ROOT as its installer leaves it: the version file (holding VERSION_FILE) and
    Slurm's headers, under the prefix PCS installs that Slurm in."""
    prefix = root / service_fact("pcs", "slurm_prefix").value.format(version=major).lstrip("/")
    (prefix / "include/slurm").mkdir(parents=True, exist_ok=True)
    (prefix / "include/slurm/spank.h").write_text("")
    (prefix / "version").write_text(version_file)


def stand_in_key(repository: str, manager: str = "apt") -> bytes:
    """Return the stand-in signing key of REPOSITORY: the gpg shim reads the fingerprint kiln pins from it."""
    fingerprint = repository_table()[repository][manager]["fingerprint"]
    return f"stand-in key of {repository}\nFINGERPRINT={fingerprint}\n".encode()


PCS_AGENT = _pcs_installer("aws-pcs-agent", "/opt/aws/pcs/version", {"AGENT_VERSION": "1.3.1", "AGENT_RELEASE": "1"})


PCS_SLURM = _pcs_installer(
    "aws-pcs-slurm-25.11-installer",
    "/opt/aws/pcs/scheduler/slurm-25.11/version",
    {"SLURM_VERSION": "25.11.2", "PCS_SLURM_RELEASE": "1"},
    headers="/opt/aws/pcs/scheduler/slurm-25.11/include",
)


# Every full EFA installer since 1.40.0 (the oldest an image's data names: HyperPod's Slurm AMI of 2025-05-27) carries
# the aws-ofi-nccl plugin, libnccl-ofi in its release notes (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
# efa-changelog.html); where the stand-ins put it.
OFI_NCCL_PLUGIN = "opt/amazon/ofi-nccl/lib/libnccl-net.so"


def simulate_ofi_nccl(root: Path) -> None:
    """Put the aws-ofi-nccl plugin a full EFA install leaves under ROOT."""
    plugin = root / OFI_NCCL_PLUGIN
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text("")


@functools.cache
def payloads() -> dict[str, tuple[str, bytes]]:
    """Return artifact or repository name -> (downloaded file name, content) standing in for the real downloads."""
    efa_script = (
        '#!/bin/sh\necho "efa-installer $*" >>"$SHIM_LOG"\n'
        f'mkdir -p "$KILN_ROOT/{OFI_NCCL_PLUGIN.rsplit("/", 1)[0]}"\n'
        f'touch "$KILN_ROOT/{OFI_NCCL_PLUGIN}"\n'
        'echo "# EFA installer version: 1.43.2" >"$KILN_ROOT/opt/amazon/efa_installed_packages"\n'
    )
    return {
        "cuda": ("3bf863cc.pub", stand_in_key("cuda")),
        "cuda-dnf": ("D42D0685.pub", stand_in_key("cuda", "dnf")),
        "neuron": ("GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB", stand_in_key("neuron")),
        "fsx-lustre": ("fsx-ubuntu-public-key.asc", stand_in_key("fsx-lustre")),
        "nvidia-container-toolkit": ("gpgkey", stand_in_key("nvidia-container-toolkit")),
        "efa-installer": (
            "aws-efa-installer-1.43.2.tar.gz",
            _tar_gz({"aws-efa-installer/efa_installer.sh": (efa_script, 0o755)}),
        ),
        "pcs-agent": ("aws-pcs-agent-v1.3.1-1.tar.gz", PCS_AGENT),
        "pcs-agent-sig": ("aws-pcs-agent-v1.3.1-1.tar.gz.sig", stand_in_signature(PCS_AGENT)),
        "pcs-slurm": ("aws-pcs-slurm-25.11-installer-25.11.2-1.tar.gz", PCS_SLURM),
        "pcs-slurm-sig": ("aws-pcs-slurm-25.11-installer-25.11.2-1.tar.gz.sig", stand_in_signature(PCS_SLURM)),
        "pcs-key": ("aws-pcs-public-key.pub", f"stand-in AWS PCS key\nFINGERPRINT={PCS_KEY_FINGERPRINT}\n".encode()),
        "prometheus": (
            "prometheus-3.4.0.linux-amd64.tar.gz",
            _tar_gz({"prometheus-3.4.0.linux-amd64/prometheus": ("#!/bin/sh\nexit 0\n", 0o755)}),
        ),
        "node-exporter": (
            "node_exporter-1.9.0.linux-amd64.tar.gz",
            _tar_gz({"node_exporter-1.9.0.linux-amd64/node_exporter": ("#!/bin/sh\nexit 0\n", 0o755)}),
        ),
    }
