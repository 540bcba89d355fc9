"""resilience: each number within kiln's bounds, and each setting refused in one line where the platform cannot act
on it (kiln.spec.rules.resilience)."""

from __future__ import annotations

import copy

import pytest

from tests.support.specs import MINIMAL_SPEC, spec_problems

HYPERPOD_GROUP = {"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}


def _spec(backend: str = "pcs", groups: list[dict] | None = None, **resilience: object) -> dict:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["compute"]["backend"] = backend
    if backend == "hyperpod":
        spec["compute"]["groups"] = [dict(HYPERPOD_GROUP)]
    if groups is not None:
        spec["compute"]["groups"] = copy.deepcopy(groups)
    spec["resilience"] = dict(resilience)
    return spec


@pytest.mark.parametrize("backend", ["pcs", "parallelcluster", "hyperpod"])
def test_the_defaults_are_valid_on_every_slurm_backend(backend: str) -> None:
    assert spec_problems(_spec(backend)) == []


@pytest.mark.parametrize(
    ("field", "value", "bounds"),
    [
        ("health_check_interval_s", 59, "from 60 to 3600 seconds"),
        ("health_check_interval_s", 3601, "from 60 to 3600 seconds"),
        ("hang_factor", 1, "from 2 to 1000 median step times"),
        ("hang_factor", 1001, "from 2 to 1000 median step times"),
        ("hang_min_s", 9, "from 10 to 86400 seconds"),
        ("hang_min_s", 86401, "from 10 to 86400 seconds"),
    ],
)
def test_a_number_past_its_bounds_is_one_line(field: str, value: int, bounds: str) -> None:
    assert spec_problems(_spec(**{field: value})) == [f"x.yaml: resilience.{field}: must be {bounds} (got {value})"]


@pytest.mark.parametrize(
    ("field", "value"), [("health_check_interval_s", 60), ("hang_factor", 1000), ("hang_min_s", 10)]
)
def test_the_bounds_themselves_are_valid(field: str, value: int) -> None:
    assert spec_problems(_spec(**{field: value})) == []


def test_an_interval_without_the_check_is_one_line() -> None:
    [line] = spec_problems(_spec(health_checks=False, health_check_interval_s=600))
    assert line.startswith(
        "x.yaml: resilience.health_check_interval_s: has no effect with resilience.health_checks false"
    )
    assert spec_problems(_spec(health_checks=False)) == []


@pytest.mark.parametrize("backend", ["pcs", "parallelcluster"])
@pytest.mark.parametrize("value", [True, False])
def test_deep_health_checks_outside_hyperpod_is_one_line(backend: str, value: bool) -> None:
    [line] = spec_problems(_spec(backend, deep_health_checks=value))
    assert line == (
        f"x.yaml: resilience.deep_health_checks: has no effect on {backend}: deep health checks are HyperPod's "
        "(OnStartDeepHealthChecks); remove it"
    )


def test_deep_health_checks_on_hyperpod_is_valid() -> None:
    assert spec_problems(_spec("hyperpod", deep_health_checks=False)) == []


@pytest.mark.parametrize("backend", ["pcs", "parallelcluster"])
def test_node_recovery_none_where_nothing_turns_replacement_off_is_one_line(backend: str) -> None:
    [line] = spec_problems(_spec(backend, node_recovery="none"))
    assert line.startswith(f"x.yaml: resilience.node_recovery: got 'none' for {backend}, allowed: automatic (")
    assert spec_problems(_spec(backend, node_recovery="automatic")) == []


def test_node_recovery_none_on_hyperpod_is_valid() -> None:
    assert spec_problems(_spec("hyperpod", node_recovery="none")) == []


def test_allow_tcp_without_efa_is_one_line() -> None:
    groups = [{"name": "cpu", "instance_type": "m5.xlarge", "max_count": 2}]
    [line] = spec_problems(_spec(groups=groups, allow_tcp=True))
    assert line.startswith("x.yaml: resilience.allow_tcp: has no effect: no compute group's instance type has EFA")
    assert spec_problems(_spec(allow_tcp=True)) == []
