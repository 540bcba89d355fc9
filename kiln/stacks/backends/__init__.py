"""One builder per platform of the backend table (kiln.contracts.backends): adding a backend is its record there and
its module here, named in BUILDERS. Each module translates the spec into its construct's props and builds it
(kiln.stacks.backends.base says what a builder returns); ComputeStack asks builder_for and reads the BackendBuild."""

from __future__ import annotations

from collections.abc import Mapping

from kiln.contracts.backends import EKS, HYPERPOD, HYPERPOD_EKS, PARALLELCLUSTER, PCS, Platform
from kiln.stacks.backends import eks, hyperpod, parallelcluster, pcs
from kiln.stacks.backends.base import BackendBuild, BackendBuilder

# Each platform record and the builder of its constructs; HyperPod's module builds under either orchestrator.
BUILDERS: Mapping[Platform, BackendBuilder] = {
    PCS: pcs.build,
    PARALLELCLUSTER: parallelcluster.build,
    HYPERPOD: hyperpod.build,
    HYPERPOD_EKS: hyperpod.build,
    EKS: eks.build,
}


def builder_for(platform: Platform) -> BackendBuilder:
    """Return the builder of PLATFORM's constructs."""
    return BUILDERS[platform]


__all__ = ["BUILDERS", "BackendBuild", "BackendBuilder", "builder_for"]
