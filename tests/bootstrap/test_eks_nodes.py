"""EKS nodes become Ready: the pod sandbox image the EKS AMI caches in containerd's store survives the move of that
store to local NVMe, no host NCCL plugin is required where pods bring their own, and every directory kiln binds keeps
what the image put there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import render_bundle
from kiln.catalog.platforms import image_profile
from tests.support.bootstrap import PINS, pcs_config, pins_beside
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image
from tests.support.pcs_payloads import OFI_NCCL_PLUGIN

# Five whole-bundle and step runs over rendered bundles: kept out of the fast tier with the other bootstrap runs.
pytestmark = pytest.mark.slow

SANDBOX = image_profile("eks-al2023").fact("sandbox_image").value


def _eks_node(tmp_path: Path, image: str = "eks-al2023", instance: str = "p5.48xlarge") -> Node:
    """A node of IMAGE on EKS, laid out as the image ships it (for eks-al2023: minimal EFA, the cached pause image)."""
    config = pcs_config(
        target="eks",
        image=image,
        os="al2023",
        groups=(NodeGroup(name="accel", instance_type=instance),),
        software=dataclasses.replace(pins_beside(image, "al2023"), nccl=None),
        service_instance_types=(),
        container_runtime="containerd",
        exporters=(),
    )
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": instance})
    simulate_image(node, image, "al2023")
    return node


def _store(node: Node) -> dict[str, bytes]:
    """Return containerd's store as the node shows it at /var/lib/containerd: relative path -> content."""
    root = node.root / SANDBOX["containerd_root"].lstrip("/")
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_pause_image_the_eks_ami_caches_is_still_in_containerds_store_after_the_move_to_nvme(
    tmp_path: Path,
) -> None:
    node = _eks_node(tmp_path)
    image_store = _store(node)
    assert any(name.endswith("meta.db") for name in image_store), image_store
    # containerd's root is private to root, as containerd makes it; the copy keeps its mode.
    (node.root / "var/lib/containerd").chmod(0o700)
    result = node.run("configure_container_storage")
    assert result.returncode == 0, result.stderr
    calls = node.calls()
    assert f"mount --bind {node.root}/scratch/containerd {node.root}/var/lib/containerd" in calls
    # What containerd reads at /var/lib/containerd once bound: the image's store, byte for byte, on the NVMe.
    assert _store(node) == image_store
    assert (node.root / SANDBOX["metadata"].lstrip("/")).read_text() == f"{SANDBOX['image']}\n"
    assert (node.root / "scratch/containerd").stat().st_mode & 0o777 == 0o700
    assert "copying /var/lib/containerd onto /scratch/containerd before binding it over /var/lib/containerd" in (
        node.log.read_text()
    )
    # A rerun after the bind copies nothing again and changes nothing.
    before, count = node.snapshot(), len(node.calls())
    again = node.run("configure_container_storage")
    assert again.returncode == 0, again.stderr
    assert node.mutating_calls(since=count) == [] and node.snapshot() == before
    assert node.log.read_text().count("copying /var/lib/containerd") == 1


def test_a_copy_cut_short_is_started_over_and_a_finished_one_never_repeated(tmp_path: Path) -> None:
    node = _eks_node(tmp_path)
    image_store = _store(node)
    # A boot that died mid-copy left part of the store beside the scratch directory, nothing in its place.
    partial = node.root / "scratch/containerd.kiln-copy"
    partial.mkdir(parents=True)
    (partial / "half-written").write_text("x")
    assert node.run("configure_container_storage").returncode == 0
    assert not partial.exists() and _store(node) == image_store
    # The scratch copy is complete before the bind: a rerun whose bind is gone binds it again without copying.
    (node.state / "mounts" / str(node.root / "var/lib/containerd").replace("/", "%")).unlink()
    (node.root / "var/lib/containerd").unlink()
    (node.root / "var/lib/containerd").mkdir()
    assert node.run("configure_container_storage").returncode == 0
    assert node.log.read_text().count("copying /var/lib/containerd") == 1
    assert _store(node) == image_store


def test_files_some_other_tool_left_on_scratch_are_neither_hidden_nor_mixed_with_the_images(tmp_path: Path) -> None:
    node = _eks_node(tmp_path)
    foreign = node.root / "scratch/containerd/io.containerd.metadata.v1.bolt/meta.db"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("another store\n")
    result = node.run("configure_container_storage")
    assert result.returncode != 0 and "FAILED: step configure_container_storage" in result.stderr
    assert (
        "/scratch/containerd already holds files, and /var/lib/containerd holds the image's: kiln neither hides these "
        "behind the bind nor mixes the two stores"
    ) in node.log.read_text()
    assert not any(c.startswith("mount --bind") for c in node.calls())
    assert foreign.read_text() == "another store\n" and _store(node)


def test_a_store_without_the_cached_pause_image_after_the_move_stops_the_node_by_name(tmp_path: Path) -> None:
    node = _eks_node(tmp_path)
    # A scratch directory recorded as the image's copy that no longer holds it (its disk was replaced).
    (node.root / "scratch/containerd").mkdir(parents=True)
    (node.root / "scratch/.kiln-copied-containerd").write_text("")
    result = node.run("configure_container_storage")
    assert result.returncode != 0
    assert (
        f"no {SANDBOX['metadata']} after moving containerd's store to /scratch: the "
        f"{image_profile('eks-al2023').title} caches the pod sandbox image {SANDBOX['image']} there, which cannot be "
        "pulled, so no pod would start"
    ) in node.log.read_text()


@pytest.mark.parametrize("runtime", ["docker", "containerd"])
def test_every_directory_kiln_binds_keeps_what_the_image_put_there(tmp_path: Path, runtime: str) -> None:
    """On a Slurm target too: an image's docker or containerd state (images it pulled at build time) stays visible."""
    config = pcs_config(container_runtime=runtime)
    node = make_node(tmp_path / "node", render_bundle(config, tmp_path / "bundle").directory)
    kept = {}
    for name in ("docker", "containerd") if runtime == "docker" else ("containerd",):
        path = node.root / f"var/lib/{name}/image/cached.json"
        path.parent.mkdir(parents=True)
        path.write_text(f"{name} image\n")
        kept[path] = f"{name} image\n"
    assert node.run("configure_container_storage").returncode == 0
    for path, text in kept.items():
        assert path.read_text() == text, path


# Each EKS image as its data says it ships EFA: minimal (no plugin) on the EKS AMI, HyperPod's full installer (with it).
@pytest.mark.parametrize(("image", "host_plugin"), [("eks-al2023", False), ("hyperpod-eks", True)])
def test_a_gpu_efa_eks_node_needs_no_host_nccl_plugin_and_finishes_its_whole_bundle(
    tmp_path: Path, image: str, host_plugin: bool
) -> None:
    node = _eks_node(tmp_path, image)
    assert (node.root / OFI_NCCL_PLUGIN).exists() == host_plugin
    step = node.run("install_nccl")
    assert step.returncode == 0, step.stderr
    assert "jobs run in pods on eks, which bring NCCL and aws-ofi-nccl: the host needs neither" in node.log.read_text()
    assert not (node.root / "etc/ld.so.conf.d/kiln-aws-ofi-nccl.conf").exists()
    # The node's whole user data: every install and configure step, none of them FAILED.
    boot = node.run(entry="eks-user-data.sh")
    assert boot.returncode == 0, boot.stderr
    assert "FAILED" not in boot.stderr and "error:" not in node.log.read_text()
    if "sandbox_image" in image_profile(image).facts:
        assert (node.root / SANDBOX["metadata"].lstrip("/")).read_text() == f"{SANDBOX['image']}\n"


def test_a_slurm_gpu_node_registers_the_plugin_where_recent_efa_installers_put_it(tmp_path: Path) -> None:
    config = pcs_config(software=dataclasses.replace(PINS, nccl=None))
    node = make_node(tmp_path / "node", render_bundle(config, tmp_path / "bundle").directory)
    plugin = node.root / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("")
    assert node.run("install_nccl").returncode == 0
    assert (node.root / "etc/ld.so.conf.d/kiln-aws-ofi-nccl.conf").read_text() == (
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu\n"
    )


def test_a_slurm_gpu_efa_node_without_the_plugin_still_stops_by_name(tmp_path: Path) -> None:
    node = make_node(tmp_path / "node", render_bundle(pcs_config(), tmp_path / "bundle").directory)
    result = node.run("install_nccl")
    assert result.returncode != 0
    assert "aws-ofi-nccl (libnccl-net-ofi.so or libnccl-net.so or libnccl-net-aws-ofi.so) not found in" in (
        node.log.read_text()
    )
