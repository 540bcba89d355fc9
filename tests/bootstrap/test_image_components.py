"""The Image Builder components run in the bootstrap harness: the same build phases, in the same order, on a
throwaway root with stubbed package managers; then a node boots the baked root with the network stubbed out."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from kiln.bootstrap.fetch import bundle_digest
from kiln.bootstrap.image_recipe import image_config, read_manifest
from kiln.bootstrap.render import render_bundle
from kiln.constructs.training_image import component_yaml
from kiln.contracts.image_components import BUILD_DIR, component_documents
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, Node, make_node, stub_network

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

URI = "s3://cdk-assets-111111111111-us-east-1/bundle.zip"


def zipped(bundle: Path, target: Path) -> Path:
    """Zip BUNDLE as a CDK asset is zipped: its files, relative to it."""
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(bundle.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(bundle))
    return target


def run_phase(
    document: dict, phase: str, *, node: Node, build_dir: Path, bundle_zip: Path
) -> subprocess.CompletedProcess | None:
    """Run PHASE of DOCUMENT as Image Builder would: S3Download copies the zip, ExecuteBash runs each step, and the
    phase stops at the first step that fails. Return that step's result, or None when every step succeeded."""
    for each in document["phases"]:
        if each["name"] != phase:
            continue
        for step in each["steps"]:
            if step["action"] == "S3Download":
                (entry,) = step["inputs"]
                assert entry["source"] == URI
                shutil.copyfile(bundle_zip, entry["destination"].replace(BUILD_DIR, str(build_dir)))
                continue
            script = "\n".join(step["inputs"]["commands"]).replace(BUILD_DIR, str(build_dir))
            result = subprocess.run(
                ["bash", "-c", script], env=node.env, capture_output=True, text=True, timeout=300, check=False
            )
            if result.returncode != 0:
                return result
    return None


def run_ok(document: dict, phase: str, **where) -> None:
    failed = run_phase(document, phase, **where)
    assert failed is None, f"{document['name']}/{phase}: {failed.stderr}"


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Node, Path, list[dict], Path]:
    """A root baked by running every component's build phase in order, as an image build would."""
    base = tmp_path_factory.mktemp("image")
    bundle = render_bundle(image_config(pcs_config()), base / "bundle").directory
    bundle_zip = zipped(bundle, base / "bundle.zip")
    documents = [
        yaml.safe_load(component_yaml(d))
        for d in component_documents(
            bundle_uri=URI, bundle_sha256=bundle_digest(bundle), install_steps=read_manifest(bundle).install_steps
        )
    ]
    # An image build belongs to no cluster: no cluster.env.
    node = make_node(base / "node", bundle, cluster_env={})
    (node.root / "etc/kiln/cluster.env").unlink()
    build_dir = base / "build"
    for document in documents:
        run_ok(document, "build", node=node, build_dir=build_dir, bundle_zip=bundle_zip)
    return node, bundle, documents, build_dir


def test_build_phases_install_every_step_seal_the_image_and_clean_up(baked) -> None:
    node, bundle, _, build_dir = baked
    manifest = read_manifest(bundle)
    image = node.root / "etc/kiln/image"
    assert sorted(p.stem for p in image.glob("install_*.env")) == sorted(manifest.install_steps)
    assert "KILN_EFA_INSTALLER_VERSION='1.43.2'" in (image / "install_efa.env").read_text()
    assert (node.root / "etc/kiln/baked").read_text() == "pcs\n"
    assert not build_dir.exists()
    assert not (node.root / "var/cache/kiln/downloads").exists()
    assert any(c.startswith("apt-get") for c in node.calls())


def test_the_test_phase_verifies_the_image_on_a_fresh_fetch(baked, tmp_path: Path) -> None:
    node, bundle, documents, _ = baked
    bundle_zip = zipped(bundle, tmp_path / "bundle.zip")
    run_ok(documents[-1], "test", node=node, build_dir=tmp_path / "build", bundle_zip=bundle_zip)
    assert not (tmp_path / "build").exists()


def test_a_node_boots_the_baked_root_with_configure_steps_only_and_no_network(baked, tmp_path: Path) -> None:
    node, _, _, _ = baked
    # The node's own bundle is the full one (NCCL settings, users): the same install pins as the image's.
    full = render_bundle(pcs_config(), tmp_path / "full").directory
    booted = shutil.copytree(node.root, tmp_path / "root", symlinks=True)
    (booted / "etc/kiln/cluster.env").write_text("".join(f"{k}='{v}'\n" for k, v in CLUSTER_ENV.items()))
    network = stub_network(tmp_path / "network")
    env = {**node.env, "KILN_ROOT": str(booted), "KILN_BIN_DIR": str(network.bin_dir)}
    result = subprocess.run(
        ["bash", str(full / "pcs-user-data.sh")], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert network.calls() == []
    log = (booted / "var/log/kiln/bootstrap.log").read_text()
    assert "[configure_slurm] done" in log and "[install_efa] start" in log


def test_a_bake_refuses_a_bundle_whose_content_changed_and_runs_nothing_of_it(baked, tmp_path: Path) -> None:
    node, bundle, documents, _ = baked
    # One byte of one step changed in CDK's shared bucket after kiln computed the digest.
    tampered = Path(shutil.copytree(bundle, tmp_path / "tampered"))
    step = tampered / "steps" / "install_launcher.sh"
    text = step.read_bytes()
    step.write_bytes(text[:-1] + bytes([text[-1] ^ 1]))
    calls = len(node.calls())
    failed = run_phase(
        documents[0], "build", node=node, build_dir=tmp_path / "build", bundle_zip=zipped(tampered, tmp_path / "t.zip")
    )
    assert failed is not None, "the bake unpacked a bundle whose content does not match its digest"
    actual, expected = bundle_digest(tampered), bundle_digest(bundle)
    assert f"image-bake: {URI}: the bundle's content has sha256 {actual}, expected {expected}" in failed.stderr
    assert not (tmp_path / "build" / "bundle").exists()
    assert node.calls()[calls:] == []
