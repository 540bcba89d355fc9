"""A PCS-ready image from a stock AMI: a bake installs PCS's agent and Slurm from the installers AWS publishes in the
cluster's region, each checked against AWS's detached signature by the key whose fingerprint kiln pins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kiln.bootstrap.artifacts import bundle_artifacts, lockable_artifacts
from kiln.bootstrap.readiness import boot_readiness
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from tests.support.bootstrap import PINS, pcs_config
from tests.support.node_root import Node, make_node, simulate_image
from tests.support.pcs_payloads import PCS_KEY_FINGERPRINT

STOCK_PINS = dataclasses.replace(PINS, pcs_agent="1.3.1-1", pcs_slurm="25.11.2-1")
AGENT_URL = "https://aws-pcs-repo-us-east-2.s3.us-east-2.amazonaws.com/aws-pcs-agent/aws-pcs-agent-v1.3.1-1.tar.gz"
SLURM_URL = (
    "https://aws-pcs-repo-us-east-2.s3.us-east-2.amazonaws.com/aws-pcs-slurm/"
    "aws-pcs-slurm-25.11-installer-25.11.2-1.tar.gz"
)
KEY_URL = "https://aws-pcs-repo-public-keys-us-east-2.s3.us-east-2.amazonaws.com/aws-pcs-public-key.pub"


def stock_config(**changes):
    return pcs_config(image="pcs-stock", os="al2023", region="us-east-2", software=STOCK_PINS, **changes)


@pytest.fixture(scope="module")
def stock_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_bundle(stock_config(), tmp_path_factory.mktemp("stock") / "bundle").directory


def test_the_installers_are_regional_signed_downloads_that_need_no_lock() -> None:
    config = stock_config()
    artifacts = {a.name: a for a in bundle_artifacts(config)}
    assert (artifacts["pcs-agent"].url, artifacts["pcs-slurm"].url) == (AGENT_URL, SLURM_URL)
    for name in ("pcs-agent", "pcs-slurm"):
        assert artifacts[name].signature_key_url == KEY_URL
        assert artifacts[name].signature_fingerprint == PCS_KEY_FINGERPRINT
        assert artifacts[name] not in lockable_artifacts(config)
    assert not any(a.name.startswith("pcs-") for a in boot_readiness(config).unverifiable)


def test_a_regional_download_without_a_region_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the cluster's region"):
        bundle_artifacts(dataclasses.replace(stock_config(), region=None))


def test_a_slurm_installer_of_another_slurm_version_is_refused() -> None:
    with pytest.raises(ValueError, match="software.pcs_slurm: got '25.05.5-1', allowed: a release of Slurm 25.11"):
        pcs_config(
            image="pcs-stock", region="us-east-2", software=dataclasses.replace(STOCK_PINS, pcs_slurm="25.05.5-1")
        )


def _bake(tmp_path: Path, bundle: Path) -> tuple[Node, object]:
    node = make_node(tmp_path, bundle)
    return node, node.run("install_pcs_agent", "install_pcs_slurm", KILN_PHASE="bake")


def test_a_bake_installs_the_agent_and_slurm_checked_against_aws_signature(tmp_path: Path, stock_bundle: Path) -> None:
    node, result = _bake(tmp_path, stock_bundle)
    assert result.returncode == 0, result.stderr
    log = node.log.read_text()
    assert f"pcs-agent 1.3.1-1: signature by {PCS_KEY_FINGERPRINT} verified" in log
    assert f"pcs-slurm 25.11.2-1: signature by {PCS_KEY_FINGERPRINT} verified" in log
    assert [c for c in node.calls() if c.startswith("pcs-installer")] == ["pcs-installer -y", "pcs-installer -y"]
    fetched = [c.split()[-1] for c in node.calls() if c.startswith("curl")]
    assert fetched == [AGENT_URL, f"{AGENT_URL}.sig", KEY_URL, SLURM_URL, f"{SLURM_URL}.sig", KEY_URL]
    # The markers a baked boot verifies.
    marker = parse_env_file((node.root / "etc/kiln/image/install_pcs_slurm.env").read_text())
    assert marker["KILN_PCS_SLURM_VERSION"] == "25.11.2-1"
    before, calls = node.snapshot(), len(node.calls())
    again = node.run("install_pcs_agent", "install_pcs_slurm", KILN_PHASE="bake")
    assert again.returncode == 0 and node.mutating_calls(since=calls) == [] and node.snapshot() == before
    assert "PCS agent 1.3.1-1 is installed" in node.log.read_text()


def test_an_installer_whose_signature_does_not_match_is_refused(tmp_path: Path, stock_bundle: Path) -> None:
    node = make_node(tmp_path, stock_bundle)
    (node.root.parent / "payloads" / "aws-pcs-agent-v1.3.1-1.tar.gz").write_bytes(b"not what AWS signed")
    result = node.run("install_pcs_agent", KILN_PHASE="bake")
    assert result.returncode != 0
    assert "FAILED: step install_pcs_agent" in result.stderr
    assert (
        f"artifact pcs-agent 1.3.1-1: no valid signature by the key kiln pins ({PCS_KEY_FINGERPRINT}); refusing"
        in node.log.read_text()
    )
    assert not any(c.startswith("pcs-installer") for c in node.calls())


def test_a_signing_key_with_another_fingerprint_is_refused(tmp_path: Path, stock_bundle: Path) -> None:
    node = make_node(tmp_path, stock_bundle)
    (node.root.parent / "payloads" / "aws-pcs-public-key.pub").write_text("impostor\nFINGERPRINT=" + "0" * 40 + "\n")
    result = node.run("install_pcs_slurm", KILN_PHASE="bake")
    assert result.returncode != 0
    assert f"is not the one kiln pins ({PCS_KEY_FINGERPRINT})" in node.log.read_text()
    assert not any(c.startswith("pcs-installer") for c in node.calls())


def test_a_stock_node_never_installs_the_agent_at_boot(tmp_path: Path, stock_bundle: Path) -> None:
    node = make_node(tmp_path, stock_bundle)
    result = node.run("install_pcs_agent")
    assert result.returncode != 0
    assert "PCS agent must be on the image before the node registers: bake it" in node.log.read_text()
    assert not any(c.startswith("curl") for c in node.calls())


def test_pcs_images_bring_their_agent_and_slurm(tmp_path: Path) -> None:
    config = pcs_config(
        image="pcs-sample", os="al2023", software=dataclasses.replace(PINS, nvidia_driver=None, efa_installer=None)
    )
    node = make_node(tmp_path, render_bundle(config, tmp_path / "bundle").directory)
    simulate_image(node, "pcs-sample", "al2023")
    result = node.run("install_pcs_agent", "install_pcs_slurm")
    assert result.returncode == 0, result.stderr
    log = node.log.read_text()
    assert "PCS agent 1.3.0-1: adopted from the AWS PCS sample AMI for Slurm 25.11" in log
    assert "PCS Slurm 25.11.1: adopted from the AWS PCS sample AMI for Slurm 25.11" in log
    assert not any(c.startswith(("curl", "pcs-installer")) for c in node.calls())
