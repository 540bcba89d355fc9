"""ci: a short-lived environment's TTL and buckets."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.limits import ttl_problem
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import problem_at


def ci(spec: ClusterSpec) -> Iterator[Problem]:
    """A TTL outlasts a deploy and is at most 30 days, and a short-lived environment names its own buckets."""
    ttl = spec.ci.ttl_hours
    if ttl is not None and (why := ttl_problem(ttl)):
        yield problem_at(("ci", "ttl_hours"), why)
    if ttl is not None and spec.storage.bucket.name is not None:
        yield problem_at(
            ("storage", "bucket", "name"),
            f"got {spec.storage.bucket.name!r} with ci.ttl_hours: a short-lived environment names its own buckets "
            "(<name>-data-<account>) so its reaper can empty them; remove storage.bucket.name",
            ("ci", "ttl_hours"),
        )
