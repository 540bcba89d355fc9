"""Every rendered target installs only from pinned sources: the exact repositories, key fingerprints and versions."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config, pins_beside
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image
from tests.support.processes import stop_gnupg_daemons

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

CUDA_APT = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
CUDA_DNF = "https://developer.download.nvidia.com/compute/cuda/repos/amzn2023/x86_64"
NEURON_KEY = "https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
NEURON_YUM_KEY = "https://yum.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
TOOLKIT_KEY = "https://nvidia.github.io/libnvidia-container/gpgkey"
FSX_KEY = "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
# The commits of the test pins' enroot 3.5.0 and pyxis 0.20.0 (their release tags; artifacts.json).
ENROOT = "c7dc4a6b66e817af5ceb7d5315850696067b3f80"
PYXIS = "424563865a491f2d8f3c396a095d18db81f1fb07"
PINS_VERSION = {"enroot": "3.5.0", "pyxis": "0.20.0"}
FINGERPRINTS = {
    "cuda": "EB693B3035CD5710E231E123A4B469963BF863CC",
    "cuda-dnf": "610C7B14E068A878070DA4E99CD0A493D42D0685",
    "neuron": "00FA2C1079260870A76D2C285749CAD8646D9185",
    "nvidia-container-toolkit": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
    "fsx-lustre": "9C36DD9C515F10DBC3AA835C5D5CCC3383A962E1",
}
# Neuron 2.29.1's host packages (the test pins' release: the last whose PyTorch trains on trn1).
NEURON_APT = [
    "aws-neuronx-dkms=2.27.4.0*",
    "aws-neuronx-collectives=2.31.24.0*",
    "aws-neuronx-runtime-lib=2.31.24.0*",
    "aws-neuronx-tools=2.29.22.0*",
]


@dataclass(frozen=True)
class Case:
    """One rendered target on one image with one accelerator, and what its install must use."""

    target: str
    os: str
    instance: str
    # Repository file name -> its exact content's source line (apt) or baseurl (dnf).
    repositories: dict[str, str]
    key_urls: tuple[str, ...]
    # Exact package arguments the install commands must carry (versions pinned).
    packages: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.target}-{self.os}-{self.instance.split('.')[0]}"


def _p5_ubuntu(target: str) -> Case:
    return Case(
        target,
        "ubuntu2204",
        "p5.48xlarge",
        {
            "kiln-cuda.list": f"deb [signed-by=/etc/apt/keyrings/kiln-cuda.gpg] {CUDA_APT}/ /",
            "kiln-fsx-lustre.list": "deb [signed-by=/etc/apt/keyrings/kiln-fsx-lustre.gpg] "
            "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu jammy main",
            "kiln-nvidia-container-toolkit.list": "deb [signed-by=/etc/apt/keyrings/kiln-nvidia-container-toolkit.gpg] "
            "https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /",
        },
        (f"{CUDA_APT}/3bf863cc.pub", FSX_KEY, TOOLKIT_KEY),
        (
            "nvidia-driver-570-open",
            "nvidia-fabricmanager-570=570.172.08-1",
            "libnccl2=2.27.3-1+cuda12.9",
            "libnccl-dev=2.27.3-1+cuda12.9",
            "nvidia-container-toolkit=1.17.8-1",
            "libnvidia-container-tools=1.17.8-1",
            # enroot's build and runtime dependencies, from the distribution's signed repositories.
            "libtool",
            "squashfs-tools",
        ),
    )


# Where kiln owns the image (PCS with base: own) it installs everything; on HyperPod's image it adopts the driver, EFA
# and the Lustre client and installs only what the image lacks (Neuron); on EKS's it installs nothing. Each node is
# laid out as its image ships (simulate_image).
CASES = [
    _p5_ubuntu("pcs"),
    Case(
        "pcs",
        "al2023",
        "p5.48xlarge",
        {
            "kiln-cuda.repo": f"baseurl={CUDA_DNF}",
            "kiln-nvidia-container-toolkit.repo": "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64",
        },
        (f"{CUDA_DNF}/D42D0685.pub", TOOLKIT_KEY),
        (
            "nvidia-open-570.172.08",
            "kmod-nvidia-open-dkms-570.172.08",
            "nvidia-persistenced-570.172.08",
            "nvidia-fabric-manager-570.172.08",
            "libnccl-2.27.3-1+cuda12.9",
            "libnccl-devel-2.27.3-1+cuda12.9",
            "nvidia-container-toolkit-1.17.8-1",
            "lustre-client",
        ),
    ),
    Case(
        "pcs",
        "ubuntu2204",
        "trn1.32xlarge",
        {
            "kiln-neuron.list": "deb [signed-by=/etc/apt/keyrings/kiln-neuron.gpg] "
            "https://apt.repos.neuron.amazonaws.com jammy main",
            "kiln-fsx-lustre.list": "deb [signed-by=/etc/apt/keyrings/kiln-fsx-lustre.gpg] "
            "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu jammy main",
        },
        (NEURON_KEY, FSX_KEY),
        tuple(NEURON_APT),
    ),
    Case(
        "hyperpod",
        "ubuntu2204",
        "trn1.32xlarge",
        {
            "kiln-neuron.list": "deb [signed-by=/etc/apt/keyrings/kiln-neuron.gpg] "
            "https://apt.repos.neuron.amazonaws.com jammy main"
        },
        (NEURON_KEY,),
        tuple(NEURON_APT),
    ),
    Case(
        "pcs",
        "al2023",
        "trn1.32xlarge",
        {"kiln-neuron.repo": "baseurl=https://yum.repos.neuron.amazonaws.com"},
        (NEURON_YUM_KEY,),
        tuple(p.replace("=", "-") for p in NEURON_APT),
    ),
    # EKS's accelerated images bring the driver, Neuron and the container toolkit: no repository at all.
    Case("eks", "al2023", "p5.48xlarge", {}, (), ()),
    Case("eks", "al2023", "trn1.32xlarge", {}, (), ()),
]


def _node(tmp_path: Path, case: Case) -> Node:
    changes = {"target": case.target, "os": case.os, "groups": (NodeGroup(name="accel", instance_type=case.instance),)}
    if case.target == "eks":
        # EKS runs the node and DCGM exporters as Helm charts; only kiln's EFA exporter is the bootstrap's there.
        # Pods bring NCCL there.
        software = dataclasses.replace(pins_beside("eks-al2023", "al2023"), nccl=None)
        changes.update(service_instance_types=(), container_runtime="containerd", exporters=(), software=software)
    config = pcs_config(**changes)
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": case.instance})
    # Each image as it ships: ParallelCluster's and HyperPod's Slurm headers under their prefix, PCS's under its own.
    simulate_image(node, config.image, case.os)
    if case.target == "hyperpod":
        path = node.root / "opt/ml/config/resource_config.json"
        path.parent.mkdir(parents=True)
        groups = [{"Name": "accel", "Instances": [{"CustomerIpAddress": "10.1.0.5"}]}]
        path.write_text(json.dumps({"InstanceGroups": groups}))
    return node


def _install_steps(case: Case) -> list[str]:
    return [*PROFILES[case.target].install_steps, "configure_accelerators"]


def _repository_files(node: Node) -> dict[str, str]:
    files = {}
    for folder in ("etc/apt/sources.list.d", "etc/yum.repos.d"):
        for path in sorted((node.root / folder).glob("kiln-*")):
            files[path.name] = path.read_text()
    return files


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_install_uses_exactly_the_pinned_repositories_keys_and_versions(tmp_path: Path, case: Case) -> None:
    node = _node(tmp_path, case)
    result = node.run(*_install_steps(case))
    assert result.returncode == 0, result.stderr
    files = _repository_files(node)
    assert set(files) == set(case.repositories)
    for name, line in case.repositories.items():
        assert line in files[name].splitlines(), files[name]
        if name.endswith(".repo"):
            assert "gpgcheck=1" in files[name] and "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-kiln-" in files[name]
    fetched_keys = tuple(
        c.split()[-1]
        for c in node.calls()
        if c.startswith("curl") and not c.split()[-1].endswith((".deb", ".rpm", ".tar.gz"))
    )
    assert fetched_keys == case.key_urls
    log = node.log.read_text()
    for name in case.repositories:
        repository = name.removeprefix("kiln-").rsplit(".", 1)[0]
        fingerprint = FINGERPRINTS["cuda-dnf" if repository == "cuda" and case.os == "al2023" else repository]
        assert f"repository {repository}: key fingerprint {fingerprint} matches the pin" in log
        keyring = (
            f"etc/apt/keyrings/kiln-{repository}.gpg"
            if case.os != "al2023"
            else (f"etc/pki/rpm-gpg/RPM-GPG-KEY-kiln-{repository}")
        )
        assert (node.root / keyring).read_text() == f"key {fingerprint} armor {int(case.os == 'al2023')}\n"
    installs = " ".join(c for c in node.calls() if c.startswith(("apt-get", "dnf")) and " install " in c)
    for package in case.packages:
        assert f" {package}" in installs or f"/{package.removeprefix('./')}" in installs, package
    before, calls = node.snapshot(), len(node.calls())
    again = node.run(*_install_steps(case))
    assert again.returncode == 0, again.stderr
    assert node.mutating_calls(since=calls) == []
    assert node.snapshot() == before


def test_a_key_with_another_fingerprint_stops_the_step_with_its_name_and_log(tmp_path: Path) -> None:
    node = _node(tmp_path, CASES[0])
    key = node.root.parent / "payloads" / "3bf863cc.pub"
    key.write_text("an impostor\nFINGERPRINT=0000000000000000000000000000000000000000\n")
    result = node.run("install_nvidia_driver")
    assert result.returncode != 0
    assert "FAILED: step install_nvidia_driver exited with code 1" in result.stderr
    assert str(node.log) in result.stderr
    assert (
        "repository cuda: the key at "
        f"{CUDA_APT}/3bf863cc.pub has fingerprint 0000000000000000000000000000000000000000 but kiln pins "
        "EB693B3035CD5710E231E123A4B469963BF863CC; refusing the repository"
    ) in node.log.read_text()
    assert not (node.root / "etc/apt/sources.list.d/kiln-cuda.list").exists()
    assert not any(" install " in c and "nvidia-driver" in c for c in node.calls())


def test_a_locked_file_with_another_digest_stops_the_step(tmp_path: Path) -> None:
    node = _node(tmp_path, CASES[0])
    (node.root.parent / "payloads" / "aws-efa-installer-1.43.2.tar.gz").write_bytes(b"not what was locked")
    result = node.run("install_efa")
    assert result.returncode != 0
    assert "FAILED: step install_efa" in result.stderr
    assert "artifact efa-installer 1.43.2: sha256 mismatch" in node.log.read_text()


@pytest.mark.parametrize(
    ("step", "name", "commit"), [("install_enroot", "enroot", ENROOT), ("install_pyxis", "pyxis", PYXIS)]
)
def test_a_source_at_another_commit_stops_the_step_and_builds_nothing(
    tmp_path: Path, step: str, name: str, commit: str
) -> None:
    """enroot and pyxis are anchored by commit (artifacts.json): a tag moved, or a mirror serving another tree,
    gives another commit id, and the step stops before building."""
    node = _node(tmp_path, CASES[0])
    node.set_state("git-head", "0" * 40)
    result = node.run(step)
    assert result.returncode != 0
    assert f"FAILED: step {step} exited with code 1" in result.stderr and str(node.log) in result.stderr
    assert f"source {name} " in node.log.read_text()
    assert f"got commit {'0' * 40}, expected {commit}; refusing to build" in node.log.read_text()
    assert not [c for c in node.calls() if c.startswith("make ")]


@pytest.mark.parametrize(
    ("step", "name", "commit"), [("install_enroot", "enroot", ENROOT), ("install_pyxis", "pyxis", PYXIS)]
)
def test_enroot_and_pyxis_build_from_the_pinned_commit(tmp_path: Path, step: str, name: str, commit: str) -> None:
    node = _node(tmp_path, CASES[0])
    result = node.run(step)
    assert result.returncode == 0, result.stderr
    fetches = [c for c in node.calls() if c.startswith("git ") and " fetch " in c]
    build = f"{node.root}/var/cache/kiln/build/{name}-{PINS_VERSION[name]}"
    assert fetches == [f"git -C {build} fetch -q --depth 1 https://github.com/NVIDIA/{name}.git {commit}"]
    makes = [c for c in node.calls() if c.startswith("make ")]
    if name == "enroot":
        # Built, then installed and given its capabilities, with the submodules the verified tree pins.
        assert [m.split()[-1] for m in makes] == ["all", "install", "setcap"]
        assert all("prefix=/usr" in m and "sysconfdir=/etc" in m and "FORCE_GLIBC" not in m for m in makes)
        submodules = [c.split()[-1] for c in node.calls() if c.startswith("git ") and " submodule " in c]
        assert submodules == ["deps/makeself", "deps/musl", "deps/linux-headers"]
        assert (node.root / "usr/bin/enroot").exists()
    else:
        assert len(makes) == 1 and makes[0].endswith(" install")
    # The build directory is gone, and a second run builds nothing.
    assert not (node.root / f"var/cache/kiln/build/{name}-{PINS_VERSION[name]}").exists()
    calls = len(node.calls())
    assert node.run(step).returncode == 0
    assert node.mutating_calls(since=calls) == []


def test_persistence_daemon_and_fabric_manager_start_from_catalog_facts(tmp_path: Path) -> None:
    node = _node(tmp_path, CASES[0])
    assert node.run("configure_accelerators").returncode == 0
    assert [c for c in node.calls() if c.startswith("systemctl enable")] == [
        "systemctl enable --now nvidia-persistenced",
        "systemctl enable --now nvidia-fabricmanager",
    ]
    g5 = make_node(
        tmp_path / "g5",
        render_bundle(
            pcs_config(groups=(NodeGroup(name="g", instance_type="g5.12xlarge"),)), tmp_path / "b5"
        ).directory,
        {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "g5.12xlarge"},
    )
    assert g5.run("configure_accelerators").returncode == 0
    assert [c for c in g5.calls() if c.startswith("systemctl enable")] == ["systemctl enable --now nvidia-persistenced"]


@pytest.fixture
def gnupg_home(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Return a maker of GnuPG homes under tmp_path; the gpg-agent each starts is stopped when the test ends."""
    homes: list[Path] = []

    def make(name: str) -> Path:
        home = tmp_path / name
        home.mkdir(mode=0o700)
        homes.append(home)
        return home

    yield make
    for home in homes:
        stop_gnupg_daemons(home)


def _real_key(home: Path, who: str) -> tuple[str, bytes]:
    """Make an OpenPGP key with the real gpg in the GnuPG home HOME; return its fingerprint and armored public key."""
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", f"{who} <{who}@example.com>", "ed25519", "sign", "never"],
        check=True,
        capture_output=True,
    )
    colons = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    return fingerprint, subprocess.run(
        [*gpg, "--armor", "--export", fingerprint], check=True, capture_output=True
    ).stdout


@pytest.mark.parametrize("matches", [True, False], ids=["pinned-key", "other-key"])
def test_the_real_gpg_accepts_only_the_pinned_fingerprint(
    tmp_path: Path, gnupg_home: Callable[[str], Path], matches: bool
) -> None:
    pinned, armored = _real_key(gnupg_home("vendor"), "vendor")
    served = armored if matches else _real_key(gnupg_home("impostor"), "impostor")[1]
    bundle = render_bundle(pcs_config(), tmp_path / "bundle").directory
    env = bundle / "bundle.env"
    lines = env.read_text().splitlines()
    env.write_text(
        "".join(
            f"KILN_REPO_CUDA_FINGERPRINT='{pinned}'\n"
            if line.startswith("KILN_REPO_CUDA_FINGERPRINT=")
            else line + "\n"
            for line in lines
        )
    )
    node = make_node(tmp_path / "node", bundle)
    (node.root.parent / "bin" / "gpg").unlink()
    (node.root.parent / "payloads" / "3bf863cc.pub").write_bytes(served)
    # The EFA installer lays the aws-ofi-nccl plugin install_nccl registers, before NCCL comes from the CUDA repository.
    result = node.run("install_efa", "install_nccl")
    keyring = node.root / "etc/apt/keyrings/kiln-cuda.gpg"
    if matches:
        assert result.returncode == 0, result.stderr
        shown = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--show-keys", str(keyring)],
            capture_output=True,
            text=True,
            check=True,
            env={"GNUPGHOME": str(tmp_path / "vendor")},
        ).stdout
        assert [line.split(":")[9] for line in shown.splitlines() if line.startswith("fpr:")] == [pinned]
    else:
        assert result.returncode != 0
        assert f"but kiln pins {pinned}; refusing the repository" in node.log.read_text()
        assert not keyring.exists()
