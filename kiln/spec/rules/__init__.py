"""Cross-field rules: what types alone cannot say about a cluster spec, one module per section of the spec.

Every string a node receives is matched whole against a pattern of kiln.catalog.names, and every number
is held to the limits of kiln.catalog.limits that the constructs also check: whatever passes here
synthesizes and renders. A section's module imports kiln.spec's models and problems, kiln.catalog, kiln.contracts
and the shared helpers (kiln.spec.rules.common), never another section's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules import (
    bootstrap,
    ci,
    cluster,
    code_server,
    compute,
    iam,
    image,
    kubernetes,
    launcher,
    network,
    observability,
    resilience,
    service_nodes,
    session_logs,
    software,
    storage,
    tags,
)

Rule = Callable[[ClusterSpec], Iterator[Problem]]
# The order users read the problems in: `kiln validate` reports them so, and tests pin it.
RULES: tuple[Rule, ...] = (
    cluster.cluster_name,
    cluster.placement,
    network.network,
    network.network_zones,
    storage.lustre,
    storage.bucket,
    compute.compute,
    service_nodes.service_nodes,
    compute.architecture,
    service_nodes.hyperpod_nodes,
    kubernetes.kubernetes,
    image.image,
    software.software,
    launcher.launcher,
    resilience.resilience,
    resilience.resilience_kubernetes,
    ci.ci,
    observability.observability,
    tags.tags,
    image.image_ownership,
    software.slurm,
    image.pcs_image,
    image.image_os,
    bootstrap.bootstrap_steps,
    code_server.code_server_pod,
    code_server.code_server_node,
    session_logs.session_logs,
    iam.parallelcluster_boundary,
)


def check(spec: ClusterSpec) -> list[Problem]:
    """Return every cross-field problem of SPEC."""
    return [problem for rule in RULES for problem in rule(spec)]
