"""Baked images: a bake installs for every instance type and leaves a marker per install step; a node booted from
the image checks each marker against its bundle, runs configure steps only and reaches no network."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import SCRIPTS_DIR, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.contracts.image_components import step_groups
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image, stub_network

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

ENTRY = "pcs-user-data.sh"
REMEDY = "rebuild the image: kiln ami build --spec SPEC"
# The PCS install steps in the groups an image build runs them in, one kiln-step call each.
# The PCS bundle's install steps as Image Builder's components run them, group by group.
STEP_GROUPS = tuple(steps for _, steps in step_groups(PROFILES["pcs"].install_steps))


def bundle_values(bundle: Path) -> dict[str, str]:
    return parse_env_file((bundle / "bundle.env").read_text())


def expected_marker(bundle: Path, step: str) -> str:
    """Return the marker STEP leaves: one VAR='value' line per pin, with the bundle's values."""
    values = bundle_values(bundle)
    return "".join(f"{name}='{values[name]}'\n" for name in values[f"KILN_PINS_{step.upper()}"].split())


def without_cluster_env(node: Node) -> None:
    # An image build belongs to no cluster yet.
    (node.root / "etc/kiln/cluster.env").unlink()


def bake(node: Node) -> subprocess.CompletedProcess:
    """Bake NODE's root as an image build does: no cluster.env, on a build instance of none of the bundle's types."""
    saved = (node.root / "etc/kiln/cluster.env").read_text()
    without_cluster_env(node)
    result = node.run("--phase", "bake", entry=ENTRY, KILN_INSTANCE_TYPE="m6i.2xlarge")
    (node.root / "etc/kiln/cluster.env").write_text(saved)
    return result


@pytest.fixture(scope="module")
def _baked_once(tmp_path_factory: pytest.TempPathFactory, pcs_bundle: Path) -> tuple[Node, Path]:
    """Bake one node per test module (a bake takes seconds) and keep a pristine copy of its whole directory."""
    base = tmp_path_factory.mktemp("baked")
    node = make_node(base / "node", pcs_bundle)
    result = bake(node)
    assert result.returncode == 0, result.stderr
    shutil.copytree(base / "node", base / "pristine", symlinks=True)
    return node, base


@pytest.fixture
def baked(_baked_once: tuple[Node, Path]) -> Node:
    """A freshly baked node: the module's bake, restored in place (its paths are in its files) for each test."""
    node, base = _baked_once
    shutil.rmtree(base / "node")
    shutil.copytree(base / "pristine", base / "node", symlinks=True)
    return node


def test_bake_installs_for_every_instance_type_and_leaves_every_marker(baked: Node):
    log = baked.log.read_text()
    assert "image build: instance facts from image-facts.env, the union over m5.8xlarge p5.48xlarge" in log
    # The build instance has no GPU; the image still gets the p5's driver and fabric manager.
    assert any(c.endswith(" nvidia-driver-570-open nvidia-fabricmanager-570=570.172.08-1") for c in baked.calls())
    assert "efa-installer -y" in baked.calls()
    values = bundle_values(baked.bundle)
    for step in values["KILN_INSTALL_STEPS"].split():
        marker = baked.root / f"etc/kiln/image/{step}.env"
        assert marker.read_text() == expected_marker(baked.bundle, step), step
        assert marker.stat().st_mode & 0o777 == 0o644
    # Skipped (no Neuron device on any type), but it ran: its marker says with which pins.
    assert (baked.root / "etc/kiln/image/install_neuron.env").read_text() == (
        "KILN_NEURON_VERSION='2.29.1'\nKILN_NEURON_PACKAGES=''\nKILN_IMAGE_NEURON=''\n"
    )
    assert (baked.root / "etc/kiln/baked").read_text() == "pcs\n"
    assert not (baked.root / "var/cache/kiln/downloads").exists(), "the image must carry no installer files"
    assert not (baked.root / "etc/kiln/bundle-pins.env").exists(), "a bake is no boot"


def test_baked_boot_verifies_each_install_step_configures_and_reaches_no_network(baked: Node, tmp_path: Path):
    network = stub_network(tmp_path / "network")
    calls = len(baked.calls())
    booted = baked.run(entry=ENTRY, KILN_BIN_DIR=str(network.bin_dir))
    assert booted.returncode == 0, booted.stderr
    assert network.calls() == []
    assert [c for c in baked.calls()[calls:] if c.split()[0] in ("curl", "wget", "apt-get", "dnf", "gpg")] == []
    log = baked.log.read_text().split("phase all")[1]
    assert "baked image: install steps ran at image build; checking their markers against this bundle" in log
    for step in bundle_values(baked.bundle)["KILN_INSTALL_STEPS"].split():
        assert f"[{step}] start" in log and f"[{step}] the image matches this bundle: KILN_" in log, step
    assert "[configure_slurm] done" in log
    assert (baked.root / "etc/profile.d/kiln-nccl.sh").is_file()


def test_boot_leaves_the_bundle_pins_for_kiln_launch_check(baked: Node):
    assert baked.run(entry=ENTRY).returncode == 0
    values = bundle_values(baked.bundle)
    pins = parse_env_file((baked.root / "etc/kiln/bundle-pins.env").read_text())
    assert pins["KILN_INSTALL_STEPS"] == values["KILN_INSTALL_STEPS"]
    for step in values["KILN_INSTALL_STEPS"].split():
        names = values[f"KILN_PINS_{step.upper()}"]
        assert pins[f"KILN_PINS_{step.upper()}"] == names
        for name in names.split():
            assert pins[name] == values[name]
    pinned = {
        name for step in values["KILN_INSTALL_STEPS"].split() for name in values[f"KILN_PINS_{step.upper()}"].split()
    }
    steps = {f"KILN_PINS_{step.upper()}" for step in values["KILN_INSTALL_STEPS"].split()}
    assert set(pins) == {"KILN_INSTALL_STEPS"} | steps | pinned


def test_a_missing_marker_stops_the_boot_at_its_step_before_any_download(baked: Node, tmp_path: Path):
    marker = baked.root / "etc/kiln/image/install_efa.env"
    marker.unlink()
    network = stub_network(tmp_path / "network")
    result = baked.run(entry=ENTRY, KILN_BIN_DIR=str(network.bin_dir))
    assert result.returncode != 0
    assert "FAILED: step install_efa exited with code 1" in result.stderr
    assert f"the image has no marker {marker}: install step install_efa did not run" in result.stderr
    assert REMEDY in result.stderr
    assert network.calls() == []
    assert "[configure_users] start" not in baked.log.read_text()


def test_a_pin_the_image_recorded_otherwise_stops_the_boot_naming_the_variable(baked: Node):
    marker = baked.root / "etc/kiln/image/install_nccl.env"
    marker.write_text(marker.read_text().replace("2.27.3-1+cuda12.9", "2.26.2-1+cuda12.8"))
    result = baked.run(entry=ENTRY)
    assert result.returncode != 0
    assert "FAILED: step install_nccl exited with code 1" in result.stderr
    assert (
        "KILN_NCCL_VERSION: the image has '2.26.2-1+cuda12.8', this bundle wants '2.27.3-1+cuda12.9' "
        f"(install step install_nccl); {REMEDY}"
    ) in result.stderr


def test_an_image_baked_for_other_instance_types_is_refused(baked: Node, tmp_path: Path):
    # The same image, booted by a g5 cluster's bundle: a g5 has no NVSwitch, so the image is not the one it bakes.
    g5 = render_bundle(pcs_config(groups=(NodeGroup(name="gpu", instance_type="g5.48xlarge"),)), tmp_path / "g5")
    (baked.root / "etc/kiln/cluster.env").write_text(
        "".join(f"{k}='{v}'\n" for k, v in {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "g5.48xlarge"}.items())
    )
    result = dataclasses.replace(baked, bundle=g5.directory).run(entry=ENTRY)
    assert result.returncode != 0
    assert "FAILED: step install_nvidia_driver" in result.stderr
    assert "KILN_IMAGE_DEVICES: the image has 'gpu nvswitch efa', this bundle wants 'gpu efa'" in result.stderr


def test_an_image_baked_for_another_target_is_refused(baked: Node):
    (baked.root / "etc/kiln/baked").write_text("hyperpod\n")
    result = baked.run(entry=ENTRY)
    assert result.returncode != 0
    assert "FAILED: step install_nvidia_driver" in result.stderr
    assert f"this image was baked for target hyperpod, but this bundle is for pcs; {REMEDY}" in result.stderr


def test_a_boot_that_installs_leaves_every_marker_too(node: Node):
    result = node.run(entry=ENTRY)
    assert result.returncode == 0, result.stderr
    for step in bundle_values(node.bundle)["KILN_INSTALL_STEPS"].split():
        assert (node.root / f"etc/kiln/image/{step}.env").read_text() == expected_marker(node.bundle, step)
    assert (node.root / "etc/kiln/bundle-pins.env").is_file()
    assert not (node.root / "etc/kiln/baked").exists()


@pytest.mark.parametrize(
    ("step", "refused"),
    [
        ("install_launcher", "packages python3-venv"),
        ("install_container_runtime", "repository nvidia-container-toolkit"),
        ("install_efa", "artifact efa-installer 1.43.2"),
        ("install_lustre_client", "repository fsx-lustre"),
    ],
)
def test_a_baked_image_installs_and_downloads_nothing_outside_its_bake(node: Node, tmp_path: Path, step, refused):
    network = stub_network(tmp_path / "network")
    result = node.run(step, KILN_BAKED="1", KILN_BIN_DIR=str(network.bin_dir))
    assert result.returncode != 0
    assert f"{refused}: this image is baked, so the bootstrap downloads nothing; {REMEDY}" in result.stderr
    assert f"FAILED: step {step}" in result.stderr
    assert network.calls() == []


@pytest.mark.parametrize("phase", ["all", "bake"])
def test_download_itself_refuses_on_a_baked_image_except_in_its_bake(tmp_path: Path, phase: str):
    network = stub_network(tmp_path / "network")
    script = 'source "$1" && kiln_init_logging && download https://example.com/x "$2"'
    env = {"PATH": "/usr/bin:/bin", "KILN_ROOT": str(tmp_path / "root"), "KILN_BAKED": "1", "KILN_PHASE": phase}
    result = subprocess.run(
        ["bash", "-c", script, "bash", str(SCRIPTS_DIR / "lib.sh"), str(tmp_path / "x")],
        env={**env, "KILN_BIN_DIR": str(network.bin_dir)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    if phase == "bake":
        assert network.calls() == [
            "curl -fsSL --connect-timeout 10 --max-time 1800 -o " + str(tmp_path / "x") + " https://example.com/x"
        ]
    else:
        assert "download of https://example.com/x: this image is baked" in result.stderr
        assert network.calls() == []


def test_image_builder_installs_verifies_and_seals_with_kiln_step(node: Node):
    without_cluster_env(node)
    for group in STEP_GROUPS:
        installed = node.run(*group, KILN_PHASE="bake")
        assert installed.returncode == 0, installed.stderr
        verified = node.run("--verify", *group)
        assert verified.returncode == 0, verified.stderr
    assert (node.root / "var/cache/kiln/downloads").is_dir()
    sealed = node.run("--seal", KILN_PHASE="bake")
    assert sealed.returncode == 0, sealed.stderr
    assert (node.root / "etc/kiln/baked").read_text() == "pcs\n"
    assert not (node.root / "var/cache/kiln/downloads").exists()
    assert "[seal_image] image sealed for pcs" in node.log.read_text()
    # The image's test: an instance of the new image, with no cluster.env, checks every marker again.
    everything = [step for group in STEP_GROUPS for step in group]
    again = node.run("--verify", *everything)
    assert again.returncode == 0, again.stderr


def test_verify_names_the_first_step_without_its_marker(node: Node):
    without_cluster_env(node)
    assert node.run(*STEP_GROUPS[0], KILN_PHASE="bake").returncode == 0
    result = node.run("--verify", "install_efa", "install_lustre_client", "install_enroot")
    assert result.returncode != 0
    assert "FAILED: step install_lustre_client exited with code 1" in result.stderr
    assert "install_enroot" not in result.stderr


def test_seal_refuses_an_image_that_misses_a_step(node: Node):
    without_cluster_env(node)
    assert node.run(*STEP_GROUPS[0], KILN_PHASE="bake").returncode == 0
    result = node.run("--seal", KILN_PHASE="bake")
    assert result.returncode != 0
    assert "FAILED: step install_lustre_client" in result.stderr
    assert not (node.root / "etc/kiln/baked").exists()
    assert (node.root / "var/cache/kiln/downloads").is_dir()


@pytest.mark.parametrize(
    ("args", "phase", "message"),
    [
        ((), "", "usage: kiln-step STEP... | kiln-step --verify STEP... | kiln-step --seal; this bundle has: "),
        (("--verify",), "", "usage: kiln-step STEP..."),
        (("--seal", "install_efa"), "bake", "usage: kiln-step STEP..."),
        (("--verify", "configure_users"), "", "unknown step configure_users; allowed here: install_nvidia_driver "),
        (("install_efi",), "", "unknown step install_efi; allowed here: install_nvidia_driver "),
        (("install_efa",), "boot", "unknown KILN_PHASE boot: allowed all, install, configure, bake"),
        (("install_efa", "configure_slurm"), "bake", "unknown step configure_slurm; allowed here: install_nvidia_"),
    ],
)
def test_kiln_step_says_how_it_is_used(node: Node, args, phase, message):
    result = node.run(*args, KILN_PHASE=phase)
    assert result.returncode != 0
    assert message in result.stderr
    assert node.calls() == []


def test_a_hyperpod_image_bakes_outside_any_hyperpod_cluster(tmp_path: Path):
    config = pcs_config(target="hyperpod", groups=(NodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=4),))
    node = make_node(tmp_path / "node", render_bundle(config, tmp_path / "bundle").directory)
    without_cluster_env(node)
    # HyperPod's image, on a build instance without GPUs: the driver is built but not loaded; Slurm's headers are
    # under /opt/slurm for pyxis to build against.
    simulate_image(node, config.image, config.os, gpus=False)
    # No /opt/ml/config/resource_config.json: that exists only on the cluster's instances.
    result = node.run("--phase", "bake", entry="on_create.sh")
    assert result.returncode == 0, result.stderr
    assert "image build: no cluster to ask for this node's role" in node.log.read_text()
    assert (node.root / "etc/kiln/baked").read_text() == "hyperpod\n"
    log = node.log.read_text()
    assert "NVIDIA driver 580.126.09: adopted from the SageMaker HyperPod AMI for Slurm" in log
    driver_packages = ("nvidia-driver-", "nvidia-open", "nvidia-fabricmanager")
    assert not any(c.startswith(("apt-get", "dnf")) and any(p in c for p in driver_packages) for c in node.calls())
