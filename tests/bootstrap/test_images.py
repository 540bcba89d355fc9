"""The install phase on simulated images: each backend's image laid out as kiln's platform data says it ships, and
kiln adopting what the image owns: no package-manager call installs or replaces it, and a second run changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.bootstrap.profiles import PROFILES
from kiln.catalog.platforms import image_profile
from tests.support.image_cases import IMAGES, OWN, Image, _node

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

# Package names (and installer runs) that would put a second copy of an image-owned component on a node.
REPLACING = {
    "nvidia_driver": ("nvidia-driver-", "nvidia-open", "kmod-nvidia", "nvidia-fabricmanager", "nvidia-fabric-manager"),
    "efa_installer": ("efa-installer", "efa_installer.sh"),
    "enroot": ("enroot",),
    "pyxis": ("make ",),
    "lustre_client": ("lustre-client",),
    "neuron": ("aws-neuronx-",),
    "nvidia_container_toolkit": ("nvidia-container-toolkit",),
    "pcs_agent": ("pcs-installer",),
    "pcs_slurm": ("pcs-installer",),
}


def _install(case: Image) -> list[str]:
    """Return the target's install steps that meet what an image ships (kiln's launcher and exporters never do)."""
    return [s for s in PROFILES[case.target].install_steps if s not in ("install_launcher", "install_exporters")]


@pytest.mark.parametrize("case", IMAGES, ids=[case.id for case in IMAGES])
def test_install_adopts_what_the_image_ships_and_replaces_nothing(tmp_path: Path, case: Image) -> None:
    node, laid = _node(tmp_path, case)
    result = node.run(*_install(case))
    assert result.returncode == 0, result.stderr
    log = node.log.read_text()
    title = image_profile(case.image).title
    adopted = [line for line in log.splitlines() if f"adopted from the {title}" in line]
    installs = [c for c in node.calls() if c.split()[0] in ("apt-get", "dnf", "make") or "efa-installer" in c]
    for component in laid:
        for word in REPLACING[component]:
            assert not any(word in call for call in installs), f"{component}: {word} in {installs}"
    # Every component the node needs and the image owns was verified and adopted (one log line each).
    assert adopted, log
    assert all("kiln installs none" in line for line in adopted)
    before, calls = node.snapshot(), len(node.calls())
    again = node.run(*_install(case))
    assert again.returncode == 0, again.stderr
    assert node.mutating_calls(since=calls) == []
    assert node.snapshot() == before


def test_parallelcluster_p5_adopts_driver_efa_enroot_pyxis_and_lustre(tmp_path: Path) -> None:
    case = IMAGES[0]
    node, _ = _node(tmp_path, case, lustre=True)
    assert node.run(*_install(case)).returncode == 0
    log = node.log.read_text()
    title = image_profile("parallelcluster").title
    for words in (
        "NVIDIA driver 595.71.05",
        "EFA software 1.49.0",
        "Lustre client present",
        "enroot 3.4.1-1",
        "pyxis present",
    ):
        assert f"{words}: adopted from the {title} (kiln installs none)" in log, words
    # No enroot or pyxis download either: nothing of theirs needs the lock.
    assert not any(c.startswith("curl") and ("enroot" in c or "pyxis" in c) for c in node.calls())


def test_an_image_without_what_its_data_says_stops_the_step_by_name(tmp_path: Path) -> None:
    case = IMAGES[2]
    node, _ = _node(tmp_path, case)
    (node.root / "sys/module/nvidia/version").unlink()
    result = node.run("install_nvidia_driver")
    assert result.returncode != 0
    assert "FAILED: step install_nvidia_driver exited with code 1" in result.stderr and str(node.log) in result.stderr
    assert (
        "NVIDIA driver: the AWS PCS sample AMI for Slurm 25.11 ships it (kiln's platform data), but this node has none"
        in (node.log.read_text())
    )
    assert not any(c.startswith(("dnf", "apt-get")) for c in node.calls())


@pytest.mark.parametrize(
    ("step", "path", "text", "message"),
    [
        (
            "install_nvidia_driver",
            "sys/module/nvidia/version",
            "515.65.01\n",
            "NVIDIA driver 515.65.01 is loaded: older than 525.60.13, the least driver CUDA 12 and its NCCL run on",
        ),
        (
            "install_efa",
            "opt/amazon/efa_installed_packages",
            "# EFA installer version: 1.43.1\n",
            "EFA software 1.43.1: older than the 1.47.0 the AWS PCS sample AMI for Slurm 25.11 ships",
        ),
    ],
)
def test_an_older_copy_than_the_image_ships_is_refused_not_replaced(
    tmp_path: Path, step: str, path: str, text: str, message: str
) -> None:
    node, _ = _node(tmp_path, IMAGES[2])
    (node.root / path).write_text(text)
    result = node.run(step)
    assert result.returncode != 0
    assert message in node.log.read_text()
    assert [c for c in node.calls() if c.startswith(("dnf", "curl"))] == []


def test_a_newer_driver_branch_than_the_data_records_is_adopted(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, IMAGES[2])
    (node.root / "sys/module/nvidia/version").write_text("600.10.01\n")
    assert node.run("install_nvidia_driver").returncode == 0
    assert "NVIDIA driver 600.10.01: adopted from the AWS PCS sample AMI" in node.log.read_text()


def test_a_loaded_driver_is_never_replaced_at_boot(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, OWN)
    module = node.root / "sys/module/nvidia/version"
    module.parent.mkdir(parents=True)
    module.write_text("580.82.07\n")
    result = node.run("install_nvidia_driver")
    assert result.returncode == 0, result.stderr
    assert (
        "NVIDIA driver 580.82.07: loaded, adopted in place of the pinned 570.172.08 (kiln installs none at boot; "
        "a bake replaces it)"
    ) in node.log.read_text()
    assert not any(" install " in c for c in node.calls() if c.startswith("apt-get"))


def test_a_bake_replaces_the_images_driver_only_when_the_spec_says_so(tmp_path: Path) -> None:
    refused, _ = _node(tmp_path / "refused", OWN)
    refused.set_state("modinfo-nvidia", "580.82.07")
    result = refused.run("install_nvidia_driver", KILN_PHASE="bake")
    assert result.returncode != 0
    assert (
        "the image has NVIDIA driver 580.82.07: kiln does not install 570.172.08 over it; pin "
        "software.nvidia_driver: 580.82.07 to adopt it, or replace it in a bake (software.replace: [nvidia_driver])"
    ) in refused.log.read_text()
    replaced, _ = _node(tmp_path / "replaced", OWN, replace=("nvidia_driver",))
    replaced.set_state("modinfo-nvidia", "580.82.07")
    assert replaced.run("install_nvidia_driver", KILN_PHASE="bake").returncode == 0
    assert "replacing the image's NVIDIA driver 580.82.07 with 570.172.08 (software.replace names nvidia_driver)" in (
        replaced.log.read_text()
    )
    assert any("nvidia-driver-570-open" in c for c in replaced.calls())


def test_an_efa_installer_never_runs_over_a_newer_one(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, OWN)
    # An EFA installer the user's AMI was built with.
    (node.root / "opt/amazon").mkdir(parents=True)
    (node.root / "opt/amazon/efa_installed_packages").write_text("# EFA installer version: 1.51.0\n")
    assert node.run("install_efa").returncode == 0
    assert "EFA installer 1.51.0 is installed (1.43.2 or newer): kept" in node.log.read_text()
    assert not any("efa-installer" in c or c.startswith("curl") for c in node.calls())


def test_an_older_efa_installer_on_an_own_image_is_upgraded(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, OWN)
    # An EFA installer the user's AMI was built with.
    (node.root / "opt/amazon").mkdir(parents=True)
    (node.root / "opt/amazon/efa_installed_packages").write_text("# EFA installer version: 1.30.0\n")
    assert node.run("install_efa").returncode == 0
    assert "efa-installer -y" in node.calls()


def test_parallelcluster_pyxis_is_switched_on_where_parallelcluster_reads_it(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, IMAGES[0])
    assert node.run("configure_slurm").returncode == 0
    conf = node.root / "opt/slurm/etc"
    # ParallelCluster ships pyxis off: its plugstack.conf must name the drop-in directory, which kiln fills.
    assert (conf / "plugstack.conf.d/pyxis.conf").read_text() == "required /usr/local/lib/slurm/spank_pyxis.so\n"
    assert (conf / "plugstack.conf").read_text() == "include /opt/slurm/etc/plugstack.conf.d/pyxis.conf\n"
    assert sorted(p.name for p in conf.iterdir()) == ["plugstack.conf", "plugstack.conf.d"]
    before, calls = node.snapshot(), len(node.calls())
    assert node.run("configure_slurm").returncode == 0
    assert node.snapshot() == before and node.mutating_calls(since=calls) == []


def test_a_hyperpod_node_adopts_its_image_and_keeps_the_agents_slurm_conf_byte_for_byte(tmp_path: Path) -> None:
    """The HyperPod image: driver loaded, EFA and Lustre there, NVMe striped and mounted at /opt/dlami/nvme by the
    image's own service, slurm.conf written by HyperPod's agent. A whole boot adopts all of it and changes none."""
    case = IMAGES[3]
    node, laid = _node(tmp_path, case)
    assert {"nvidia_driver", "efa_installer", "lustre_client"} <= laid.keys()
    # This node is the controller: HyperPod's agent has written slurm.conf naming it.
    resources = node.root / "opt/ml/config/resource_config.json"
    resources.write_text(
        json.dumps({"InstanceGroups": [{"Name": "controller", "Instances": [{"CustomerIpAddress": "10.1.0.5"}]}]})
    )
    agent = node.root / "opt/slurm/etc/slurm.conf"
    written = agent.read_bytes()
    assert b"(10.1.0.5)" in written
    # A whole boot: HyperPod's OnCreate runs the install phase, then the configure phase.
    result = node.run(entry="on_create.sh")
    assert result.returncode == 0, result.stderr
    assert agent.read_bytes() == written
    log = node.log.read_text()
    title = image_profile("hyperpod-slurm").title
    for words in ("NVIDIA driver 580.126.09", "Lustre client present"):
        assert f"{words}: adopted from the {title} (kiln installs none)" in log, words
    # Container storage on the image's NVMe mount: no array, no file system, no mount of kiln's own.
    assert not [c for c in node.calls() if c.split()[0] in ("mdadm", "mkfs.ext4")]
    conf = (node.root / "etc/enroot/enroot.conf").read_text()
    assert "ENROOT_DATA_PATH /opt/dlami/nvme/enroot/data/user-$(id -u)" in conf
    assert "container storage on /opt/dlami/nvme, mounted by the image" in node.log.read_text()
    assert "systemctl enable --now slurmctld" in node.calls()


def test_a_hyperpod_node_whose_nvme_the_image_has_not_mounted_stops_and_builds_no_array(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, IMAGES[3])
    for mount in (node.state / "mounts").iterdir():
        mount.unlink()
    result = node.run(
        "configure_container_storage", KILN_PLATFORM_SCRATCH_TIMEOUT_SECONDS="0", KILN_LOCK_POLL_SECONDS="0"
    )
    assert result.returncode != 0 and "FAILED: step configure_container_storage" in result.stderr
    assert "has not mounted this node's instance-store NVMe on any of /opt/dlami/nvme /opt/sagemaker" in (
        node.log.read_text()
    )
    assert not [c for c in node.calls() if c.split()[0] in ("mdadm", "mkfs.ext4")]


def test_a_hyperpod_node_without_instance_store_puts_containers_on_the_groups_volume(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, IMAGES[3])
    for link in (node.root / "dev/disk/by-id").iterdir():
        link.unlink()
    volume = node.root / "opt/sagemaker"
    volume.mkdir(parents=True)
    node.set_state("mounts/" + str(volume).replace("/", "%"))
    for mount in (node.state / "mounts").iterdir():
        if "dlami" in mount.name:
            mount.unlink()
    assert node.run("configure_container_storage").returncode == 0
    assert "container storage on /opt/sagemaker, mounted by the image" in node.log.read_text()
