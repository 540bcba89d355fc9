"""Which Neuron release a spec's nodes install: the pin, else the default for the spec's Neuron types
(kiln.catalog.neuron), never one fixed release; none where the image brings its own driver, or nothing has Neuron."""

from __future__ import annotations

import copy
from pathlib import Path

from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from tests.support.specs import MINIMAL_SPEC

# Neuron 2.29.1's host packages as the install step takes them (NAME:VERSION).
PACKAGES_2_29_1 = (
    "aws-neuronx-dkms:2.27.4.0* aws-neuronx-collectives:2.31.24.0* aws-neuronx-runtime-lib:2.31.24.0* "
    "aws-neuronx-tools:2.29.22.0*"
)


def spec(instance_type: str, backend: str = "pcs", **software):
    data = copy.deepcopy(MINIMAL_SPEC)
    data["compute"]["backend"] = backend
    data["compute"]["groups"][0]["instance_type"] = instance_type
    if backend == "eks":
        data["network"] = {"second_availability_zone": "us-east-1b"}
    if software:
        data["software"] = software
    return parse_spec(data)


def test_an_unpinned_trn1_node_installs_the_last_release_whose_pytorch_trains(tmp_path: Path) -> None:
    config = config_from_spec(spec("trn1.32xlarge"))
    assert config.software.neuron == "2.29.1"
    values = parse_env_file((render_bundle(config, tmp_path / "b").directory / "bundle.env").read_text())
    assert values["KILN_NEURON_VERSION"] == "2.29.1"
    assert values["KILN_NEURON_PACKAGES"] == PACKAGES_2_29_1


def test_a_pin_installs_its_own_releases_packages() -> None:
    config = config_from_spec(spec("trn1n.32xlarge", neuron="2.29.0"))
    assert config.software.neuron == "2.29.0"


def test_the_default_follows_the_type_and_nothing_without_neuron_devices() -> None:
    # inf2: the newest release with PyTorch/XLA inference (it last shipped in 2.31).
    assert config_from_spec(spec("inf2.xlarge")).software.neuron == "2.31.1"
    assert config_from_spec(spec("p5.48xlarge")).software.neuron is None


def test_where_the_image_brings_its_neuron_driver_the_node_installs_none() -> None:
    on_eks = spec("trn1.32xlarge", "eks")
    assert config_from_spec(on_eks).software.neuron is None
    # Pods still run the release kiln picks for the type (their container's Neuron libraries).
    assert on_eks.neuron_release == "2.29.1"
