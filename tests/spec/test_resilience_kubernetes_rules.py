"""resilience on EKS and HyperPod with EKS (kiln.spec.rules.resilience, resilience_kubernetes): the settings those
platforms cannot act on are one line each, naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kiln.spec.models import ClusterSpec
from kiln.spec.rules.resilience import resilience_kubernetes
from tests.support.specs import MINIMAL_SPEC

PLATFORMS = {
    "eks": {"backend": "eks"},
    "hyperpod-eks": {"backend": "hyperpod", "orchestrator": "eks"},
    "pcs": {"backend": "pcs"},
}


def _lines(platform: str, **resilience: Any) -> list[str]:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["compute"].update(PLATFORMS[platform])
    data["network"] = {"second_availability_zone": "us-east-1b"}
    data["resilience"] = resilience
    spec = ClusterSpec.model_validate(data)
    return [problem.render("x.yaml") for problem in resilience_kubernetes(spec)]


@pytest.mark.parametrize("platform", ["eks", "hyperpod-eks"])
def test_the_defaults_and_the_platforms_own_settings_pass(platform: str) -> None:
    assert _lines(platform) == []
    assert _lines(platform, node_recovery="none", health_checks=True, deep_health_checks=False) == []


def test_eks_takes_the_job_fields_and_health_checks_off() -> None:
    assert _lines("eks", auto_resume=False, hang_factor=20, hang_min_s=60, allow_tcp=True, health_checks=False) == []


@pytest.mark.parametrize("platform", ["eks", "hyperpod-eks"])
def test_an_interval_is_refused_where_an_agent_watches_the_nodes(platform: str) -> None:
    label = "eks" if platform == "eks" else "hyperpod with EKS"
    assert _lines(platform, health_check_interval_s=120) == [
        f"x.yaml: resilience.health_check_interval_s: has no effect on {label}: the nodes' health agent (EKS's node "
        "monitoring agent, HyperPod's health monitoring agent) watches them all the time and takes no interval; "
        "remove it"
    ]


def test_hyperpod_with_eks_keeps_its_health_monitoring_agent() -> None:
    assert _lines("hyperpod-eks", health_checks=False) == [
        "x.yaml: resilience.health_checks: got false for hyperpod with EKS, allowed: true (HyperPod's health "
        "monitoring agent comes with the dependencies HyperPod requires on its EKS cluster and cannot be turned off)"
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("auto_resume", False), ("auto_resume", True), ("hang_factor", 20), ("allow_tcp", True)]
)
def test_hyperpod_with_eks_refuses_what_only_kilns_jobs_carry(field: str, value: Any) -> None:
    [line] = _lines("hyperpod-eks", **{field: value})
    assert line.startswith(f"x.yaml: resilience.{field}: has no effect on hyperpod with EKS: only jobs of `kiln job")


def test_slurm_platforms_are_not_this_rules() -> None:
    assert _lines("pcs", health_check_interval_s=120, auto_resume=False) == []
