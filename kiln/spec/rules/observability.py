"""observability: dashboards, the Prometheus agent and the Slurm exporter."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def observability(spec: ClusterSpec) -> Iterator[Problem]:
    """Dashboards need the Prometheus workspace; the Slurm exporter goes only where a kiln node runs beside Slurm's
    controller."""
    wanted = spec.observability
    if wanted is None:
        return
    if wanted.grafana and not wanted.prometheus:
        yield problem_at(
            ("observability", "grafana"),
            "got true without prometheus: the dashboards read the Prometheus workspace; set prometheus: true",
            ("observability", "prometheus"),
        )
    login_nodes = spec.compute.login_nodes.count
    slurm = spec.platform.runs_slurm
    if not slurm and "slurm_exporter" in wanted.model_fields_set:
        yield problem_at(
            ("observability", "slurm_exporter"),
            f"got {str(wanted.slurm_exporter).lower()}, but this cluster runs no Slurm (EKS): leave it out",
            BACKEND,
            ORCHESTRATOR,
        )
    for field, value, what in (
        ("slurm_exporter", wanted.slurm_exporter is True, "the exporter"),
        ("prometheus", wanted.prometheus and slurm, "the Prometheus agent"),
    ):
        if not value or not slurm:
            continue
        path = ("observability", field)
        if "controller" not in spec.platform.roles and not login_nodes:
            yield problem_at(
                path,
                f"got true, but PCS runs the Slurm controller itself and this cluster has no login node to run "
                f"{what} on: set compute.login_nodes.count, or leave {field} out",
                ("compute", "login_nodes", "count"),
            )
