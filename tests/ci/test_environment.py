"""Environment names from cluster names and run ids, and TTL durations."""

from __future__ import annotations

import pytest

from kiln.catalog.names import CLUSTER_NAME
from kiln.ci.environment import (
    MAX_ENVIRONMENT_NAME,
    CiInputError,
    environment_name,
    parse_hours,
    resolve_run_id,
    run_id_from,
)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"GITHUB_RUN_ID": "11223344556"}, "11223344556"),
        ({"CI_PIPELINE_ID": "9876"}, "9876"),
        ({"BUILDKITE_BUILD_ID": "0190-abcd"}, "0190-abcd"),
        ({"GITHUB_RUN_ID": "1", "CI_PIPELINE_ID": "2"}, "1"),
        ({"GITHUB_RUN_ID": "  "}, None),
        ({}, None),
    ],
)
def test_the_run_id_comes_from_the_ci_system(environ: dict[str, str], expected: str | None) -> None:
    assert run_id_from(environ) == expected


def test_a_given_run_id_wins_and_none_at_all_is_one_line() -> None:
    assert resolve_run_id("mine", {"GITHUB_RUN_ID": "1"}) == "mine"
    with pytest.raises(CiInputError, match=r"no run id: pass --run-id ID .*GITHUB_RUN_ID, CI_PIPELINE_ID"):
        resolve_run_id(None, {})


@pytest.mark.parametrize(
    ("cluster", "run_id", "expected"),
    [
        ("ci-smoke", "11223344556", "ci-smoke-11223344556"),
        ("ci-smoke", "PR_42/2", "ci-smoke-pr-42-2"),
        ("a-very-long-cluster-name-x", "12345", "a-very-long-cluster-name-12345"),
        ("ci", "-dashes-", "ci-dashes"),
    ],
)
def test_environment_names_are_unique_per_run_and_valid_cluster_names(cluster: str, run_id: str, expected: str) -> None:
    name = environment_name(cluster, run_id)
    assert name == expected
    assert CLUSTER_NAME.fullmatch(name) and len(name) <= MAX_ENVIRONMENT_NAME and name[-1].isalnum()


def test_a_long_run_id_becomes_a_stable_digest() -> None:
    run = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"  # a Buildkite build UUID
    first, second = environment_name("ci-smoke", run), environment_name("ci-smoke", run)
    assert first == second and first.startswith("ci-smoke-") and len(first.removeprefix("ci-smoke-")) == 8
    assert environment_name("ci-smoke", run + "x") != first


def test_a_run_id_without_letters_or_digits_is_refused() -> None:
    with pytest.raises(CiInputError, match="has no letter or digit"):
        environment_name("ci", "---")


@pytest.mark.parametrize(("text", "hours"), [("90m", 1.5), ("2h", 2.0), ("1.5h", 1.5), ("1d", 24.0), (" 3H ", 3.0)])
def test_durations(text: str, hours: float) -> None:
    assert parse_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize("text", ["2", "h", "-1h", "0h", "2 hours", "1w"])
def test_bad_durations_say_what_to_give(text: str) -> None:
    with pytest.raises(CiInputError, match=r"give a positive number and a unit, e.g. 90m, 2h or 1d"):
        parse_hours(text)
