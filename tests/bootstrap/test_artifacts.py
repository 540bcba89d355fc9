"""Where packages and files come from: signed repositories with pinned fingerprints, digests per version."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from kiln.bootstrap.artifacts import (
    artifact_table,
    bundle_artifacts,
    bundle_repositories,
    lockable_artifacts,
    repository_table,
    resolve_artifact,
    resolve_repository,
)
from kiln.bootstrap.config import NodeGroup
from kiln.node_config.translate import config_from_spec
from kiln.spec import load_spec, parse_spec
from tests.support.bootstrap import pcs_config
from tests.support.paths import ROOT

EFA_1_41_0_SHA256 = "3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f"
FINGERPRINT = re.compile(r"[0-9A-F]{40}")


def _pcs_config():
    """The p5 PCS example on an AMI of the user's own: kiln installs the EFA software itself (kiln's default)."""
    spec = yaml.safe_load((ROOT / "examples" / "p5-pcs.yaml").read_text())
    spec["compute"]["image"] = {"base": "own", "ami_id": "ami-0123456789abcdef0"}
    return config_from_spec(parse_spec(spec), "pcs")


def test_the_sample_ami_brings_efa_so_nothing_is_downloaded_for_it() -> None:
    config = config_from_spec(load_spec(ROOT / "examples" / "p5-pcs.yaml"), "pcs")
    assert config.image == "pcs-sample" and config.software.efa_installer is None
    assert "efa-installer" not in {artifact.name for artifact in bundle_artifacts(config)}


def test_default_efa_installer_has_its_published_digest() -> None:
    artifact = resolve_artifact(_pcs_config(), "efa-installer")
    assert artifact.version == "1.41.0"
    assert artifact.url.endswith("/aws-efa-installer-1.41.0.tar.gz")
    assert artifact.sha256 == EFA_1_41_0_SHA256 and artifact.published


def test_another_version_does_not_inherit_that_digest_and_needs_the_lock() -> None:
    config = _pcs_config()
    newer = dataclasses.replace(config, software=dataclasses.replace(config.software, efa_installer="1.47.0"))
    artifact = resolve_artifact(newer, "efa-installer")
    assert artifact.sha256 == "" and not artifact.published
    assert artifact in lockable_artifacts(newer)


def test_a_locked_digest_applies_to_its_exact_url_only() -> None:
    config = _pcs_config()
    newer = dataclasses.replace(config, software=dataclasses.replace(config.software, efa_installer="1.47.0"))
    url = resolve_artifact(newer, "efa-installer").url
    locked = dataclasses.replace(newer, locked={url: "a" * 64, url + "x": "b" * 64})
    assert resolve_artifact(locked, "efa-installer").sha256 == "a" * 64
    assert not resolve_artifact(locked, "efa-installer").published


@pytest.mark.parametrize("name", ["enroot", "pyxis"])
def test_enroot_and_pyxis_are_anchored_by_the_commit_of_their_release_tag(name: str) -> None:
    """Built from NVIDIA's source: the commit id names the tree and its submodule pins, so no lock is needed."""
    artifact = resolve_artifact(_pcs_config(), name)
    assert artifact.anchor == "commit" and artifact.verifiable and artifact.published
    assert re.fullmatch(r"[0-9a-f]{40}", artifact.commit)
    assert artifact.url == f"https://github.com/NVIDIA/{name}.git"
    assert artifact not in lockable_artifacts(_pcs_config())
    pinned = dataclasses.replace(_pcs_config().software, **{name: "9.9.9"})
    with pytest.raises(ValueError, match=rf"software.{name}: got 9.9.9, which kiln has no commit pin for; allowed: "):
        resolve_artifact(dataclasses.replace(_pcs_config(), software=pinned), name)


def test_a_published_digest_wins_over_a_locked_one() -> None:
    config = _pcs_config()
    url = resolve_artifact(config, "efa-installer").url
    assert resolve_artifact(dataclasses.replace(config, locked={url: "c" * 64}), "efa-installer").sha256 == (
        EFA_1_41_0_SHA256
    )


def test_every_repository_pins_a_full_fingerprint_and_says_where_it_came_from() -> None:
    for name, entry in repository_table().items():
        forms = [entry[manager] for manager in ("apt", "dnf") if manager in entry]
        assert forms, name
        for form in forms:
            assert FINGERPRINT.fullmatch(form["fingerprint"]), name
            assert form["key_url"].startswith("https://") and form["fingerprint_source"], name


def test_every_file_says_where_its_digest_comes_from() -> None:
    for name, entry in artifact_table().items():
        assert entry["sha256_source"] and entry["used_by"].startswith("install_"), name
        for digest in entry["sha256"].values():
            # A digest per release, or per architecture (kiln's names) of a release built for each.
            digests = digest.values() if isinstance(digest, dict) else [digest]
            if isinstance(digest, dict):
                assert set(digest) == {"x86_64", "arm64"}, name
            assert all(re.fullmatch(r"[0-9a-f]{64}", value) for value in digests), name


@pytest.mark.parametrize(
    ("os", "key", "where"),
    [
        ("ubuntu2204", "compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub", "compute/cuda/repos/ubuntu2204/x86_64/ /"),
        ("ubuntu2404", "compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub", "compute/cuda/repos/ubuntu2404/x86_64/ /"),
        ("al2023", "compute/cuda/repos/amzn2023/x86_64/D42D0685.pub", "compute/cuda/repos/amzn2023/x86_64"),
    ],
)
def test_the_cuda_repository_follows_the_image(os: str, key: str, where: str) -> None:
    repository = resolve_repository(pcs_config(os=os), "cuda")
    assert repository.key_url == f"https://developer.download.nvidia.com/{key}"
    assert (repository.apt_source or repository.baseurl).endswith(where)
    nvidia_rpm, nvidia_deb = "610C7B14E068A878070DA4E99CD0A493D42D0685", "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert repository.fingerprint == (nvidia_rpm if os == "al2023" else nvidia_deb)


def test_repositories_are_added_only_where_the_nodes_use_them() -> None:
    assert [r.name for r in bundle_repositories(pcs_config())] == ["cuda", "fsx-lustre", "nvidia-container-toolkit"]
    trn1 = pcs_config(groups=(NodeGroup(name="trn", instance_type="trn1.32xlarge"),), lustre=False)
    assert [r.name for r in bundle_repositories(trn1)] == ["neuron"]
    neuron = resolve_repository(trn1, "neuron")
    assert neuron.apt_source == "https://apt.repos.neuron.amazonaws.com jammy main"
    assert neuron.fingerprint == "00FA2C1079260870A76D2C285749CAD8646D9185"
    # Amazon Linux 2023 has lustre-client in its own signed repositories.
    assert "fsx-lustre" not in [r.name for r in bundle_repositories(pcs_config(os="al2023"))]
