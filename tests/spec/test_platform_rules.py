"""Spec rules that come from the platforms' documented reality (kiln.catalog.platforms): each problem is one line."""

from __future__ import annotations

import copy
import datetime

import pytest

from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from kiln.spec.rules import software as software_rules
from tests.support.eks_specs import HYPERPOD_EKS, spec_with
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as problems

AMI = "ami-0123456789abcdef0"


def test_a_pin_on_what_the_image_owns_is_one_line_with_the_source() -> None:
    spec = spec_with(backend="parallelcluster", software={"nvidia_driver": "570.172.08"})
    assert problems(spec) == [
        "x.yaml: software.nvidia_driver: got '570.172.08', but the official AWS ParallelCluster 3.16.1 AMI ships "
        "nvidia_driver 595.71.05 and kiln adopts it (https://github.com/aws/aws-parallelcluster-cookbook/pull/3249); "
        "leave it unset, or replace it in a bake (software.replace: [nvidia_driver] with compute.image.bake)"
    ]


def test_a_pin_equal_to_what_the_image_ships_is_adopted() -> None:
    spec = parse_spec(spec_with(backend="parallelcluster", software={"efa_installer": "1.49.0"}))
    config = config_from_spec(spec)
    assert config.software.efa_installer is None and config.adopts("efa_installer")


def test_replacing_needs_a_bake_and_then_pins_what_kiln_installs() -> None:
    software = {"nvidia_driver": "570.172.08", "replace": ["nvidia_driver"]}
    [line] = problems(spec_with(backend="parallelcluster", software=software))
    assert line.startswith("x.yaml: software.replace[0]: replaces the image's nvidia_driver only in a bake")
    spec = parse_spec(spec_with(backend="parallelcluster", software=software, image={"ami_id": AMI, "bake": True}))
    config = config_from_spec(spec)
    assert config.replace == ("nvidia_driver",) and config.software.nvidia_driver == "570.172.08"
    assert not config.adopts("nvidia_driver") and config.adopts("efa_installer")


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            spec_with(backend="parallelcluster", software={"slurm": "25.11"}),
            "software.slurm",
            "has no effect on parallelcluster",
        ),
        (spec_with(software={"slurm": "23.11"}), "software.slurm", "allowed: 25.11, 25.05, 24.11"),
        (spec_with(backend="eks", software={"enroot": "3.5.0"}), "software.enroot", "pods run in containerd"),
        (
            spec_with(backend="eks", software={"nccl": "2.27.3-1+cuda12.9"}),
            "software.nccl",
            "pods bring their own NCCL",
        ),
        (spec_with(backend="parallelcluster", image={"base": "own"}), "compute.image.base", "is for pcs only"),
        (spec_with(image={"base": "own"}), "compute.image.ami_id", "is required with base: own"),
        (spec_with(image={"os": "ubuntu2204"}), "compute.image.os", "runs al2023 only"),
        (
            spec_with(
                backend="hyperpod",
                image={"os": "al2023"},
                groups=[{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}],
            ),
            "compute.image.os",
            "for Slurm runs ubuntu2204 only",
        ),
        (
            spec_with(backend="parallelcluster", image={"os": "ubuntu2404"}),
            "compute.image.os",
            "has no Lustre client",
        ),
        (
            spec_with(
                backend="parallelcluster",
                storage={"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400, "efa": True}},
            ),
            "storage.lustre.efa",
            "is not offered on parallelcluster",
        ),
    ],
    ids=[
        "slurm-elsewhere",
        "slurm-unknown",
        "eks-enroot",
        "eks-nccl",
        "base-elsewhere",
        "own-without-ami",
        "pcs-sample-os",
        "hyperpod-os",
        "pcluster-2404-lustre",
        "pcluster-lustre-efa",
    ],
)
def test_platform_rules_say_one_line_naming_the_field(spec: dict, field: str, words: str) -> None:
    lines = problems(spec)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"x.yaml: {field}: ") and words in lines[0], lines[0]


def test_a_slurm_version_past_pcs_support_is_refused_from_that_day(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_with(software={"slurm": "24.11"})
    monkeypatch.setattr(software_rules, "today", lambda: datetime.date(2026, 5, 31))
    assert problems(spec) == []
    monkeypatch.setattr(software_rules, "today", lambda: datetime.date(2026, 6, 1))
    [line] = problems(spec)
    assert "which PCS stopped supporting on 2026-05-31: no new cluster may run it" in line and "use 25.11" in line


def test_pcs_defaults_to_its_newest_slurm_on_the_sample_ami() -> None:
    spec = parse_spec(copy.deepcopy(MINIMAL_SPEC))
    assert (spec.slurm_version, spec.image_os, spec.node_image) == ("25.11", "al2023", "pcs-sample")


def test_own_pcs_ami_owns_nothing_and_kiln_installs_its_defaults() -> None:
    spec = parse_spec(spec_with(image={"base": "own", "ami_id": AMI, "os": "ubuntu2204"}))
    config = config_from_spec(spec)
    assert config.image == "pcs-custom"
    assert (config.software.nvidia_driver, config.software.efa_installer) == ("570.172.08", "1.41.0")


def test_lustre_efa_connections_stay_within_what_fsx_allows() -> None:
    lustre = {"deployment": "PERSISTENT_2", "storage_gib": 2400, "efa": True}
    group = {"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 129}
    [line] = problems(spec_with(groups=[group], storage={"lustre": lustre}))
    assert "would open 1032 EFA connections to the file system, more than the 1024 FSx allows" in line
    group["max_count"] = 128
    assert problems(spec_with(groups=[group], storage={"lustre": lustre})) == []


STOCK = {"base": "stock", "ami_id": AMI, "bake": True}


def test_a_stock_ami_is_made_pcs_ready_in_a_bake_from_pinned_installers() -> None:
    spec = parse_spec(spec_with(image=STOCK, software={"pcs_slurm": "25.11.2-1"}))
    config = config_from_spec(spec)
    assert (config.image, config.region) == ("pcs-stock", "us-east-1")
    assert (config.software.pcs_agent, config.software.pcs_slurm) == ("1.3.1-1", "25.11.2-1")
    # kiln owns everything on a stock image: its own driver and EFA installer too.
    assert (config.software.nvidia_driver, config.software.efa_installer) == ("570.172.08", "1.41.0")


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"image": {"base": "stock", "ami_id": AMI}, "software": {"pcs_slurm": "25.11.2-1"}},
            "compute.image.bake",
            "must be true with base: stock",
        ),
        ({"image": STOCK}, "software.pcs_slurm", "is required with base: stock"),
        (
            {"image": STOCK, "software": {"pcs_slurm": "25.05.5-1"}},
            "software.pcs_slurm",
            "no release of the cluster's Slurm 25.11",
        ),
        ({"software": {"pcs_agent": "1.3.1-1"}}, "software.pcs_agent", "ships pcs_agent and kiln adopts it"),
        (
            {"backend": "parallelcluster", "software": {"pcs_slurm": "25.11.2-1"}},
            "software.pcs_slurm",
            "has no effect on parallelcluster",
        ),
    ],
    ids=[
        "stock-without-bake",
        "stock-without-slurm-release",
        "stock-other-slurm",
        "agent-on-sample",
        "pcs-slurm-elsewhere",
    ],
)
def test_stock_pcs_rules_are_one_line_each(changes: dict, field: str, words: str) -> None:
    lines = problems(spec_with(**changes))
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"x.yaml: {field}: ") and words in lines[0], lines[0]


def test_a_stock_bake_needs_the_region_whose_installers_it_fetches() -> None:
    spec = spec_with(image=STOCK, software={"pcs_slurm": "25.11.2-1"})
    del spec["region"], spec["availability_zone"]
    [line] = problems(spec)
    assert line.startswith("x.yaml: region: is required with base: stock")


@pytest.mark.parametrize(
    ("compute", "version"),
    [({"backend": "eks"}, "1.36"), (HYPERPOD_EKS, "1.34")],
    ids=["eks", "hyperpod-eks"],
)
def test_each_eks_backend_runs_the_newest_kubernetes_its_platform_supports(compute: dict, version: str) -> None:
    from kiln.catalog.kubernetes import kubernetes_versions

    spec = parse_spec(spec_with(**compute), "x.yaml")
    assert spec.kubernetes_version == version == kubernetes_versions(compute["backend"])[-1]
    # HyperPod's AMIs serve EKS up to 1.35 but its prerequisites page lists up to 1.34 (platforms.json): kiln
    # offers only what both list.
    assert "1.35" not in kubernetes_versions("hyperpod")


@pytest.mark.parametrize(
    ("compute", "words"),
    [
        (
            {**HYPERPOD_EKS, "kubernetes_version": "1.35"},
            "got '1.35', allowed on HyperPod orchestrated by EKS: 1.34 (the versions the platform supports, "
            "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-ami-support-policy.html and "
            "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html",
        ),
        ({"backend": "eks", "kubernetes_version": "1.29"}, "got '1.29', allowed on EKS: 1.34, 1.35, 1.36"),
        ({"kubernetes_version": "1.35"}, "has no effect on pcs with Slurm (no Kubernetes): leave it unset"),
    ],
    ids=["hyperpod-too-new", "eks-too-old", "pcs"],
)
def test_an_unsupported_kubernetes_version_is_one_line(compute: dict, words: str) -> None:
    [line] = problems(spec_with(**compute))
    assert line.startswith("x.yaml: compute.kubernetes_version: ") and words in line, line


def test_a_chosen_kubernetes_version_reaches_the_cluster() -> None:
    spec = parse_spec(spec_with(backend="eks", kubernetes_version="1.35"), "x.yaml")
    assert spec.kubernetes_version == "1.35"


@pytest.mark.parametrize(
    ("boundary", "refused"),
    [
        ("team-boundary", False),
        ("arn:aws:iam::123456789012:policy/team_boundary", False),
        ("arn:aws:iam::123456789012:policy/org/team-boundary", True),
        ("team.boundary", True),
    ],
)
def test_a_boundary_parallelclusters_policies_template_refuses_stops_at_validate(boundary: str, refused: bool) -> None:
    """On ParallelCluster the boundary is also the policies template's PermissionsBoundaryPolicy, whose AllowedPattern
    takes no path and no + = , . @ in the name (platforms.json); other backends take any customer managed policy."""
    spec = spec_with(backend="parallelcluster") | {"iam": {"permissions_boundary": boundary}}
    found = problems(spec)
    if refused:
        [line] = found
        assert line.startswith(f"x.yaml: iam.permissions_boundary: got {boundary!r}: on parallelcluster the boundary ")
        assert "letters, digits, _ and - only" in line
    else:
        assert found == []
    assert problems(spec_with() | {"iam": {"permissions_boundary": boundary}}) == []
