"""iam: the permissions boundary, as ParallelCluster's policies template takes it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kiln.catalog.platforms import service_fact
from kiln.contracts.backends import PARALLELCLUSTER
from kiln.contracts.permissions_boundary import boundary_arn
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import BACKEND, problem_at

# The pattern ParallelCluster's policies template holds its PermissionsBoundaryPolicy to.
PCLUSTER_BOUNDARY_PATTERN: str = service_fact("parallelcluster", "provider_custom_role").value["boundary_pattern"]


def parallelcluster_boundary(spec: ClusterSpec) -> Iterator[Problem]:
    """On ParallelCluster a permissions boundary also goes to ParallelCluster's policies template, whose
    PermissionsBoundaryPolicy parameter takes only a policy at the root path named with letters, digits, _ and -
    (platforms.json, parallelcluster.provider_custom_role boundary_pattern)."""
    boundary = spec.iam.permissions_boundary
    if spec.compute.backend != PARALLELCLUSTER.backend or boundary is None:
        return
    # A name is a policy of the deploy's account: any partition and account show its shape.
    if not re.fullmatch(PCLUSTER_BOUNDARY_PATTERN, boundary_arn(boundary, partition="aws", account="123456789012")):
        yield problem_at(
            ("iam", "permissions_boundary"),
            f"got {boundary!r}: on parallelcluster the boundary also goes to ParallelCluster's policies template, "
            "which takes only a policy at the root path (arn:PARTITION:iam::ACCOUNT:policy/NAME) whose NAME has "
            "letters, digits, _ and - only",
            BACKEND,
        )
