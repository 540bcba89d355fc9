"""Each bootstrap step against a throwaway root with stubbed package managers and downloads."""

from __future__ import annotations

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, make_node

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

# Every step of the PCS bundle that changes something on a fresh p5 node.
ACTIVE_STEPS = (
    "install_nvidia_driver",
    "install_efa",
    "install_nccl",
    "install_lustre_client",
    "install_enroot",
    "install_pyxis",
    "install_container_runtime",
    "install_exporters",
    "configure_users",
    "configure_imds",
    "configure_kernel",
    "configure_accelerators",
    "configure_fsx",
    "configure_container_storage",
    "configure_training_env",
    "configure_slurm",
    "configure_health",
    "configure_exporters",
)


# What a step needs an earlier step to have installed on a node of a user's own AMI: install_nccl registers the
# aws-ofi-nccl plugin the EFA installer leaves.
BEFORE = {"install_nccl": ("install_efa",)}


@pytest.mark.parametrize("step", ACTIVE_STEPS)
def test_second_run_of_a_step_changes_nothing(node, step):
    if step in BEFORE:
        assert node.run(*BEFORE[step]).returncode == 0
    fresh, calls = node.snapshot(), len(node.calls())
    first = node.run(step)
    assert first.returncode == 0, first.stderr
    changed = node.mutating_calls(since=calls) or node.snapshot() != fresh
    assert changed, f"{step} did nothing on a fresh node, so this test would prove nothing"
    before, calls = node.snapshot(), len(node.calls())
    second = node.run(step)
    assert second.returncode == 0, second.stderr
    assert node.mutating_calls(since=calls) == []
    assert node.snapshot() == before


def test_launcher_installs_into_its_own_venv_once(node):
    assert node.run("install_launcher").returncode == 0
    python = node.root / "opt/kiln/venv/bin/python"
    import subprocess

    probe = subprocess.run(
        [str(python), "-c", "import kiln.catalog, kiln.launcher; import aws_cdk"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'aws_cdk'" in probe.stderr, "the node venv must not have CDK"
    ok = subprocess.run([str(python), "-c", "import kiln.catalog, kiln.launcher"], check=False)
    assert ok.returncode == 0
    calls = len(node.calls())
    assert node.run("install_launcher").returncode == 0
    assert "skip: launcher" in node.log.read_text()
    assert node.mutating_calls(since=calls) == []


def test_driver_step_installs_the_pinned_driver_and_fabric_manager_from_the_signed_cuda_repository(node):
    assert node.run("install_nvidia_driver").returncode == 0
    calls = node.calls()
    key = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub"
    assert [c for c in calls if c.startswith("curl")][0].endswith(key)
    assert (node.root / "etc/apt/sources.list.d/kiln-cuda.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/kiln-cuda.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /\n"
    )
    assert "EB693B3035CD5710E231E123A4B469963BF863CC" in (node.root / "etc/apt/keyrings/kiln-cuda.gpg").read_text()
    assert (node.root / "etc/apt/preferences.d/kiln-nvidia-driver").read_text() == (
        "Package: *nvidia* libnvidia-* libxnvctrl*\nPin: version 570.172.08-*\nPin-Priority: 1001\n"
    )
    installs = [c for c in calls if c.startswith("apt-get") and " install " in c]
    assert installs[-1].endswith(
        " install --no-install-recommends nvidia-driver-570-open nvidia-fabricmanager-570=570.172.08-1"
    )


def test_download_that_fails_twice_then_succeeds_passes(node):
    node.set_state("curl-failures", "2")
    result = node.run("install_efa")
    assert result.returncode == 0, result.stderr
    assert sum(c.startswith("curl") for c in node.calls()) == 3
    assert node.log.read_text().count("retrying in") == 2
    assert "efa-installer -y" in node.calls()


def test_permanent_download_failure_names_the_step_and_the_log(node):
    node.set_state("offline")
    result = node.run("install_efa", KILN_RETRY_ATTEMPTS="3")
    assert result.returncode != 0
    message = "FAILED: step install_efa exited with code 1"
    assert message in result.stderr
    assert str(node.log) in result.stderr
    assert message in node.log.read_text()
    assert sum(c.startswith("curl") for c in node.calls()) == 3


def test_download_without_a_digest_is_refused_and_names_the_lock(tmp_path):
    bundle = render_bundle(pcs_config(locked={}), tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle)
    result = node.run("install_efa")
    assert result.returncode != 0
    assert "artifact efa-installer 1.43.2" in result.stderr
    assert "kiln bootstrap lock --spec SPEC" in result.stderr
    assert not any(c.startswith("curl") for c in node.calls())


def test_download_with_wrong_checksum_is_refused(node):
    payload = node.root.parent / "payloads" / "aws-efa-installer-1.43.2.tar.gz"
    payload.write_bytes(b"tampered")
    result = node.run("install_efa")
    assert result.returncode != 0
    assert "sha256 mismatch" in result.stderr
    assert not list((node.root / "var/cache/kiln/downloads").rglob("*.tar.gz"))


def test_package_install_waits_for_a_held_lock(node):
    (node.root / "var/lib/dpkg").mkdir(parents=True)
    (node.root / "var/lib/dpkg/lock-frontend").write_text("")
    node.set_state("locks-busy", "2")
    result = node.run("install_lustre_client")
    assert result.returncode == 0, result.stderr
    assert node.log.read_text().count("package manager is locked") == 2


def test_package_lock_held_too_long_fails_the_step(node):
    (node.root / "var/lib/dpkg").mkdir(parents=True)
    (node.root / "var/lib/dpkg/lock-frontend").write_text("")
    node.set_state("locks-busy", "1000000")
    result = node.run("install_lustre_client", KILN_LOCK_TIMEOUT_SECONDS="0")
    assert result.returncode != 0
    assert "FAILED: step install_lustre_client" in result.stderr
    assert not any(c.startswith("apt-get") for c in node.calls())


def test_missing_cluster_env_key_is_named(tmp_path, pcs_bundle):
    values = {k: v for k, v in CLUSTER_ENV.items() if k != "KILN_FSX_DNS"}
    node = make_node(tmp_path, pcs_bundle, cluster_env=values)
    result = node.run("configure_fsx")
    assert result.returncode != 0
    assert "lacks KILN_FSX_DNS" in result.stderr
    assert "FAILED: step node_context" in result.stderr


def test_unknown_instance_type_is_named(tmp_path, pcs_bundle):
    from tests.support.node_root import CLUSTER_ENV

    node = make_node(tmp_path, pcs_bundle, cluster_env={**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "g5.48xlarge"})
    result = node.run("install_efa")
    assert result.returncode != 0
    assert "g5.48xlarge is not one this bundle was rendered for (m5.8xlarge p5.48xlarge)" in result.stderr


def test_unsupported_os_is_refused(tmp_path, pcs_bundle):
    node = make_node(tmp_path, pcs_bundle, os_release='ID=centos\nVERSION_ID="7"\n')
    result = node.run("install_efa")
    assert result.returncode != 0
    assert "unsupported operating system centos 7" in result.stderr


def test_container_storage_goes_on_nvme_not_the_root_disk(node):
    assert node.run("configure_container_storage").returncode == 0
    fstab = (node.root / "etc/fstab").read_text()
    assert "LABEL=kiln-scratch /scratch ext4" in fstab
    assert "/scratch/docker /var/lib/docker none bind" in fstab
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)" in (node.root / "etc/enroot/enroot.conf").read_text()
    assert any(c.startswith("mkfs.ext4") and c.endswith("/dev/nvme1n1") for c in node.calls())


def test_worker_without_nvme_or_volume_refuses_root_disk(node):
    for link in (node.root / "dev/disk/by-id").iterdir():
        link.unlink()
    result = node.run("configure_container_storage")
    assert result.returncode != 0
    assert "refusing to put container storage on the root disk" in result.stderr


def test_fsx_mount_is_retried_until_writable(node):
    result = node.run("configure_fsx")
    assert result.returncode == 0, result.stderr
    assert "mount -t lustre -o relatime,flock fs-0123.fsx.us-east-1.amazonaws.com@tcp:/abcdef" in "\n".join(
        node.calls()
    )
    assert "/fsx lustre" in (node.root / "etc/fstab").read_text()


def test_pyxis_is_made_known_to_slurm_where_pcs_reads_spank_plugins(node):
    assert node.run("configure_slurm").returncode == 0
    # PCS reads SPANK configuration from its own directory per Slurm version, and only from there.
    spank = node.root / "etc/aws/pcs/scheduler/slurm-25.11/plugstack.conf.d"
    assert (spank / "pyxis.conf").read_text() == "required /usr/local/lib/slurm/spank_pyxis.so\n"
    # Nothing of PCS's own Slurm configuration is written.
    assert not (node.root / "opt/aws/pcs/scheduler/slurm-25.11/etc").exists()
    node.set_state("active/slurmd")
    (spank / "pyxis.conf").write_text("stale\n")
    assert node.run("configure_slurm").returncode == 0
    assert "systemctl restart slurmd" in node.calls()


@pytest.mark.parametrize(
    ("os_release", "detected"),
    [
        ('ID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu2204"),
        ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu2404"),
        ('ID="amzn"\nVERSION_ID="2023"\n', "al2023"),
        ('ID=debian\nVERSION_ID="12"\n', "debian12"),
    ],
)
def test_operating_systems_are_detected(tmp_path, pcs_bundle, os_release, detected):
    node = make_node(tmp_path, pcs_bundle, os_release=os_release)
    result = node.run("configure_training_env")
    if detected == "ubuntu2204":
        assert result.returncode == 0, result.stderr
        assert "os ubuntu2204," in node.log.read_text()
    else:
        assert result.returncode != 0
        assert f"rendered for ubuntu2204 (compute.image.os), but this node runs {detected}" in result.stderr


def test_amazon_linux_installs_through_dnf(tmp_path):
    bundle = render_bundle(pcs_config(os="al2023"), tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, os_release='ID="amzn"\nVERSION_ID="2023"\n')
    assert node.run("install_lustre_client").returncode == 0
    assert [c for c in node.calls() if c.startswith(("dnf", "apt-get"))] == ["dnf -y -q install lustre-client"]
    calls = len(node.calls())
    assert node.run("install_lustre_client").returncode == 0
    assert node.mutating_calls(since=calls) == []
