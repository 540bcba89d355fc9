"""compute.head_node and compute.login_nodes: only where kiln boots them, of types the platform offers."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.contracts.backends import HYPERPOD
from kiln.spec.models import ClusterSpec, SpecModel
from kiln.spec.problems import Path, Problem
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def _set_paths(section: SpecModel, path: Path) -> list[Path]:
    """Return the path of each field the spec sets in SECTION, in the model's order; PATH itself when it sets
    SECTION as an empty mapping."""
    return [(*path, name) for name in type(section).model_fields if name in section.model_fields_set] or [path]


def service_nodes(spec: ClusterSpec) -> Iterator[Problem]:
    """A head node or login nodes only where kiln boots them: set elsewhere, they would create nothing."""
    comp, platform = spec.compute, spec.platform
    for section, why in (("head_node", platform.why_no_head_node), ("login_nodes", platform.why_no_login_nodes)):
        if why is None or section not in comp.model_fields_set:
            continue
        for path in _set_paths(getattr(comp, section), ("compute", section)):
            yield problem_at(
                path, f"has no effect on {platform.label}: {why}; remove compute.{section}", BACKEND, ORCHESTRATOR
            )


def hyperpod_nodes(spec: ClusterSpec) -> Iterator[Problem]:
    """HyperPod with Slurm must offer the controller and login types too."""
    if spec.platform is not HYPERPOD:
        return
    for role in ("head_node", "login_nodes"):
        name = getattr(spec.compute, role).instance_type
        try:
            offered = instance_type(name).hyperpod
        except UnknownInstanceType:
            continue
        if not offered:
            yield problem_at(
                ("compute", role, "instance_type"), f"SageMaker HyperPod does not offer ml.{name}", BACKEND
            )
