"""Platform facts: every entry of platforms.json carries an AWS source, and every fact the code reads is there."""

from __future__ import annotations

import ast
import re

import pytest

from kiln.bootstrap.config import TARGETS
from kiln.catalog import instance_type
from kiln.catalog.platforms import (
    CHECKS,
    COMPONENTS,
    DEFAULT_IMAGES,
    KILN_INSTALLS,
    PIN_FIELDS,
    SOURCE,
    UnknownPlatformFact,
    at_least,
    image_profile,
    known_image_profiles,
    lustre_efa_interfaces,
    newest_pcs_slurm,
    pcs_slurm_versions,
    platform_data,
    service_fact,
)
from tests.support.paths import ROOT

KILN = ROOT / "kiln"


def _facts(node: object, where: str = "") -> list[tuple[str, dict]]:
    """Return every fact object below NODE (a dict with a value, a version or a check) with its dotted place."""
    found = []
    if isinstance(node, dict):
        if "source" in node or "value" in node or "check" in node:
            found.append((where, node))
        else:
            for key, child in node.items():
                found.extend(_facts(child, f"{where}.{key}" if where else key))
    return found


def test_every_fact_names_the_aws_page_or_repository_it_comes_from() -> None:
    facts = _facts(
        {"images": {n: {"owns": i["owns"], "facts": i["facts"]} for n, i in platform_data()["images"].items()}}
    )
    facts += _facts({"services": platform_data()["services"]})
    assert len(facts) > 30
    for where, fact in facts:
        assert SOURCE.fullmatch(fact.get("source", "")), f"{where}: no AWS source URL ({fact.get('source')!r})"
        assert set(fact) <= {"value", "version", "check", "source", "note", "operating_systems"}, where


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/index.html", True),
        ("https://github.com/aws-neuron/aws-neuron-sdk/blob/master/setup/pytorch/manual.rst", True),
        ("https://github.com/aws/aws-parallelcluster/blob/develop/CHANGELOG.md", True),
        # Names that only start like AWS's own are someone else's.
        ("https://github.com/aws-neuron-fork/aws-neuron-sdk/blob/master/README.md", False),
        ("https://github.com/awsome/x/blob/main/README.md", False),
        ("https://awsdocs-neuron.readthedocs-hosted.com.example.net/en/latest/index.html", False),
        ("http://awsdocs-neuron.readthedocs-hosted.com/en/latest/index.html", False),
    ],
)
def test_a_source_is_one_of_aws_s_sites_or_repositories(url: str, accepted: bool) -> None:
    assert bool(SOURCE.fullmatch(url)) is accepted


def test_every_owned_component_is_checked_the_way_its_data_allows() -> None:
    for name in known_image_profiles():
        profile = image_profile(name)
        assert profile.targets and set(profile.targets) <= set(TARGETS), name
        for component, owned in profile.owns.items():
            assert component in COMPONENTS, f"{name}: {component}"
            assert owned.check in CHECKS, f"{name}: {component}"
            # A version check needs a version to check against.
            if owned.check != "present":
                assert owned.version and re.fullmatch(r"[0-9][0-9A-Za-z.+~-]*", owned.version), name
            assert owned.bundle_value in ("present", owned.version, f"branch:{owned.version}")


def test_default_images_exist_and_serve_their_target() -> None:
    for target, name in DEFAULT_IMAGES.items():
        assert target in image_profile(name).targets


def test_kiln_pins_only_components_it_can_install() -> None:
    assert set(KILN_INSTALLS) <= set(PIN_FIELDS) <= set(COMPONENTS)
    assert "lustre_client" not in PIN_FIELDS


def _fact_reads() -> set[tuple[str, str]]:
    """Return every (service, key) of service_fact("...", "...") and (image, key) of .fact("...") in kiln's code."""
    reads = set()
    for path in KILN.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            literals = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name == "service_fact" and len(literals) == 2:
                reads.add(("service", *literals))
            elif name == "fact" and len(literals) == 1:
                reads.add(("image", literals[0]))
    return reads


def test_every_fact_the_code_reads_is_in_the_data() -> None:
    reads = _fact_reads()
    assert ("service", "pcs", "plugstack_dir") in reads
    images = platform_data()["images"]
    for kind, *key in reads:
        if kind == "service":
            service_fact(*key)
        else:
            # An image fact is read of whichever image a node boots: at least one image must hold it.
            assert any(key[0] in image["facts"] for image in images.values()), key


def test_an_unknown_fact_is_one_clear_error() -> None:
    with pytest.raises(UnknownPlatformFact, match="service pcs: no fact 'nothing' in platforms.json"):
        service_fact("pcs", "nothing")
    with pytest.raises(UnknownPlatformFact, match="image profile: got 'blank', allowed: parallelcluster"):
        image_profile("blank")


def test_pcs_runs_its_newest_slurm_by_default() -> None:
    versions = pcs_slurm_versions()
    assert newest_pcs_slurm() == "25.11" and newest_pcs_slurm() in versions
    assert all(at_least(newest_pcs_slurm(), version) for version in versions)


@pytest.mark.parametrize(
    ("have", "want", "result"),
    [
        ("1.10.0", "1.9.1", True),
        ("1.9.1", "1.10.0", False),
        ("595.71.05", "595.71.05", True),
        ("580.9", "580.10", False),
    ],
)
def test_versions_compare_numerically(have: str, want: str, result: bool) -> None:
    assert at_least(have, want) is result


@pytest.mark.parametrize(
    ("name", "interfaces"),
    [
        ("p5.48xlarge", 8),
        ("p5en.48xlarge", 8),
        ("p4d.24xlarge", 2),
        ("g5.8xlarge", 1),
        ("trn2.48xlarge", 0),
        ("m5.2xlarge", 0),
    ],
)
def test_lustre_takes_the_efa_interfaces_fsx_documents(name: str, interfaces: int) -> None:
    facts = instance_type(name)
    assert lustre_efa_interfaces(facts.name, facts.network_cards, facts.efa_supported) == interfaces


def test_the_bootstrap_keeps_no_platform_path_of_its_own() -> None:
    """Where PCS, ParallelCluster and HyperPod keep Slurm and its SPANK configuration comes from platforms.json only."""
    spelled = []
    for folder in ("bootstrap", "constructs", "stacks"):
        for path in (KILN / folder).rglob("*"):
            if path.suffix not in (".py", ".sh", ".j2"):
                continue
            text = path.read_text()
            spelled += [
                f"{path.relative_to(ROOT)}: {p}" for p in ("/etc/aws/pcs", "/opt/aws/pcs", "/opt/slurm") if p in text
            ]
    assert spelled == []


def test_the_parallelcluster_image_facts_are_of_the_release_kiln_deploys() -> None:
    from kiln.constructs.parallelcluster import PARALLELCLUSTER_VERSION

    profile = image_profile("parallelcluster")
    assert profile.fact("release").value == PARALLELCLUSTER_VERSION
    assert PARALLELCLUSTER_VERSION in profile.title
