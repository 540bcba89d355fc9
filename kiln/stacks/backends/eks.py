"""EKS: spec -> EksTrainingClusterProps (accelerated node groups on the EKS backend, a bare cluster for HyperPod's
nodes), and the EksTrainingCluster the compute stack gets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from kiln.catalog import instance_type
from kiln.catalog.code_server import pod_home
from kiln.catalog.exporters import EXPORTERS
from kiln.catalog.neuron import resolve_neuron_release
from kiln.constructs import (
    AcceleratedNodeGroup,
    CodeServerPod,
    EksObservabilityProps,
    EksTrainingCluster,
    EksTrainingClusterProps,
    LustreVolume,
    NodeBootstrap,
    SystemNodeGroup,
)
from kiln.constructs.eks_observability import GPU_NODE_SELECTOR
from kiln.constructs.eks_scheduling import CLUSTER_AUTOSCALER_FACTS
from kiln.contracts.outputs import ComputeOutput
from kiln.node_config.budget import eks_node_provision_seconds
from kiln.stacks.backends.base import BackendBuild
from kiln.stacks.compute_context import MOUNT_POINT, ComputeContext

if TYPE_CHECKING:
    from kiln.stacks.compute import ComputeStack


def lustre_volume(context: ComputeContext) -> LustreVolume | None:
    """Return the kiln file system as a PV/PVC, when the spec has one."""
    storage = context.storage
    if storage.lustre is None or storage.lustre_clients is None:
        return None
    return LustreVolume(
        file_system=storage.lustre,
        client_security_group=storage.lustre_clients,
        storage_gib=context.spec.storage.lustre.storage_gib,
    )


def code_server_pod(context: ComputeContext) -> CodeServerPod | None:
    """Return code-server's pod when the spec asks for it: its home in the cluster's own directory on the file system,
    which is mounted where the jobs mount it (the rules refuse code_server on EKS without storage.lustre)."""
    spec = context.spec
    if spec.code_server is None:
        return None
    return CodeServerPod(home=pod_home(spec.name), mount_path=MOUNT_POINT)


def eks_props(
    context: ComputeContext,
    *,
    bootstrap: NodeBootstrap | None,
    admin_role: iam.IRole | None = None,
    node_provision_seconds: int | None = None,
) -> EksTrainingClusterProps:
    """Translate the spec into EKS props; BOOTSTRAP None: HyperPod brings the nodes, EKS runs no node groups.

    ADMIN_ROLE: given cluster-admin (a short-lived environment's CI role, so `kiln ci run` reaches the cluster).
    NODE_PROVISION_SECONDS: how long a new node may take to become ready (the boot budget's); default the
    autoscaler's own.
    """
    spec, network = context.spec, context.network
    own_nodes = bootstrap is not None
    groups = spec.compute.groups
    # HyperPod's nodes join the cluster as they are: the device plugins follow their instance types.
    joining = {instance_type(g.instance_type).accelerator_kind for g in groups} if not own_nodes else set()
    return EksTrainingClusterProps(
        vpc=network.training_vpc.vpc,
        node_subnet=network.training_vpc.compute_subnet,
        efa_security_group=network.efa.security_group,
        accelerated_groups=[AcceleratedNodeGroup(**context.node_group_fields(g)) for g in groups] if own_nodes else [],
        external_accelerators=sorted(kind for kind in joining if kind is not None),
        # A small CPU group for cluster services; with HyperPod also where HyperPod's dependencies install, before
        # its first node exists.
        system_nodes=SystemNodeGroup(),
        hyperpod_dependencies=not own_nodes,
        cluster_name=spec.name,
        kubernetes_version=spec.kubernetes_version,
        lustre=lustre_volume(context),
        code_server=code_server_pod(context),
        bootstrap=bootstrap,
        cluster_env=context.cluster_env(mounts_fsx=False) if own_nodes else {},
        admin_role=admin_role,
        # The autoscaler and Kueue come with kiln's own node groups; HyperPod sizes its instance groups itself.
        cluster_autoscaler=own_nodes,
        gang_scheduling=own_nodes,
        **({"node_provision_seconds": node_provision_seconds} if node_provision_seconds else {}),
        # On every node's instance, volumes and interfaces; a short-lived environment's tag among them, by which
        # `kiln ci run` may open sessions on its system nodes only.
        node_tags=context.node_tags,
        # The Neuron release the nodes' device plugin and scheduler extension images follow (None without Neuron).
        neuron_release=resolve_neuron_release(spec.software.neuron, [g.instance_type for g in groups]),
        # The spec's resilience: EKS's node monitoring agent sets the nodes' health conditions, and node repair
        # replaces a node of kiln's groups whose conditions fail (HyperPod's nodes: its own agent and NodeRecovery).
        node_monitoring_agent=spec.resilience.health_checks,
        node_repair=spec.resilience.node_recovery == "automatic",
    )


def eks_observability_props(context: ComputeContext, cluster: eks.ICluster) -> EksObservabilityProps | None:
    """Translate the spec's observability section for CLUSTER (EKS backend, or HyperPod orchestrated by EKS); None
    when nothing runs there.

    The node and DCGM exporters run as Helm charts; kiln's EFA exporter runs on the hosts (the bootstrap starts it)
    and is scraped when the metrics go to the Prometheus workspace.
    """
    spec, workspace = context.spec, context.storage.prometheus
    wanted = spec.observability
    facts = [instance_type(group.instance_type) for group in spec.compute.groups]
    gpus = any(f.gpu_count for f in facts)
    efa = wanted.efa_exporter and any(f.efa_supported for f in facts) and workspace is not None
    if not (wanted.node_exporter or (wanted.dcgm_exporter and gpus) or efa):
        return None
    return EksObservabilityProps(
        cluster=cluster,
        workspace=workspace,
        node_exporter=wanted.node_exporter,
        dcgm_exporter=wanted.dcgm_exporter,
        gpu_node_selector=GPU_NODE_SELECTOR if gpus else None,
        efa_exporter_port=EXPORTERS["efa"].port if efa else None,
        cluster_label=spec.name,
    )


def ci_admin(stack: ComputeStack) -> iam.IRole | None:
    """The CI role a short-lived environment gives cluster-admin (so `kiln ci run` reaches the cluster); else none."""
    if stack.ci is None or stack.ci.admin_role_arn is None:
        return None
    return iam.Role.from_role_arn(stack, "CiAdminRole", stack.ci.admin_role_arn, mutable=False)


def build(stack: ComputeStack, context: ComputeContext, nodes: NodeBootstrap) -> BackendBuild[EksTrainingCluster]:
    """Add the EKS cluster with kiln's node groups, which launch into kiln's placement groups."""
    props = eks_props(
        context,
        bootstrap=nodes,
        admin_role=ci_admin(stack),
        node_provision_seconds=eks_node_provision_seconds(
            context.spec, stack.config, CLUSTER_AUTOSCALER_FACTS["default_provision_seconds"]
        ),
    )
    cluster = EksTrainingCluster(stack, "Eks", props)
    return BackendBuild(
        construct=cluster,
        outputs={ComputeOutput.EKS_CLUSTER_NAME: cluster.cluster.cluster_name},
        node_groups=cluster.node_groups,
        eks=cluster,
    )
