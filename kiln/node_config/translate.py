"""spec -> BootstrapConfig: what the nodes of a spec's target run. No CDK: the local cluster uses it too."""

from __future__ import annotations

from kiln.bootstrap.checks import BootstrapInputError, check_choice
from kiln.bootstrap.config import (
    TARGETS,
    BootstrapConfig,
    NodeGroup,
    SoftwarePins,
)
from kiln.bootstrap.local_target import LocalCluster
from kiln.bootstrap.lock import locked_digests, read_lock
from kiln.bootstrap.profiles import PROFILES
from kiln.catalog.names import ec2_type_name
from kiln.catalog.platforms import KILN_INSTALLS, PIN_FIELDS, image_profile
from kiln.contracts.backends import EKS, PCS
from kiln.node_config.code_server import code_server_config
from kiln.node_config.exporters import local_exporters, local_prometheus, node_exporters, runs_prometheus_agent
from kiln.node_config.nodes import one_architecture
from kiln.node_config.user_steps import user_steps
from kiln.spec import ClusterSpec


def config_from_spec(
    spec: ClusterSpec, target: str | None = None, *, local: LocalCluster | None = None
) -> BootstrapConfig:
    """Translate a kiln.spec ClusterSpec into the BootstrapConfig of TARGET (default: its backend)."""
    compute = spec.compute
    # HyperPod nodes orchestrated by EKS are EKS workers: they run the eks target's steps.
    own_target = spec.platform.bootstrap_target.name
    target = target or own_target
    check_choice("target", target, TARGETS)
    profile = PROFILES[target]
    software = spec.software
    common = {
        "locked": spec_lock(spec),
        "user_steps": user_steps(spec, target),
        **code_server_config(spec, target),
        "nccl_env": spec.launcher.environment,
        "checkpoint_dir": spec.launcher.checkpoint_dir,
        **resilience_config(spec),
    }
    if profile.local_cluster:
        if local is None:
            raise BootstrapInputError(
                f"target {target!r}: needs local=LocalCluster(...) (the nodes are not in the spec)"
            )
        exporters = local_exporters(spec.observability)
        return BootstrapConfig(
            target=target,
            os="debian12",
            local=local,
            exporters=exporters,
            prometheus_agent=local_prometheus(spec.observability, exporters),
            **common,
        )
    if target != own_target:
        raise BootstrapInputError(
            f"target: got {target!r} for this {compute.backend!r} spec, allowed: {own_target}, local"
        )
    # Only ParallelCluster and HyperPod with Slurm boot a head node (PCS runs the controller itself), and login
    # nodes run wherever Slurm does: the bundle serves the nodes kiln boots, no others (kiln.spec.rules.service_nodes).
    service: tuple[str, ...] = ()
    if "controller" in spec.platform.roles:
        service = (compute.head_node.instance_type,)
    if "login" in spec.platform.roles and compute.login_nodes.count:
        service += (compute.login_nodes.instance_type,)
    groups = tuple(
        NodeGroup(name=group.name, instance_type=group.instance_type, max_count=max(group.max_count, 1))
        for group in compute.groups
    )
    types = tuple(dict.fromkeys(ec2_type_name(name) for name in (*service, *(g.instance_type for g in groups))))
    exporters = node_exporters(spec, target, types)
    os = spec.image_os
    image = spec.node_image
    pins = installed_pins(spec, image, os)
    return BootstrapConfig(
        target=target,
        # EKS nodes (and HyperPod's EKS nodes) boot an Amazon Linux 2023 image.
        os=os,
        architecture=one_architecture(types),
        service_instance_types=service,
        groups=groups,
        image=image,
        replace=tuple(software.replace),
        region=spec.region,
        software=SoftwarePins(
            **pins,
            slurm=spec.slurm_version,
            node_exporter=software.node_exporter,
            prometheus=software.prometheus,
            dcgm_exporter=software.dcgm_exporter,
        ),
        exporters=exporters,
        prometheus_agent=runs_prometheus_agent(spec, target, exporters),
        containers=software.containers,
        # Kubernetes nodes run containerd from the EKS image.
        container_runtime="containerd" if profile.target.uses_kubernetes else "docker",
        lustre=spec.storage.lustre is not None,
        lustre_efa=spec.storage.lustre is not None and spec.storage.lustre.efa,
        **common,
    )


def resilience_config(spec: ClusterSpec) -> dict[str, bool | int]:
    """Return the BootstrapConfig fields of SPEC's resilience: the node health check and its interval, sbatch's
    default requeue (auto_resume), the launcher's hang bounds and TCP opt-out, and whether a drained node is handed
    to the platform's replacement (node_recovery)."""
    resilience = spec.resilience
    return {
        "health_checks": resilience.health_checks,
        "health_check_interval_s": resilience.health_check_interval_s,
        "job_requeue": resilience.auto_resume,
        "hang_factor": resilience.hang_factor,
        "hang_min_s": resilience.hang_min_s,
        "allow_tcp": resilience.allow_tcp,
        "node_recovery": resilience.node_recovery == "automatic",
    }


# Components only PCS's nodes run (the spec rules refuse their pins elsewhere).
PCS_ONLY = ("pcs_agent", "pcs_slurm")


def installed_pins(spec: ClusterSpec, image: str, os: str) -> dict[str, str | None]:
    """Return the version kiln installs of each component on SPEC's nodes: none where the IMAGE owns it (adopted),
    else the spec's pin or kiln's own choice (kiln.catalog.platforms.KILN_INSTALLS; Neuron's per instance type,
    ClusterSpec.neuron_release)."""
    owned = image_profile(image).owned_on(os)
    pins: dict[str, str | None] = {}
    for component, field in PIN_FIELDS.items():
        pinned = getattr(spec.software, field)
        if (
            component in PCS_ONLY
            and spec.platform is not PCS
            or component in owned
            and component not in spec.software.replace
        ):
            pins[field] = None
        elif spec.platform is EKS and component == "nccl":
            # EKS pods bring their NCCL; the host has no use for one (the spec rules refuse a pin).
            pins[field] = None
        elif component == "neuron":
            # The pin, else the release that trains (serves) on the spec's Neuron types: kiln.catalog.neuron.
            pins[field] = spec.neuron_release
        else:
            pins[field] = pinned or KILN_INSTALLS.get(component)
    return pins


def spec_lock(spec: ClusterSpec) -> dict[str, str]:
    """Return URL -> sha256 from the spec's lock file; none when it names none or the file is not written yet."""
    path = spec.lock_path
    if path is None or not path.exists():
        return {}
    return locked_digests(read_lock(path))
