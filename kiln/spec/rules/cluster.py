"""The cluster's name and place (the spec's name, region and availability_zone)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from kiln.catalog.names import known_regions
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import problem_at


def placement(spec: ClusterSpec) -> Iterator[Problem]:
    """The region is one AWS has, the AZ lies in it, and an AZ needs a region."""
    az, region = spec.availability_zone, spec.region
    if region is not None and region not in known_regions():
        close = difflib.get_close_matches(region, sorted(known_regions()), n=2, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (see kiln/catalog/data/regions.json)"
        yield problem_at(("region",), f"is not an AWS region (got {shown(region)}){hint}")
    if az and not region:
        yield problem_at(("availability_zone",), f"needs region to be set too (got {az!r} with no region)", ("region",))
    elif az and region and az[:-1] != region:
        yield problem_at(
            ("availability_zone",),
            f"must lie in region {region} (got {az!r}; allowed: {region}a, {region}b, ...)",
            ("region",),
        )


def cluster_name(spec: ClusterSpec) -> Iterator[Problem]:
    """The cluster name ends in a letter or digit, as HyperPod's cluster names must (its pattern says the rest)."""
    if spec.name.endswith("-"):
        yield problem_at(("name",), f"must end in a letter or digit, not '-' (got {spec.name!r})")
