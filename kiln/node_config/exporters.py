"""spec -> the exporters and the Prometheus agent each target's nodes run (observability)."""

from __future__ import annotations

from kiln.bootstrap.profiles import PROFILES
from kiln.catalog import instance_type
from kiln.spec import ClusterSpec
from kiln.spec.models import Observability

# The local cluster has no GPUs and no EFA: of the exporters, it runs the node and Slurm ones.
LOCAL_EXPORTERS = ("node", "slurm")


def local_exporters(wanted: Observability | None) -> tuple[str, ...]:
    """Return the exporters the local cluster runs: both it can without a spec, else the ones the spec keeps on."""
    if wanted is None:
        return LOCAL_EXPORTERS
    return tuple(name for name in LOCAL_EXPORTERS if getattr(wanted, f"{name}_exporter") is not False)


def local_prometheus(wanted: Observability | None, exporters: tuple[str, ...]) -> bool:
    """Return whether the local cluster runs Prometheus over its exporters: when the spec asks for a workspace."""
    return bool(wanted is not None and wanted.prometheus and exporters)


def slurm_exporter_node(spec: ClusterSpec, target: str) -> bool:
    """Return whether TARGET has a node beside Slurm's controller for the Slurm exporter and the agent: not without
    Slurm (EKS), and where kiln boots no controller (PCS runs it itself) only with login nodes."""
    profile = PROFILES[target]
    login_nodes = bool(spec.compute.login_nodes.count)
    return profile.target.runs_slurm and (profile.slurm_exporter_role != "login" or login_nodes)


def runs_prometheus_agent(spec: ClusterSpec, target: str, exporters: tuple[str, ...]) -> bool:
    """Return whether TARGET's nodes run the Prometheus agent (Slurm backends; EKS has AMP's collector)."""
    wanted = spec.observability
    return bool(wanted is not None and wanted.prometheus and exporters and slurm_exporter_node(spec, target))


def node_exporters(spec: ClusterSpec, target: str, instance_types: tuple[str, ...]) -> tuple[str, ...]:
    """Return the exporters the bootstrap of TARGET installs for SPEC's nodes (where Kubernetes runs, Helm charts run
    the rest)."""
    wanted = spec.observability
    if wanted is None:
        return ()
    facts = [instance_type(name) for name in instance_types]
    kubernetes = PROFILES[target].target.uses_kubernetes
    exporters = []
    if wanted.node_exporter and not kubernetes:
        exporters.append("node")
    if wanted.slurm_exporter is not False and slurm_exporter_node(spec, target):
        exporters.append("slurm")
    if wanted.dcgm_exporter and not kubernetes and any(f.gpu_count for f in facts):
        exporters.append("dcgm")
    if wanted.efa_exporter and any(f.efa_supported for f in facts):
        exporters.append("efa")
    return tuple(exporters)
