"""The Neuron release catalogue (kiln/catalog/data/neuron_releases.json) and what kiln decides from it: the default
release for a spec's instance types, and the one line that refuses a release which cannot do a type's work."""

from __future__ import annotations

import datetime
import json
import re

import pytest

from kiln.bootstrap.config import OPERATING_SYSTEMS
from kiln.catalog import instance_type, known_instance_types
from kiln.catalog.neuron import (
    FRAMEWORKS,
    RELEASES_PATH,
    STATUSES,
    default_neuron_release,
    known_neuron_releases,
    neuron_beta_note,
    neuron_family,
    neuron_packages,
    neuron_release,
    neuron_support_problem,
    release_summary,
    resolve_neuron_release,
)
from kiln.catalog.platforms import SOURCE

RAW = json.loads(RELEASES_PATH.read_text())
RELEASES = RAW["releases"]
HOST_PACKAGES = {"aws-neuronx-dkms", "aws-neuronx-collectives", "aws-neuronx-runtime-lib", "aws-neuronx-tools"}
RELEASE_FIELDS = {
    "date",
    "source",
    "packages",
    "packages_source",
    "os",
    "os_source",
    "families",
    "families_source",
    "frameworks",
    "training_image",
}
FRAMEWORK_FIELDS = {"package", "version", "torch", "python", "os", "training", "inference", "source"}
FAMILIES = {"trn1", "trn2", "trn3", "inf2"}
TRAINING_IMAGE = re.compile(r"public\.ecr\.aws/neuron/pytorch-training-neuronx:[0-9][\w.-]+")
ANNOUNCEMENT = "announce-no-support-pytorch-xla-training"
RTD = "https://awsdocs-neuron.readthedocs-hosted.com/en"
# Neuron's 2.33 manual-install update page: PyTorch/XLA "last shipped in Neuron 2.31".
UPDATE_MANUAL_2_33 = f"{RTD}/v2.33.0/setup/pytorch/update-manual.html"
# The libtorch-neuronx-lite announcement: TorchNeuron is torch-neuronx, released in 2.33.
EOS_LITE = f"{RTD}/latest/about-neuron/announcements/neuron2.x/announce-eos-libtorch-neuronx-lite.html"
IMAGE_2_29_1 = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"


def _urls(value: object) -> list[str]:
    return re.findall(r"https?://[^\s\"'()]+", json.dumps(value))


def test_the_catalogue_holds_the_releases_a_user_may_pin_oldest_first() -> None:
    # The last two with PyTorch/XLA training, and every release since that Neuron's notes kiln read list packages of.
    assert known_neuron_releases() == ("2.29.0", "2.29.1", "2.30.0", "2.31.0", "2.31.1", "2.32.0", "2.33.0", "2.33.1")
    dates = [datetime.date.fromisoformat(RELEASES[v]["date"]) for v in known_neuron_releases()]
    assert dates == sorted(dates)


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_every_release_has_every_fact_with_an_aws_source(version: str) -> None:
    raw = RELEASES[version]
    assert set(raw) >= RELEASE_FIELDS, RELEASE_FIELDS - set(raw)
    assert set(raw["packages"]) == HOST_PACKAGES
    for name, pattern in raw["packages"].items():
        assert re.fullmatch(r"\d+(\.\d+){3}\*", pattern), (name, pattern)
    assert raw["os"] and set(raw["os"]) <= set(OPERATING_SYSTEMS)
    assert set(raw["families"]) == FAMILIES
    for name, framework in raw["frameworks"].items():
        assert set(framework) >= FRAMEWORK_FIELDS, (name, FRAMEWORK_FIELDS - set(framework))
        assert set(framework["os"]) <= set(OPERATING_SYSTEMS) and framework["python"]
        for use in ("training", "inference"):
            assert framework[use]["status"] in STATUSES
            assert set(framework[use]["families"]) <= FAMILIES
    absent = raw.get("absent_frameworks", {})
    assert set(absent) <= set(FRAMEWORKS) and not set(absent) & set(raw["frameworks"]), absent
    for name, entry in absent.items():
        assert entry["why"] and SOURCE.fullmatch(entry["source"]), (name, entry)
    image = raw["training_image"]
    assert image["value"] is None or TRAINING_IMAGE.fullmatch(image["value"]), image
    for key in ("source", "packages_source", "os_source", "families_source"):
        assert SOURCE.fullmatch(raw[key]), (key, raw[key])
    for source in [f["source"] for f in raw["frameworks"].values()] + [image["source"]]:
        assert SOURCE.fullmatch(source), source
    # Every address a note quotes is AWS's too.
    for url in _urls(raw):
        assert SOURCE.fullmatch(url.rstrip(".,;")), url


def test_the_catalogues_own_facts_have_aws_sources_and_name_what_ec2_reports() -> None:
    for url in _urls({key: value for key, value in RAW.items() if key != "releases"}):
        assert SOURCE.fullmatch(url.rstrip(".,;")), url
    # The names are EC2's (NeuronDeviceInfo.Name), cited from EC2's API reference, not from a release note.
    assert (
        RAW["accelerators_source"] == "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_NeuronDeviceInfo.html"
    )
    # The accelerator names the instance catalogue carries for Neuron devices, each mapped to a Neuron family.
    assert RAW["accelerators"] == {"Trainium": "trn1", "Trainium2": "trn2", "Inferentia": "inf1", "Inferentia2": "inf2"}
    assert set(RAW["unsupported_families"]) == {"inf1"}
    # Every Neuron type of the instance catalogue has a family (a new accelerator would otherwise fail unseen).
    for name in known_instance_types():
        if instance_type(name).neuron_count:
            assert neuron_family(name) in {"trn1", "trn2", "inf1", "inf2"}, name


def test_the_api_reads_each_release_whole() -> None:
    release = neuron_release("2.29.1")
    assert release.version == "2.29.1" and release.date == "2026-05-01"
    assert (
        release.packages
        == neuron_packages("2.29.1")
        == {
            "aws-neuronx-dkms": "2.27.4.0*",
            "aws-neuronx-collectives": "2.31.24.0*",
            "aws-neuronx-runtime-lib": "2.31.24.0*",
            "aws-neuronx-tools": "2.29.22.0*",
        }
    )
    assert (
        release.training_image
        == "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"
    )
    assert release.training_image_source.startswith(
        "https://github.com/aws-neuron/deep-learning-containers/blob/2.29.1/"
    )
    status, framework = release.training("trn1")
    assert (status, framework.name, framework.torch) == ("supported", "torch-neuronx", "2.9")
    assert neuron_release("2.32.0").training_image is None
    assert neuron_release("2.32.0").training("trn1") is None


def test_an_unknown_release_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ValueError) as caught:
        neuron_release("2.99.0")
    assert str(caught.value) == (
        f"software.neuron: got '2.99.0', allowed: {', '.join(known_neuron_releases())} (releases kiln knows)"
    )
    with pytest.raises(ValueError, match="got '2.99.0'"):
        neuron_packages("2.99.0")


@pytest.mark.parametrize(
    ("name", "family"),
    [("trn1.32xlarge", "trn1"), ("trn1n.32xlarge", "trn1"), ("trn2.48xlarge", "trn2"), ("inf2.xlarge", "inf2")],
)
def test_trn1n_is_a_trn1_as_neuron_names_it(name: str, family: str) -> None:
    assert neuron_family(name) == family


@pytest.mark.parametrize(
    ("types", "default"),
    [
        # PyTorch/XLA trains on trn1 up to 2.29.x; nothing after trains there.
        (["trn1.32xlarge"], "2.29.1"),
        (["trn1n.32xlarge"], "2.29.1"),
        # TorchNeuron trains on trn2 only as a beta (public from 2.33): the default stays on general support.
        (["trn2.48xlarge"], "2.29.1"),
        # Inference: PyTorch/XLA last shipped in 2.31 (2.32.0 and 2.33.x have none), and TorchNeuron is Trn2/Trn3 only.
        (["inf2.xlarge"], "2.31.1"),
        (["inf2.xlarge", "trn1.32xlarge"], "2.29.1"),
        (["p5.48xlarge", "trn1.32xlarge"], "2.29.1"),
        (["p5.48xlarge", "m5.2xlarge"], None),
        ([], None),
    ],
)
def test_the_default_is_the_newest_release_generally_supporting_every_types_work(types, default) -> None:
    assert default_neuron_release(types) == default
    assert resolve_neuron_release(None, types) == default
    assert resolve_neuron_release("2.33.1", types) == "2.33.1"


@pytest.mark.parametrize("family", ["trn1", "trn2", "inf2"])
def test_no_newer_release_does_the_defaults_work_generally_supported(family: str) -> None:
    name = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "inf2": "inf2.xlarge"}[family]
    default = default_neuron_release([name])
    later = known_neuron_releases()[known_neuron_releases().index(default) + 1 :]

    def general(version: str) -> bool:
        release = neuron_release(version)
        best = release.training(family) if family.startswith("trn") else release.inference(family)
        return best is not None and best[0] == "supported"

    assert general(default)
    assert not any(general(v) for v in later), later


def test_a_release_that_cannot_train_on_trn1_is_one_line_with_its_source_and_the_ones_that_can() -> None:
    line = neuron_support_problem("2.32.0", "trn1.32xlarge")
    assert "\n" not in line
    assert line.startswith(
        "Neuron 2.32.0 does not train on trn1.32xlarge (trn1) with PyTorch: no torch-neuronx: torch-neuronx "
        "(PyTorch/XLA) is not included in Neuron 2.32.0; its setup guide installs the Neuron 2.31 package versions "
        f"for it ({RTD}/v2.32.0/setup/pytorch/update-manual.html); no torchneuron: "
    )
    assert EOS_LITE in line
    assert line.endswith("releases that train there: 2.29.0, 2.29.1")
    # 2.30.0 still ships torch-neuronx 2.9, with training support ended.
    assert "torch-neuronx's training support ended" in neuron_support_problem("2.30.0", "trn1n.32xlarge")
    assert neuron_support_problem("2.29.1", "trn1.32xlarge") is None
    assert neuron_support_problem("2.32.0", "p5.48xlarge") is None


def test_inf1_and_a_release_without_pytorch_inference_are_refused() -> None:
    inf1 = neuron_support_problem("2.29.1", "inf1.xlarge")
    assert inf1.startswith("Neuron 2.29.1 does not support inf1.xlarge (inf1): Inf1 runs the first-generation")
    assert "src/helperscripts/n2-manifest.json" in inf1
    assert neuron_support_problem("2.32.0", "inf2.xlarge").startswith(
        "Neuron 2.32.0 does not serve inference on inf2.xlarge (inf2) with PyTorch: no torch-neuronx: "
    )
    assert neuron_support_problem("2.31.1", "inf2.xlarge") is None


@pytest.mark.parametrize("version", ["2.33.0", "2.33.1"])
def test_2_33_has_no_pytorch_xla_so_it_serves_no_inf2_and_trains_no_trn1(version: str) -> None:
    # Neuron's 2.33 setup pages: PyTorch/XLA last shipped in 2.31, PyTorch is for Trn2/Trn3 only (the safe reading
    # of the artifacts page, which lists the 2.31 build again).
    release = neuron_release(version)
    assert [framework.name for framework in release.frameworks] == ["torchneuron"]
    assert release.absent["torch-neuronx"][1] == UPDATE_MANUAL_2_33
    assert release.inference("inf2") is None and release.training("trn1") is None
    assert neuron_support_problem(version, "inf2.xlarge") == (
        f"Neuron {version} does not serve inference on inf2.xlarge (inf2) with PyTorch: no torch-neuronx: its setup "
        "guide says torch-neuronx for PyTorch 2.9 (PyTorch/XLA) last shipped in Neuron 2.31 and updates it to the "
        f"Neuron 2.31 package versions; from 2.33.0 torch-neuronx is TorchNeuron ({UPDATE_MANUAL_2_33}); torchneuron "
        f"does inference on trn2, trn3 only ({RTD}/latest/release-notes/components/torchneuron.html); releases that "
        "serve inference there: 2.29.0, 2.29.1, 2.30.0, 2.31.0, 2.31.1"
    )


@pytest.mark.parametrize("version", ["2.30.0", "2.31.0", "2.31.1", "2.32.0"])
def test_2_30_to_2_32_have_no_torchneuron_and_train_on_no_family(version: str) -> None:
    # libtorch_neuronx_lite is the vLLM plugin's package, not TorchNeuron (torch-neuronx from 2.33).
    release = neuron_release(version)
    assert "torchneuron" not in {framework.name for framework in release.frameworks}
    assert release.absent["torchneuron"][1] == EOS_LITE
    assert all(release.training(family) is None for family in ("trn1", "trn2", "trn3"))
    line = neuron_support_problem(version, "trn2.48xlarge")
    assert "\n" not in line and line.startswith(
        f"Neuron {version} does not train on trn2.48xlarge (trn2) with PyTorch: "
    )
    assert "no torchneuron: TorchNeuron (native PyTorch) is torch-neuronx from Neuron 2.33; " in line
    assert line.endswith(f"({EOS_LITE}); releases that train there: 2.29.0, 2.29.1, 2.33.0, 2.33.1")
    assert neuron_beta_note(version, "trn2.48xlarge") is None


def test_no_release_catalogues_the_vllm_plugins_package_as_a_framework() -> None:
    packages = {f["package"] for raw in RELEASES.values() for f in raw["frameworks"].values()}
    assert packages == {"torch-neuronx"}


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_a_release_that_fails_a_familys_work_says_why_for_each_pytorch_framework(version: str) -> None:
    release = neuron_release(version)
    fails = [f for f in ("trn1", "trn2", "trn3") if release.training(f) is None] + (
        ["inf2"] if release.inference("inf2") is None else []
    )
    if fails:
        named = {framework.name for framework in release.frameworks} | set(release.absent)
        assert named == set(FRAMEWORKS), (version, fails, named)


def test_a_release_that_is_out_without_a_package_list_is_refused_with_why_not_guessed() -> None:
    assert "2.34.0" not in known_neuron_releases()
    assert set(RAW["uncatalogued"]) == {"2.34.0"} and not set(RAW["uncatalogued"]) & set(RELEASES)
    assert "2.34.0" in RAW["about"] and "package list was not found" in RAW["about"]
    with pytest.raises(ValueError) as caught:
        neuron_release("2.34.0")
    assert str(caught.value).startswith(
        "software.neuron: got '2.34.0': Neuron 2.34.0 (2026-11-30) is out, but kiln found no list of its host "
        "package versions ("
    )
    assert f"({RTD}/latest/_sources/release-notes/2.34.0.rst), allowed: 2.29.0, " in str(caught.value)


def test_the_notes_quote_their_sources_as_written() -> None:
    # v2.29.0's manual: "not yet available" (the form without "yet" is v2.29.1's onward).
    assert (
        "'PyTorch 2.9 is not yet available on Amazon Linux 2023'"
        in RELEASES["2.29.0"]["frameworks"]["torch-neuronx"]["note"]
    )
    # 2.33.1 also updates the OCI hook and rebuilds framework packages (its release notes).
    note = RELEASES["2.33.1"]["note"]
    assert "aws-neuronx-oci-hook" in note and "rebuilds libtorch_neuronx_lite, libneuronxla and jax_neuronx" in note
    assert f"{RTD}/latest/_sources/release-notes/2.33.1.rst" in note
    # The 2.33 OS list is the manual-install page's, not a DLAMI page's.
    for version in ("2.33.0", "2.33.1"):
        assert RELEASES[version]["os_source"] == f"{RTD}/v2.33.0/_sources/setup/pytorch/update-manual.rst"


def test_a_beta_only_path_is_noted_with_its_source_and_kilns_own_choice() -> None:
    note = neuron_beta_note("2.33.1", "trn2.48xlarge")
    assert note == (
        "Neuron 2.33.1 offers training on trn2.48xlarge (trn2) only as torchneuron beta "
        "(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html); "
        "unpinned, kiln chooses 2.29.1"
    )
    assert neuron_beta_note("2.33.0", "trn2.3xlarge").startswith("Neuron 2.33.0 offers training on trn2.3xlarge")
    assert neuron_beta_note("2.29.1", "trn2.48xlarge") is None
    # A release that cannot do the work at all is a problem, not a note.
    assert neuron_beta_note("2.32.0", "trn1.32xlarge") is None


def test_the_summary_says_what_each_release_trains_and_serves() -> None:
    assert release_summary("2.29.1") == (
        "2.29.1 (2026-05-01): trains trn1, trn2, trn3; serves trn1, trn2, trn3, inf2; os ubuntu2204, ubuntu2404, "
        f"al2023; training image {IMAGE_2_29_1}"
    )
    assert release_summary("2.33.1").startswith(
        "2.33.1 (2026-11-11): trains trn2 (torchneuron beta), trn3 (torchneuron beta); serves trn2 (torchneuron "
        "beta), trn3 (torchneuron beta); os ubuntu2404, al2023"
    )
    assert release_summary("2.31.1").startswith("2.31.1 (2026-08-12): trains none; serves trn1, trn2, trn3, inf2; ")


def test_kiln_catalog_neuron_lists_the_releases_and_the_default_per_type(capsys) -> None:
    from kiln.cli.main import main

    assert main(["catalog", "neuron", "trn1n.32xlarge", "p5.48xlarge"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[: len(known_neuron_releases())] == [release_summary(v) for v in known_neuron_releases()]
    assert lines[len(known_neuron_releases()) :] == [
        "default for trn1n.32xlarge: 2.29.1",
        "default for p5.48xlarge: none (no Neuron devices)",
    ]
    assert main(["catalog", "neuron", "trn9.xlarge"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("kiln catalog neuron: unknown instance type 'trn9.xlarge'")


def test_a_release_runs_on_its_own_driver_or_a_newer_one_and_not_on_an_older_one() -> None:
    from kiln.catalog.neuron import neuron_driver, neuron_driver_problem

    own = neuron_driver("2.31.1")
    assert own == "2.29.0.0"
    assert neuron_driver_problem("2.31.1", own, "image") is None
    assert neuron_driver_problem("2.29.1", own, "image") is None
    line = neuron_driver_problem("2.33.1", own, "image")
    assert line is not None
    assert line.startswith("Neuron 2.33.1's runtime needs the Neuron driver 2.31.8.0 or newer (https://")
    assert line.endswith(
        "the image ships driver 2.29.0.0; releases that run on it: 2.29.0, 2.29.1, 2.30.0, 2.31.0, 2.31.1"
    )
    # Versions compare as numbers, not text: 2.9 is older than 2.29.
    assert neuron_driver_problem("2.29.1", "2.9.0.0", "image") is not None
