"""software.neuron: unset, the default release for the groups' Neuron types; a release that cannot do a group's work,
or does not install on the nodes' OS, is one line of `kiln validate` with Neuron's source; a beta path is a warning."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kiln.cli.main import main
from kiln.spec import parse_spec
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as problems

RTD = "https://awsdocs-neuron.readthedocs-hosted.com/en"
EOS_LITE = f"{RTD}/latest/about-neuron/announcements/neuron2.x/announce-eos-libtorch-neuronx-lite.html"


def neuron_spec(instance_type: str = "trn1.32xlarge", backend: str = "pcs", **software) -> dict:
    """Return MINIMAL_SPEC with its one group on INSTANCE_TYPE, on BACKEND, with SOFTWARE."""
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["compute"]["backend"] = backend
    spec["compute"]["groups"][0]["instance_type"] = instance_type
    if software:
        spec["software"] = software
    return spec


@pytest.mark.parametrize(
    ("instance_type", "release"),
    [("trn1.32xlarge", "2.29.1"), ("trn1n.32xlarge", "2.29.1"), ("inf2.xlarge", "2.31.1"), ("p5.48xlarge", None)],
)
def test_unset_the_release_is_the_default_for_the_groups_types(instance_type: str, release: str | None) -> None:
    spec = neuron_spec(instance_type)
    assert problems(spec) == []
    assert parse_spec(spec).neuron_release == release
    assert parse_spec(neuron_spec(instance_type, neuron="2.29.0")).neuron_release == "2.29.0"


def test_a_release_that_does_not_train_on_trn1_is_one_line_with_neurons_source() -> None:
    assert problems(neuron_spec(neuron="2.32.0")) == [
        "x.yaml: software.neuron: got '2.32.0': Neuron 2.32.0 does not train on trn1.32xlarge (trn1) with PyTorch: "
        "no torch-neuronx: torch-neuronx (PyTorch/XLA) is not included in Neuron 2.32.0; its setup guide installs "
        f"the Neuron 2.31 package versions for it ({RTD}/v2.32.0/setup/pytorch/update-manual.html); no torchneuron: "
        "TorchNeuron (native PyTorch) is torch-neuronx from Neuron 2.33; before that it was a private beta with no "
        "package kiln can install (libtorch-neuronx-lite, which this release ships, is the vLLM plugin's) "
        f"({EOS_LITE}); releases that train there: 2.29.0, 2.29.1"
    ]
    [line] = problems(neuron_spec("trn1n.32xlarge", neuron="2.31.1"))
    assert line.startswith("x.yaml: software.neuron: got '2.31.1': Neuron 2.31.1 does not train on trn1n.32xlarge")
    assert "torch-neuronx's training support ended (https://awsdocs-neuron.readthedocs-hosted.com/" in line


@pytest.mark.parametrize("release", ["2.30.0", "2.31.0", "2.31.1", "2.32.0"])
def test_a_release_before_torchneuron_pinned_on_trn2_is_one_line_with_the_source(release: str) -> None:
    # Their libtorch_neuronx_lite is not TorchNeuron, and PyTorch/XLA no longer trains: no family trains on them.
    [line] = problems(neuron_spec("trn2.48xlarge", neuron=release))
    assert line.startswith(
        f"x.yaml: software.neuron: got '{release}': Neuron {release} does not train on trn2.48xlarge (trn2) with "
        "PyTorch: "
    )
    assert "no torchneuron: TorchNeuron (native PyTorch) is torch-neuronx from Neuron 2.33; " in line
    assert line.endswith(f"({EOS_LITE}); releases that train there: 2.29.0, 2.29.1, 2.33.0, 2.33.1")


def test_inf2_pinned_to_a_release_without_pytorch_xla_is_refused() -> None:
    [line] = problems(neuron_spec("inf2.xlarge", neuron="2.33.1"))
    assert line.startswith(
        "x.yaml: software.neuron: got '2.33.1': Neuron 2.33.1 does not serve inference on inf2.xlarge (inf2) with "
        "PyTorch: no torch-neuronx: its setup guide says torch-neuronx for PyTorch 2.9 (PyTorch/XLA) last shipped in "
        "Neuron 2.31"
    )
    assert line.endswith("releases that serve inference there: 2.29.0, 2.29.1, 2.30.0, 2.31.0, 2.31.1")


def test_a_release_that_is_out_but_not_catalogued_is_refused_with_why() -> None:
    [line] = problems(neuron_spec("trn2.48xlarge", neuron="2.34.0"))
    assert line.startswith(
        "x.yaml: software.neuron: is not a Neuron SDK release kiln knows the packages of (got '2.34.0': Neuron 2.34.0 "
        "(2026-11-30) is out, but kiln found no list of its host package versions ("
    )
    assert f"({RTD}/latest/_sources/release-notes/2.34.0.rst); allowed: 2.29.0, " in line


def test_a_family_no_release_supports_is_refused_on_the_groups_type() -> None:
    [line] = problems(neuron_spec("inf1.xlarge"))
    assert line.startswith(
        "x.yaml: compute.groups[0].instance_type: no Neuron release kiln knows fits: Neuron 2.33.1 does not support "
        "inf1.xlarge (inf1): Inf1 runs the first-generation Neuron packages"
    )


def test_a_release_kiln_installs_on_an_os_it_does_not_support_is_refused() -> None:
    # ParallelCluster's nodes run Ubuntu 22.04 unless told otherwise; Neuron 2.33 ended Ubuntu 22.04.
    assert problems(neuron_spec("trn2.48xlarge", "parallelcluster", neuron="2.33.1")) == [
        "x.yaml: software.neuron: Neuron 2.33.1 installs on ubuntu2404, al2023 only "
        "(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/_sources/setup/pytorch/update-manual.rst), and "
        "these nodes run ubuntu2204: choose compute.image.os ubuntu2404 or another release"
    ]
    on_al2023 = neuron_spec("trn2.48xlarge", "parallelcluster", neuron="2.33.1")
    on_al2023["compute"]["image"] = {"os": "al2023"}
    assert problems(on_al2023) == []


def test_an_unknown_release_names_the_known_ones() -> None:
    [line] = problems(neuron_spec(neuron="2.99.0"))
    assert line.startswith("x.yaml: software.neuron: is not a Neuron SDK release kiln knows the packages of")
    assert "2.29.1" in line and "2.33.1" in line


def test_validate_warns_of_a_release_that_trains_only_in_a_beta(tmp_path: Path, capsys) -> None:
    path = tmp_path / "trn2.yaml"
    path.write_text(yaml.safe_dump(neuron_spec("trn2.48xlarge", neuron="2.33.1")))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert (
        f"{path}: Neuron 2.33.1 offers training on trn2.48xlarge (trn2) only as torchneuron beta "
        "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html); "
        "unpinned, kiln chooses 2.29.1\n"
    ) in err
    path.write_text(yaml.safe_dump(neuron_spec("trn2.48xlarge")))
    assert main(["validate", str(path)]) == 0
    assert "beta" not in capsys.readouterr().err


def eks_neuron_spec(**software) -> dict:
    """Return a trn1 spec on EKS, whose AMI ships its own Neuron driver (platforms.json, images.eks-al2023)."""
    spec = neuron_spec(backend="eks", **software)
    spec["network"] = {"second_availability_zone": "us-east-1b"}
    return spec


def test_on_eks_a_pin_names_the_pods_release_where_the_amis_driver_runs_it() -> None:
    spec = eks_neuron_spec(neuron="2.29.0")
    assert problems(spec) == []
    assert parse_spec(spec).neuron_release == "2.29.0"


def test_on_eks_a_release_newer_than_the_amis_driver_is_one_line_naming_the_releases_it_runs() -> None:
    # 2.32.0 does not train on trn1 either (a line of its own); this line is about the image's driver.
    lines = problems(eks_neuron_spec(neuron="2.32.0"))
    [driver] = [line for line in lines if "driver" in line]
    assert driver == (
        "x.yaml: software.neuron: got '2.32.0': Neuron 2.32.0's runtime needs the Neuron driver 2.30.2.0 or newer "
        "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/faq.html), and the EKS-optimized "
        "Amazon Linux 2023 accelerated AMI (NVIDIA or Neuron variant) ships driver 2.29.0.0; releases that run on it: "
        "2.29.0, 2.29.1, 2.30.0, 2.31.0, 2.31.1"
    )
