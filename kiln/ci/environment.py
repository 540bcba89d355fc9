"""An environment's identity: its name from the cluster name and the pipeline's run id, and TTL durations."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from kiln.catalog.names import CLUSTER_NAME, CLUSTER_NAME_RULE
from kiln.contracts.environment import MAX_ENVIRONMENT_NAME, MAX_RUN_SLUG
from kiln.contracts.errors import InputError

__all__ = ["MAX_ENVIRONMENT_NAME", "MAX_RUN_SLUG", "CiInputError", "environment_name", "parse_hours", "resolve_run_id"]

# Where each CI system puts an id unique to one pipeline run, in the order kiln looks.
RUN_ID_VARIABLES = (
    ("GITHUB_RUN_ID", "GitHub Actions"),
    ("CI_PIPELINE_ID", "GitLab CI"),
    ("BUILDKITE_BUILD_ID", "Buildkite"),
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([mhd])")
_UNIT_HOURS = {"m": 1 / 60, "h": 1.0, "d": 24.0}


class CiInputError(InputError):
    """A run id or duration kiln cannot use; the message is one line saying what to give instead."""


def run_id_from(environ: Mapping[str, str]) -> str | None:
    """Return the pipeline's run id from ENVIRON (GitHub, GitLab, Buildkite), or None outside CI."""
    for variable, _ in RUN_ID_VARIABLES:
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def environment_name(cluster: str, run_id: str) -> str:
    """Return the environment name for CLUSTER's run RUN_ID: unique per run, valid wherever a cluster name is."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-")
    if not slug:
        raise CiInputError(f"run id {run_id!r} has no letter or digit; give --run-id with some")
    if len(slug) > MAX_RUN_SLUG:
        slug = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    head = cluster[: MAX_ENVIRONMENT_NAME - len(slug) - 1].rstrip("-")
    name = f"{head}-{slug}"
    if not CLUSTER_NAME.fullmatch(name):
        raise CiInputError(f"environment name {name!r} is not {CLUSTER_NAME_RULE}")
    return name


def resolve_run_id(given: str | None, environ: Mapping[str, str]) -> str:
    """Return GIVEN, else the CI system's run id; one line naming the variables kiln reads when neither exists."""
    if given:
        return given
    found = run_id_from(environ)
    if found is None:
        names = ", ".join(variable for variable, _ in RUN_ID_VARIABLES)
        raise CiInputError(f"no run id: pass --run-id ID (outside CI) or run where one of {names} is set")
    return found


def parse_hours(text: str) -> float:
    """Return the hours in a duration such as 90m, 2h, 1.5h or 3d."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or float(match.group(1)) <= 0:
        raise CiInputError(f"duration {text!r}: give a positive number and a unit, e.g. 90m, 2h or 1d")
    return float(match.group(1)) * _UNIT_HOURS[match.group(2)]
