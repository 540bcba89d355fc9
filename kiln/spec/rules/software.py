"""software: the Neuron release, Slurm on PCS, and pins that change nothing on EKS."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

from kiln.catalog.neuron import known_neuron_releases, neuron_release, neuron_support_problem, uncatalogued_reason
from kiln.catalog.platforms import image_profile, newest_pcs_slurm, service_fact
from kiln.contracts.backends import PCS
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at

# What pods bring on EKS, so a host pin there would change nothing.
EKS_POD_SOFTWARE = {
    "nccl": "pods bring their own NCCL",
    "enroot": "pods run in containerd, not enroot",
    "pyxis": "there is no Slurm for pyxis to plug into",
}
# What EKS nodes take from elsewhere than a pin (kiln.constructs.eks_observability pins the charts' releases), and
# the lock file: the EFA installer comes with EKS's image there, the exporters as charts, so no download needs it.
EKS_UNUSED_SOFTWARE = {
    "node_exporter": "the node exporter runs as its Helm chart, at the release kiln pins for it",
    "dcgm_exporter": "DCGM's exporter runs as NVIDIA's Helm chart, at the release kiln pins for it",
    "prometheus": "an AWS managed collector scrapes the exporters; no Prometheus agent runs",
    "lock_file": "they download nothing a lock covers (the image brings the EFA installer, Helm charts the exporters)",
}


def software(spec: ClusterSpec) -> Iterator[Problem]:
    """The Neuron release is one kiln knows, that does every Neuron group's work on the nodes' OS; NCCL on EKS hosts
    has no use."""
    yield from neuron_release_support(spec)
    if spec.platform.uses_kubernetes:
        for field, why in EKS_POD_SOFTWARE.items():
            if getattr(spec.software, field) is not None:
                yield problem_at(("software", field), f"has no effect on EKS nodes: {why}", BACKEND, ORCHESTRATOR)
        for field, why in EKS_UNUSED_SOFTWARE.items():
            if field in spec.software.model_fields_set:
                yield problem_at(
                    ("software", field), f"has no effect on EKS nodes: {why}; remove it", BACKEND, ORCHESTRATOR
                )


def neuron_release_support(spec: ClusterSpec) -> Iterator[Problem]:
    """The Neuron release (software.neuron, else kiln's default for the groups' types) is one kiln knows, trains on
    every Trainium group's type and serves inference on every Inferentia one's (kiln.catalog.neuron), and installs on
    the nodes' OS where kiln installs it (the image does not bring its own)."""
    pinned = spec.software.neuron
    if pinned is not None and pinned not in known_neuron_releases():
        why = uncatalogued_reason(pinned)
        yield problem_at(
            ("software", "neuron"),
            f"is not a Neuron SDK release kiln knows the packages of (got {shown(pinned)}{f': {why}' if why else ''}; "
            f"allowed: {', '.join(known_neuron_releases())})",
        )
        return
    version = spec.neuron_release
    if version is None:
        return
    for index, group in enumerate(spec.compute.groups):
        type_path = ("compute", "groups", index, "instance_type")
        if problem := neuron_support_problem(version, group.instance_type):
            if pinned is not None:
                yield problem_at(("software", "neuron"), f"got {shown(pinned)}: {problem}", type_path)
            else:
                yield problem_at(type_path, f"no Neuron release kiln knows fits: {problem}")
    owned = image_profile(spec.node_image).owned_on(spec.image_os)
    release = neuron_release(version)
    if ("neuron" not in owned or "neuron" in spec.software.replace) and spec.image_os not in release.os:
        where = ("software", "neuron") if pinned is not None else ("compute", "image", "os")
        yield problem_at(
            where,
            f"Neuron {version} installs on {', '.join(release.os)} only ({release.os_source}), and these nodes run "
            f"{spec.image_os}: choose compute.image.os {release.os[0]} or another release",
            ("compute", "image", "os"),
        )


def today() -> datetime.date:
    """Return today's date (the rules' one clock: tests set it)."""
    return datetime.date.today()


def slurm(spec: ClusterSpec) -> Iterator[Problem]:
    """software.slurm only on PCS, at a version PCS still creates clusters with."""
    path = ("software", "slurm")
    pinned = spec.software.slurm
    if pinned is None:
        return
    if spec.platform is not PCS:
        yield problem_at(
            path, f"has no effect on {spec.compute.backend}: its image brings its own Slurm (unset it)", BACKEND
        )
        return
    fact = service_fact("pcs", "slurm_versions")
    versions = fact.value
    if pinned not in versions:
        yield problem_at(
            path, f"got {shown(pinned)}; allowed: {', '.join(versions)} (Slurm versions PCS runs, {fact.source})"
        )
    elif versions[pinned] is not None and datetime.date.fromisoformat(versions[pinned]) < today():
        yield Problem(
            path=path,
            message=f"got {shown(pinned)}, which PCS stopped supporting on {versions[pinned]}: no new cluster may run "
            f"it ({fact.source}); use {newest_pcs_slurm()}",
            new_cluster_only=True,
        )
