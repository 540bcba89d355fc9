"""Pinned downloads: digests belong to one version; the spec's checksums win."""

from __future__ import annotations

import dataclasses

from kiln.bootstrap.artifacts import resolve_artifact
from kiln.spec import load_spec
from kiln.stacks.bootstrap_config import config_from_spec
from tests.conftest import ROOT

EFA_1_41_0_SHA256 = "3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f"


def _pcs_config():
    return config_from_spec(load_spec(ROOT / "examples" / "p5-pcs.yaml"), "pcs")


def test_default_efa_installer_has_its_published_digest() -> None:
    artifact = resolve_artifact(_pcs_config(), "efa-installer")
    assert artifact.version == "1.41.0"
    assert artifact.url.endswith("/aws-efa-installer-1.41.0.tar.gz")
    assert artifact.sha256 == EFA_1_41_0_SHA256


def test_another_version_does_not_inherit_that_digest() -> None:
    config = _pcs_config()
    newer = dataclasses.replace(config, software=dataclasses.replace(config.software, efa_installer="1.47.0"))
    assert resolve_artifact(newer, "efa-installer").sha256 == ""


def test_spec_checksum_overrides_the_published_one() -> None:
    config = dataclasses.replace(_pcs_config(), checksums={"efa-installer": "a" * 64})
    assert resolve_artifact(config, "efa-installer").sha256 == "a" * 64
