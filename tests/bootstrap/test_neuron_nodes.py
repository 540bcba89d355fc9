"""Neuron nodes in the harness: the Neuron driver's kernel headers on Amazon Linux 2023's 6.1 and 6.12 kernels, the
locked-memory limit EFA needs, and the Trainium bundles on the images each backend boots."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import memlock_scope, render_bundle
from kiln.catalog.neuron import neuron_packages
from kiln.catalog.platforms import image_profile, service_fact
from tests.support.bootstrap import PINS, pcs_config, pins_beside
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores (two whole
# boots).
pytestmark = pytest.mark.slow

TRN1 = "trn1.32xlarge"
# Amazon Linux 2023 kernel releases of its 6.1 and 6.12 series, as uname -r prints them.
AL2023_KERNELS = {"6.1": "6.1.150-174.273.amzn2023.x86_64", "6.12": "6.12.40-63.114.amzn2023.x86_64"}


def _config(target: str, image: str, os: str = "al2023", **changes):
    """A Trainium cluster of TARGET whose nodes boot IMAGE on OS, pinning only what the image does not own."""
    software = pins_beside(image, os)
    settings = {
        "target": target,
        "image": image,
        "os": os,
        "groups": (NodeGroup(name="trn", instance_type=TRN1),),
        "software": dataclasses.replace(software, nccl=None) if target == "eks" else software,
        "lustre": False,
        "exporters": (),
    }
    if target == "eks":
        settings.update(service_instance_types=(), container_runtime="containerd")
    return pcs_config(**(settings | changes))


@pytest.fixture(scope="module")
def pcs_trn1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle of a trn1 PCS cluster on the PCS sample AMI (Amazon Linux 2023, no Neuron software)."""
    return render_bundle(_config("pcs", "pcs-sample"), tmp_path_factory.mktemp("pcs-trn1") / "bundle").directory


@pytest.fixture(scope="module")
def eks_trn1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle of a trn1 EKS cluster on the EKS-optimized AL2023 Neuron AMI."""
    return render_bundle(_config("eks", "eks-al2023"), tmp_path_factory.mktemp("eks-trn1") / "bundle").directory


def _node(tmp_path: Path, bundle: Path, image: str) -> Node:
    node = make_node(tmp_path, bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": TRN1})
    simulate_image(node, image, "al2023")
    return node


def _installs(node: Node) -> list[str]:
    return [c for c in node.calls() if c.startswith("dnf") and " install " in f" {c} "]


def test_the_neuron_driver_builds_against_the_running_kernels_own_headers_on_6_1_and_6_12(
    tmp_path: Path, pcs_trn1: Path
) -> None:
    stems = service_fact("amazon_linux_2023", "kernel_packages").value
    # kernel6.12-devel for the 6.12 kernel, as the EKS AMI's Neuron build names it; kernel-devel for 6.1.
    assert {series: stems[series] for series in AL2023_KERNELS} == {"6.1": "kernel", "6.12": "kernel6.12"}
    for series, kernel in AL2023_KERNELS.items():
        stem = stems[series]
        node = _node(tmp_path / series, pcs_trn1, "pcs-sample")
        result = node.run("install_neuron", SHIM_KERNEL=kernel)
        assert result.returncode == 0, result.stderr
        installs = _installs(node)
        # The headers first, for the running kernel, then the Neuron packages DKMS builds against them.
        assert installs[0] == f"dnf -y -q install {stem}-devel-{kernel} {stem}-headers-{kernel} dkms gcc make"
        assert any("aws-neuronx-dkms-" in call for call in installs[1:])
        assert {f"{stem}-devel", f"{stem}-headers"} <= {p.name for p in (node.state / "pkgs").iterdir()}


def test_a_kernel_series_the_data_does_not_name_stops_with_one_line_and_installs_nothing(
    tmp_path: Path, pcs_trn1: Path
) -> None:
    node = _node(tmp_path, pcs_trn1, "pcs-sample")
    result = node.run("install_neuron", SHIM_KERNEL="6.20.1-1.amzn2023.x86_64")
    assert result.returncode != 0
    errors = [line for line in node.log.read_text().splitlines() if "error:" in line]
    assert len(errors) == 1
    assert (
        "kernel 6.20.1-1.amzn2023.x86_64: kiln's platform data names no Amazon Linux 2023 headers package for its "
        "series (known: 6.1=kernel 6.12=kernel6.12 6.18=kernel6.18)"
    ) in errors[0]
    assert _installs(node) == []


KILN_LIMITS = "etc/security/limits.d/99-kiln-memlock.conf"
KILN_CONTAINERD = "etc/systemd/system/containerd.service.d/99-kiln-memlock.conf"


def test_only_clusters_with_efa_lift_the_locked_memory_limit_and_where_their_jobs_get_it() -> None:
    assert memlock_scope(_config("pcs", "pcs-sample")) == "sessions"
    assert memlock_scope(_config("parallelcluster", "parallelcluster", os="ubuntu2204")) == "sessions"
    assert memlock_scope(_config("eks", "eks-al2023")) == "containers"
    # One trn1.2xlarge (no EFA): single-node jobs register no EFA memory.
    small = (NodeGroup(name="trn", instance_type="trn1.2xlarge"),)
    assert memlock_scope(_config("pcs", "pcs-sample", groups=small)) == ""


@pytest.mark.parametrize("instance", [TRN1, "m5.8xlarge"], ids=["trn1-worker", "login"])
def test_every_slurm_node_lifts_locked_memory_for_login_sessions_once(
    tmp_path: Path, pcs_trn1: Path, instance: str
) -> None:
    # A login node without EFA too: Slurm gives a job the limits of the shell that submitted it there.
    node = make_node(tmp_path, pcs_trn1, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": instance})
    simulate_image(node, "pcs-sample", "al2023")
    assert node.run("configure_kernel").returncode == 0
    assert (node.root / KILN_LIMITS).read_text().splitlines()[1:] == [
        "* soft memlock unlimited",
        "* hard memlock unlimited",
    ]
    # Nothing of the platform's is edited: no limits.conf, no other limits.d file, no unit of containerd's.
    assert sorted(p.name for p in (node.root / "etc/security").rglob("*") if p.is_file()) == ["99-kiln-memlock.conf"]
    assert not (node.root / KILN_CONTAINERD).exists()
    before, calls = node.snapshot(), len(node.calls())
    assert node.run("configure_kernel").returncode == 0
    assert node.snapshot() == before and node.mutating_calls(since=calls) == []


def test_a_node_whose_limits_already_lift_locked_memory_gets_nothing_from_kiln(tmp_path: Path, pcs_trn1: Path) -> None:
    node = _node(tmp_path, pcs_trn1, "pcs-sample")
    # Limits set elsewhere (an EFA installer's configuration, or the user's AMI), for every user, soft and hard.
    image = node.root / "etc/security/limits.d/50-image.conf"
    image.parent.mkdir(parents=True)
    image.write_text("# the image's\n*  -  memlock  unlimited\n")
    assert node.run("configure_kernel").returncode == 0
    assert not (node.root / KILN_LIMITS).exists()
    assert "the image's limits already lift locked memory for every user: kiln adds none" in node.log.read_text()
    # Only the soft limit lifted is not enough: kiln adds its own.
    image.write_text("* soft memlock unlimited\n* hard memlock 65536\n")
    assert node.run("configure_kernel").returncode == 0
    assert (node.root / KILN_LIMITS).exists()


def test_eks_efa_nodes_give_containerd_unlimited_locked_memory_with_a_drop_in(tmp_path: Path, eks_trn1: Path) -> None:
    node = _node(tmp_path, eks_trn1, "eks-al2023")
    node.set_state("active/containerd")
    assert node.run("configure_kernel").returncode == 0
    assert (node.root / KILN_CONTAINERD).read_text().splitlines()[1:] == ["[Service]", "LimitMEMLOCK=infinity"]
    calls = node.calls()
    assert calls.index("systemctl daemon-reload") < calls.index("systemctl restart containerd")
    # Pods, not login sessions, get EFA there: no limits.d file.
    assert not (node.root / KILN_LIMITS).exists()
    before, count = node.snapshot(), len(node.calls())
    assert node.run("configure_kernel").returncode == 0
    assert node.snapshot() == before and node.mutating_calls(since=count) == []


def test_containerd_already_unlimited_gets_no_drop_in(tmp_path: Path, eks_trn1: Path) -> None:
    node = _node(tmp_path, eks_trn1, "eks-al2023")
    node.set_state("units/containerd/LimitMEMLOCK", "infinity\n")
    assert node.run("configure_kernel").returncode == 0
    assert not (node.root / KILN_CONTAINERD).exists()
    assert "containerd already runs with unlimited locked memory: kiln adds none" in node.log.read_text()


def _adopted(node: Node, image: str) -> list[str]:
    title = image_profile(image).title
    lines = node.log.read_text().splitlines()
    return [line.split("] ", 1)[1].removeprefix("skip: ") for line in lines if f"adopted from the {title}" in line]


def test_a_whole_trn1_pcs_boot_installs_neuron_over_the_sample_amis_own_efa_and_slurm(
    tmp_path: Path, pcs_trn1: Path
) -> None:
    """The PCS sample AMI (Amazon Linux 2023) ships EFA, PCS's agent and Slurm but no Neuron software: the boot adopts
    the first three and installs the pinned Neuron release, after the running kernel's headers."""
    node = _node(tmp_path, pcs_trn1, "pcs-sample")
    kernel = AL2023_KERNELS["6.12"]
    boot = node.run(entry="pcs-user-data.sh", SHIM_KERNEL=kernel)
    assert boot.returncode == 0, boot.stderr
    assert "FAILED" not in boot.stderr and "error:" not in node.log.read_text()
    adopted = _adopted(node, "pcs-sample")
    assert any(line.startswith("EFA software 1.47.0: adopted") for line in adopted), adopted
    installs = " ".join(_installs(node))
    packages = neuron_packages(PINS.neuron)
    for name, version in packages.items():
        assert f"{name}-{version}" in installs, name
    assert f"kernel6.12-devel-{kernel}" in installs
    # Nothing the image ships is installed again, and no NVIDIA software on a Trainium node.
    assert not any(c.startswith("pcs-installer") or "efa-installer" in c for c in node.calls())
    assert "nvidia" not in installs and "efa" not in installs
    assert (node.root / KILN_LIMITS).exists()


def test_a_whole_trn1_eks_boot_adopts_the_neuron_amis_driver_and_efa_and_installs_neither(
    tmp_path: Path, eks_trn1: Path
) -> None:
    """The EKS AL2023 Neuron AMI ships aws-neuronx-dkms and a minimal EFA install: the boot adopts both, installs no
    Neuron or EFA package (pods bring the Neuron runtime and libfabric), and lifts containerd's locked-memory limit."""
    node = _node(tmp_path, eks_trn1, "eks-al2023")
    node.set_state("active/containerd")
    boot = node.run(entry="eks-user-data.sh")
    assert boot.returncode == 0, boot.stderr
    assert "FAILED" not in boot.stderr and "error:" not in node.log.read_text()
    adopted = _adopted(node, "eks-al2023")
    neuron = image_profile("eks-al2023").owns["neuron"]
    assert any(line.startswith(f"Neuron driver {neuron.version}") for line in adopted), adopted
    assert any(line.startswith("EFA software present") for line in adopted), adopted
    # No Neuron, kernel, EFA or NVIDIA package. (containerd: the image data records no container runtime, so the
    # simulated node has none and install_container_runtime adds it; the AMI's own install-worker.sh installs one.)
    assert _installs(node) == ["dnf -y -q install containerd"]
    assert not any(c.startswith(("curl", "wget")) or "efa-installer" in c for c in node.calls())
    assert (node.root / KILN_CONTAINERD).exists() and "systemctl restart containerd" in node.calls()
