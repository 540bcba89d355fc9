"""A loaded NVIDIA driver is adopted on every image when it meets the least driver the CUDA of kiln's stack runs on
(services.nvidia.cuda_driver_minimum): an image's recorded version is a release note's word, the minimum is NVIDIA's."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.platforms import at_least, image_profile, service_fact
from tests.support.image_cases import IMAGES, OWN, Image, _config, _node

MINIMUM = service_fact("nvidia", "cuda_driver_minimum").value["linux_driver"]
# Each GPU image case whose data records the driver it ships.
DRIVER_IMAGES = [
    case for case in IMAGES if "nvidia_driver" in image_profile(case.image).owned_on(case.os) and "p5" in case.instance
]
# A driver of CUDA 12.8's branch: below every image's recorded branch, above CUDA 12's minimum.
OLDER_BRANCH = "570.172.08"
BELOW_MINIMUM = "515.65.01"


def _load(node, version: str) -> None:
    module = node.root / "sys/module/nvidia/version"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(f"{version}\n")


def _installs(node) -> list[str]:
    return [c for c in node.calls() if c.startswith(("apt-get", "dnf")) and " install " in c]


def test_the_minimum_is_nvidias_cuda_12_figure_and_below_every_images_driver() -> None:
    fact = service_fact("nvidia", "cuda_driver_minimum")
    assert fact.source.startswith("https://docs.nvidia.com/cuda/")
    assert MINIMUM == "525.60.13"
    for case in DRIVER_IMAGES:
        assert at_least(image_profile(case.image).owns["nvidia_driver"].version, MINIMUM), case.id
    assert at_least(OLDER_BRANCH, MINIMUM) and not at_least(BELOW_MINIMUM, MINIMUM)


def test_parallelcluster_records_the_cookbooks_316_driver_as_a_branch_not_a_requirement() -> None:
    owned = image_profile("parallelcluster").owns["nvidia_driver"]
    assert (owned.version, owned.check) == ("595.71.05", "branch")
    assert owned.source == "https://github.com/aws/aws-parallelcluster-cookbook/pull/3249"


def test_the_bundle_carries_the_minimum(tmp_path: Path) -> None:
    bundle = render_bundle(_config(DRIVER_IMAGES[0]), tmp_path / "bundle").directory
    assert parse_env_file((bundle / "bundle.env").read_text())["KILN_NVIDIA_DRIVER_MINIMUM"] == MINIMUM


@pytest.mark.parametrize("case", DRIVER_IMAGES, ids=[case.id for case in DRIVER_IMAGES])
def test_a_loaded_driver_older_than_the_images_record_is_adopted_and_logged(tmp_path: Path, case: Image) -> None:
    node, _ = _node(tmp_path, case)
    _load(node, OLDER_BRANCH)
    result = node.run("install_nvidia_driver")
    assert result.returncode == 0, result.stderr
    recorded = image_profile(case.image).owns["nvidia_driver"].version
    title = image_profile(case.image).title
    assert (
        f"NVIDIA driver {OLDER_BRANCH}: adopted from the {title} (kiln installs none); kiln's data records "
        f"{recorded}, and the loaded one meets CUDA's minimum {MINIMUM}"
    ) in node.log.read_text()
    assert _installs(node) == []


@pytest.mark.parametrize("case", [*DRIVER_IMAGES, OWN], ids=[case.id for case in [*DRIVER_IMAGES, OWN]])
def test_a_loaded_driver_below_cudas_minimum_stops_the_node_in_one_line(tmp_path: Path, case: Image) -> None:
    node, _ = _node(tmp_path, case)
    _load(node, BELOW_MINIMUM)
    result = node.run("install_nvidia_driver")
    assert result.returncode != 0
    lines = [line for line in node.log.read_text().splitlines() if "least driver CUDA 12" in line]
    assert len(lines) == 1, lines
    assert f"NVIDIA driver {BELOW_MINIMUM} is loaded: older than {MINIMUM}" in lines[0]
    assert "Traceback" not in result.stderr
    assert _installs(node) == []
