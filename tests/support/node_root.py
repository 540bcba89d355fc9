"""A throwaway root that looks like a node: a rendered bundle in it, stubbed commands on PATH, an OS and
image simulated, and a stubbed network."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.platforms import image_profile, service_fact
from tests.support.bootstrap import pcs_config
from tests.support.paths import ROOT
from tests.support.pcs_payloads import (
    payloads,
    simulate_ofi_nccl,
    simulate_pcs_slurm,
)

# The stand-in every shimmed command is a link to.
SHIM = ROOT / "tests" / "bootstrap" / "shim.sh"


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
        (bin_dir / name).symlink_to(SHIM)
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


def hyperpod_node(tmp_path, addresses: str):
    config = pcs_config(target="hyperpod", groups=(NodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=4),))
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle)
    resources = {
        "InstanceGroups": [
            {"Name": "controller", "Instances": [{"CustomerIpAddress": "10.1.0.9"}]},
            {"Name": "login", "Instances": [{"CustomerIpAddress": "10.1.0.7"}]},
            {"Name": "gpu", "Instances": [{"CustomerIpAddress": "10.1.0.5"}, {"CustomerIpAddress": "10.1.0.6"}]},
        ]
    }
    path = node.root / "opt/ml/config/resource_config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(resources))
    node.env["SHIM_ADDRESSES"] = addresses
    return node


def _efa_devices(node: Node, count: int) -> None:
    """Lay out COUNT EFA devices under /sys/class/infiniband, each bound to the efa driver (and one that is not)."""
    driver = node.root / "sys/bus/pci/drivers/efa"
    driver.mkdir(parents=True)
    other = node.root / "sys/bus/pci/drivers/mlx5_core"
    other.mkdir(parents=True)
    for index in range(count):
        device = node.root / f"sys/class/infiniband/rdmap{index:02d}s0/device"
        device.mkdir(parents=True)
        (device / "driver").symlink_to(driver)
    mlx = node.root / "sys/class/infiniband/mlx5_0/device"
    mlx.mkdir(parents=True)
    (mlx / "driver").symlink_to(other)


def _lnet_calls(node: Node, since: int = 0) -> list[str]:
    return [c for c in node.calls()[since:] if c.startswith(("lnetctl", "modprobe")) and "net show" not in c]
