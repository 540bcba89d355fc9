"""The NVIDIA container toolkit an image ships: adopted where the data says the image has it, and never downgraded to
kiln's pin on any image."""

from __future__ import annotations

from pathlib import Path

from kiln.catalog.platforms import KILN_INSTALLS, at_least, image_profile
from tests.support.image_cases import IMAGES, OWN, Image, _node

HYPERPOD = next(case for case in IMAGES if case.image == "hyperpod-slurm")
TOOLKIT_INSTALLS = ("nvidia-container-toolkit=", "nvidia-container-toolkit-")


def _toolkit_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith(("apt-get", "dnf")) and any(word in c for word in TOOLKIT_INSTALLS)]


def test_the_hyperpod_slurm_image_ships_a_toolkit_newer_than_kilns_pin() -> None:
    owned = image_profile("hyperpod-slurm").owned_on("ubuntu2204")["nvidia_container_toolkit"]
    assert owned.version and at_least(owned.version, KILN_INSTALLS["nvidia_container_toolkit"])
    assert "sagemaker-hyperpod-release-ami-slurm" in owned.source


def test_a_hyperpod_slurm_node_adopts_its_images_toolkit(tmp_path: Path) -> None:
    node, laid = _node(tmp_path, HYPERPOD)
    assert laid["nvidia_container_toolkit"] == "1.18.1"
    result = node.run("install_container_runtime")
    assert result.returncode == 0, result.stderr
    title = image_profile("hyperpod-slurm").title
    assert f"NVIDIA container toolkit 1.18.1: adopted from the {title} (kiln installs none)" in node.log.read_text()
    assert _toolkit_installs(node.calls()) == []


def test_a_newer_toolkit_on_an_image_of_the_users_own_is_kept_not_downgraded(tmp_path: Path) -> None:
    # An image kiln knows nothing of: its toolkit is newer than the pin, so kiln adopts it and logs so.
    node, _ = _node(tmp_path, OWN)
    node.set_state("pkgs/nvidia-container-toolkit", "1.19.1-1")
    result = node.run("install_container_runtime")
    assert result.returncode == 0, result.stderr
    assert (
        "NVIDIA container toolkit 1.19.1-1: the image's, newer than kiln's 1.17.8; adopted (kiln installs none)"
        in node.log.read_text()
    )
    assert _toolkit_installs(node.calls()) == []


def test_an_older_toolkit_is_brought_to_kilns_pin(tmp_path: Path) -> None:
    node, _ = _node(tmp_path, OWN)
    node.set_state("pkgs/nvidia-container-toolkit", "1.16.2-1")
    assert node.run("install_container_runtime").returncode == 0
    assert any("nvidia-container-toolkit=1.17.8-1" in c for c in _toolkit_installs(node.calls()))


def test_no_image_profile_leaves_a_toolkit_it_ships_to_kilns_pin(tmp_path: Path) -> None:
    # Every image whose data says it ships the toolkit adopts it on a GPU node: kiln's install never runs there.
    for case in (c for c in IMAGES if "nvidia_container_toolkit" in image_profile(c.image).owned_on(c.os)):
        node, _ = _node(tmp_path / case.id, Image(case.target, case.image, case.os, "p5.48xlarge"))
        result = node.run("install_container_runtime")
        assert result.returncode == 0, (case.id, result.stderr)
        assert _toolkit_installs(node.calls()) == [], case.id
