"""The backend table: one record per platform kiln builds, with what kiln decides about it. Standard library only.

The spec names a backend (``compute.backend``: pcs, parallelcluster, hyperpod, eks) and, on HyperPod alone, an
orchestrator (``compute.orchestrator``: slurm, the default, or eks). The backend alone does not say which nodes kiln
boots, whether Slurm runs or whether Kubernetes does: HyperPod with Slurm has a controller and login nodes, HyperPod
with EKS has neither. So a record is keyed by the pair, a *platform*: pcs, parallelcluster, hyperpod (HyperPod with
Slurm), hyperpod-eks and eks, the same five the spec's field-effect tests hold every field against. Facts of the
backend as a whole (HyperPod's reserved group names, its node limit, who launches its nodes) sit on both of
HyperPod's records, with the same value. The bootstrap's targets are another cut, by the nodes kiln boots: HyperPod with
EKS boots EKS workers, as EKS does, and the local cluster is a target of its own. So what a platform's nodes are
(whether Slurm or Kubernetes runs, which node roles kiln boots, whether kiln mounts Lustre itself) is held once, by the
platform's ``bootstrap_target`` (a BootstrapTarget), and read from there by the platform and by the node bootstrap
(kiln.bootstrap.profiles.TargetProfile, whose local target declares its own record).

What the table holds is kiln's own: which node roles it boots, the groups it adds beside the spec's (and so the names
a spec group may not take), which AWS services preflight asks about, where it gives Lustre clients EFA, what a bake
starts from, and the words a refusal uses to say why a platform lacks a node role. AWS's numbers stay with their
sources in kiln.catalog (kiln.catalog.limits, data/platforms.json): ``node_limit`` says which of AWS's limits bounds a
platform's node counts, and kiln.spec.rules reads the number from the catalog. The spec's models repeat the backend and
orchestrator names as ``Literal`` types (pydantic and the JSON Schema need them spelled out); tests/contracts holds them
equal to this table. kiln.catalog, which the node wheel carries, does not import it: callers hand the catalog a
platform's name (its data is keyed by it) or its flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# The groups kiln adds beside the spec's own, in the namespace the spec's group names share there: HyperPod's
# instance groups for the Slurm controller and login nodes (the names its provisioning_parameters.json and the node
# bootstrap read), PCS's node group for login nodes, EKS's CPU node group for cluster services (`kiln ci run` and
# `kiln connect` find its nodes by the kiln:node-group tag holding this name).
HYPERPOD_CONTROLLER_GROUP = "controller"
HYPERPOD_LOGIN_GROUP = "login"
PCS_LOGIN_NODE_GROUP = "login"
EKS_SYSTEM_NODE_GROUP = "system"

# The node roles a platform may boot, in this order (a user step's bootstrap.steps[].roles name them).
ROLES = ("controller", "login", "compute")


@dataclass(frozen=True, kw_only=True)
class BootstrapTarget:
    """The nodes of one bootstrap target, whichever platform boots them: the facts its platforms and the node bootstrap
    (kiln.bootstrap.profiles.TargetProfile, which says how the target runs its steps) read, held here alone."""

    # The target's name (kiln.bootstrap.config.TARGETS; a bundle's KILN_TARGET).
    name: str
    # Slurm schedules the jobs (and Docker runs beside it, for enroot and pyxis).
    runs_slurm: bool
    # Kubernetes schedules the jobs: an EKS control plane, with the nodes as its workers.
    uses_kubernetes: bool
    # The node roles kiln boots (of ROLES): the roles a user step may name.
    roles: tuple[str, ...]
    # kiln mounts FSx for Lustre on the nodes itself (configure_fsx), so it can give LNet their EFA interfaces first.
    mounts_fsx: bool = False


PCS_TARGET = BootstrapTarget(
    name="pcs", runs_slurm=True, uses_kubernetes=False, roles=("login", "compute"), mounts_fsx=True
)
PARALLELCLUSTER_TARGET = BootstrapTarget(
    name="parallelcluster", runs_slurm=True, uses_kubernetes=False, roles=("controller", "login", "compute")
)
HYPERPOD_TARGET = BootstrapTarget(
    name="hyperpod", runs_slurm=True, uses_kubernetes=False, roles=("controller", "login", "compute"), mounts_fsx=True
)
# EKS's workers, and HyperPod's under EKS.
EKS_TARGET = BootstrapTarget(name="eks", runs_slurm=False, uses_kubernetes=True, roles=("compute",))


class NodeLimit(Enum):
    """Which of AWS's limits bounds a platform's node counts; its number is kiln.catalog.limits's. The value is how a
    refusal names it."""

    # AWS::SageMaker::Cluster's ClusterInstanceGroup.InstanceCount (HYPERPOD_MAX_INSTANCES_PER_GROUP): each group and
    # the login nodes alone.
    INSTANCE_GROUP = "instances per instance group"
    # The largest PCS controller size (PCS_MAX_NODES): each group, the login nodes, and all of them together.
    CLUSTER = "nodes of its largest cluster size"


@dataclass(frozen=True, kw_only=True)
class Platform:
    """One platform kiln builds: a backend, with its orchestrator where it takes one."""

    # The table's key: the backend, or hyperpod-eks for HyperPod orchestrated by EKS (kiln.catalog's data uses it too).
    name: str
    # compute.backend.
    backend: str
    # The orchestrator in force (ClusterSpec.effective_orchestrator): slurm or eks on HyperPod, None elsewhere.
    orchestrator: str | None
    # How a spec problem names the platform: "has no effect on <label>".
    label: str
    # How prose names the service: "the <title> login node group".
    title: str
    # The nodes it boots, and the bootstrap target whose steps they run: whether Slurm or Kubernetes runs, the node
    # roles, whether kiln mounts Lustre (the properties below read them).
    bootstrap_target: BootstrapTarget
    # Why kiln boots no head node (compute.head_node has no effect); None where it boots one (the controller role).
    why_no_head_node: str | None = None
    # Why kiln boots no login nodes (compute.login_nodes has no effect); None where it may boot them (the login role).
    why_no_login_nodes: str | None = None
    # Why a user step may name only `roles`; None where it may name every role.
    why_fewer_roles: str | None = None
    # The group kiln adds for the Slurm controller, for login nodes, for cluster services; None where it adds none.
    controller_group: str | None = None
    login_group: str | None = None
    system_group: str | None = None
    # Group names a spec group may never take (HyperPod keeps its Slurm groups' names under either orchestrator).
    reserved_groups: tuple[str, ...] = ()
    # The AWS limit on its node counts; None: only AWS's 32-bit counts (kiln.catalog.limits.INT32_MAX).
    node_limit: NodeLimit | None = None
    # What a baked image (compute.image.bake) starts from: the image with the backend's own agent or cookbook; None
    # where kiln bakes nothing (Kubernetes nodes boot EKS's accelerated AMI).
    bake_parent: str | None = None
    # The AWS services preflight checks the account offers for it, beyond EC2, S3 and CloudFormation.
    services: tuple[str, ...]
    # Its compute nodes start from kiln's EFA launch template: kiln lays out their network interfaces and makes their
    # placement groups (ParallelCluster and HyperPod launch theirs with interfaces and placement of their own).
    kiln_launch_template: bool = False

    @property
    def runs_slurm(self) -> bool:
        """Return whether Slurm schedules the jobs: its bootstrap target's fact."""
        return self.bootstrap_target.runs_slurm

    @property
    def uses_kubernetes(self) -> bool:
        """Return whether Kubernetes schedules the jobs: its bootstrap target's fact."""
        return self.bootstrap_target.uses_kubernetes

    @property
    def roles(self) -> tuple[str, ...]:
        """Return the node roles kiln boots (the roles a user step may name): its bootstrap target's."""
        return self.bootstrap_target.roles

    @property
    def lustre_efa(self) -> bool:
        """Return whether kiln gives Lustre clients EFA: where its bootstrap target's nodes mount FSx for Lustre
        through kiln (configure_fsx), which can give LNet their EFA interfaces first."""
        return self.bootstrap_target.mounts_fsx


PCS = Platform(
    name="pcs",
    backend="pcs",
    orchestrator=None,
    label="pcs",
    title="PCS",
    bootstrap_target=PCS_TARGET,
    why_no_head_node="PCS runs the Slurm controller itself, and kiln boots no head node there",
    why_fewer_roles="PCS runs the Slurm controller itself, on no node kiln boots",
    login_group=PCS_LOGIN_NODE_GROUP,
    node_limit=NodeLimit.CLUSTER,
    bake_parent="an AMI with the PCS agent and the cluster's Slurm (e.g. a PCS sample AMI), or with base: stock a "
    "stock Ubuntu or Amazon Linux 2023 AMI",
    services=("pcs",),
    kiln_launch_template=True,
)
PARALLELCLUSTER = Platform(
    name="parallelcluster",
    backend="parallelcluster",
    orchestrator=None,
    label="parallelcluster",
    title="ParallelCluster",
    bootstrap_target=PARALLELCLUSTER_TARGET,
    bake_parent="an official ParallelCluster AMI of the version kiln deploys (`pcluster list-official-images`)",
    services=("cloudformation", "lambda"),
)
# HyperPod's two orchestrators share the backend's groups' names, node limit and SageMaker.
_HYPERPOD_GROUPS = (HYPERPOD_CONTROLLER_GROUP, HYPERPOD_LOGIN_GROUP)
HYPERPOD = Platform(
    name="hyperpod",
    backend="hyperpod",
    orchestrator="slurm",
    label="hyperpod",
    title="HyperPod",
    bootstrap_target=HYPERPOD_TARGET,
    controller_group=HYPERPOD_CONTROLLER_GROUP,
    login_group=HYPERPOD_LOGIN_GROUP,
    reserved_groups=_HYPERPOD_GROUPS,
    node_limit=NodeLimit.INSTANCE_GROUP,
    bake_parent="a SageMaker HyperPod base AMI",
    services=("sagemaker",),
)
HYPERPOD_EKS = Platform(
    name="hyperpod-eks",
    backend="hyperpod",
    orchestrator="eks",
    label="hyperpod with EKS",
    title="HyperPod",
    bootstrap_target=EKS_TARGET,
    why_no_head_node="it runs no Slurm, and kiln gives it no controller group",
    why_no_login_nodes="kiln gives it no login group (kubectl reaches the cluster)",
    why_fewer_roles="HyperPod with EKS runs no Slurm, so kiln boots compute nodes only",
    reserved_groups=_HYPERPOD_GROUPS,
    node_limit=NodeLimit.INSTANCE_GROUP,
    services=("sagemaker", "eks"),
)
EKS = Platform(
    name="eks",
    backend="eks",
    orchestrator=None,
    label="eks",
    title="EKS",
    bootstrap_target=EKS_TARGET,
    why_no_head_node="EKS runs no Slurm, and kiln boots no head node there",
    why_no_login_nodes="kiln boots no login nodes there (kubectl reaches the cluster)",
    why_fewer_roles="EKS runs no Slurm, so kiln boots compute nodes only",
    system_group=EKS_SYSTEM_NODE_GROUP,
    services=("eks",),
    kiln_launch_template=True,
)

# A backend's first platform is the one it runs when the spec names no orchestrator (HyperPod: Slurm).
PLATFORMS: tuple[Platform, ...] = (PCS, PARALLELCLUSTER, HYPERPOD, HYPERPOD_EKS, EKS)
BACKENDS: tuple[str, ...] = tuple(dict.fromkeys(p.backend for p in PLATFORMS))
# The backends that take compute.orchestrator.
ORCHESTRATED_BACKENDS: tuple[str, ...] = tuple(dict.fromkeys(p.backend for p in PLATFORMS if p.orchestrator))


def platform_of(backend: str, orchestrator: str | None = None) -> Platform:
    """Return the platform BACKEND runs as under ORCHESTRATOR.

    ORCHESTRATOR chooses among a backend's platforms (HyperPod's: slurm or eks); None, or a value the backend does not
    take (the compute stack's Orchestrator output says none there), gives the backend's first platform. ValueError for
    a backend kiln does not know.
    """
    mine = [p for p in PLATFORMS if p.backend == backend]
    if not mine:
        raise ValueError(f"backend: got {backend!r}, allowed: {', '.join(BACKENDS)}")
    return next((p for p in mine if p.orchestrator == orchestrator), mine[0])
