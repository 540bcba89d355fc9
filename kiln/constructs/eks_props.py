"""EksTrainingClusterProps and LustreVolume: what an EksTrainingCluster (kiln.constructs.eks) is built from, checked
when made."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from kiln.catalog.facts import ACCELERATOR_KINDS
from kiln.constructs._checks import require, require_in, unresolved
from kiln.constructs.eks_addons import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES, AcceleratorKind
from kiln.constructs.eks_code_server import CodeServerPod
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup, SystemNodeGroup
from kiln.constructs.eks_scheduling import CLUSTER_AUTOSCALER_FACTS
from kiln.constructs.lustre import ILustreFileSystem
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP

Endpoint = Literal["private", "public-and-private"]
ENDPOINTS: tuple[str, ...] = get_args(Endpoint)
CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")


@dataclass(frozen=True, kw_only=True)
class LustreVolume:
    """The kiln FSx for Lustre file system, offered to pods as a statically bound PersistentVolumeClaim.

    file_system: the file system (LustreFileSystem, or LustreFileSystem.from_lustre_attributes).
    client_security_group: the group the file system admits; every node joins it.
    storage_gib: the capacity the PV and PVC declare; default 1200.
    namespace: the claim's namespace; default "default" (others are created).
    claim_name: the PVC's name; default fsx-claim.
    volume_name: the PV's name; default kiln-fsx.
    storage_class: the storage class of both; default kiln-fsx-lustre.
    """

    file_system: ILustreFileSystem
    client_security_group: ec2.ISecurityGroup
    storage_gib: int = 1200
    namespace: str = "default"
    claim_name: str = "fsx-claim"
    volume_name: str = "kiln-fsx"
    storage_class: str = "kiln-fsx-lustre"

    def __post_init__(self) -> None:
        require(self, self.storage_gib >= 1, "storage_gib", self.storage_gib, "1 or more")
        dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
        for name in ("namespace", "claim_name", "volume_name", "storage_class"):
            value = getattr(self, name)
            require(self, bool(dns_label.match(value)), name, value, "a DNS label: lowercase a-z, 0-9, '-'")
        require(
            self,
            isinstance(self.file_system, ILustreFileSystem),
            "file_system",
            type(self.file_system).__name__,
            "a LustreFileSystem or LustreFileSystem.from_lustre_attributes(...)",
        )


@dataclass(frozen=True, kw_only=True)
class EksTrainingClusterProps:
    """Props for EksTrainingCluster.

    vpc: the cluster's VPC.
    node_subnet: the single private subnet (one AZ, with the placement group and FSx) of every node group.
    control_plane_subnets: subnets for the control plane ENIs, at least two AZs; default the VPC's private subnets.
    efa_security_group: joins every accelerated node's interfaces; required when accelerated_groups is not empty,
        default none (no accelerated groups to join it).
    accelerated_groups: EFA node groups of GPU or Neuron instances; default none (HyperPod brings its own nodes).
    external_accelerators: the accelerators of nodes that join from elsewhere (HyperPod's instance groups): their
        device plugins are installed as for the groups'; default none: only the
        groups' accelerators get device plugins.
    system_nodes: the CPU node group for cluster services; default 2 x m5.xlarge, None for none.
    kubernetes_version: EKS version, one of KUBERNETES_RELEASES (a kubectl layer each); default the newest.
    cluster_name: the EKS name; default: CloudFormation generates one.
    endpoint: "private" (default; nodes and the kubectl handler reach it inside the VPC) or "public-and-private".
    public_access_cidrs: who may reach a public endpoint; required (and never 0.0.0.0/0) for public-and-private,
        default none (a private endpoint takes none).
    admin_role: an IAM role given cluster-admin through an access entry; default none: only the kubectl handler's
        entry (and the node groups' role, which EKS adds).
    lustre: the kiln file system as PV/PVC; default none (the FSx CSI driver is installed all the same).
    code_server: code-server (VS Code in a browser) as one pod on the system nodes, with the lustre volume mounted
        and its home on it, reached with `kubectl port-forward` only (kiln.constructs.eks_code_server); default none:
        no code-server pod.
        Needs lustre and system_nodes.
    bootstrap: the bundle accelerated nodes run at boot (BootstrapAssets.node_bootstrap for kiln's `eks` bundle),
        checked against its digest, which the user data carries; default none (the EKS image's own boot only).
    cluster_env: the bundle's deploy-time values; default none: the nodes' cluster environment file
        sets none of them.
    security_groups: further groups for every node's primary interface; default none: the cluster's and EFA
        groups alone.
    secrets_key: the KMS key for envelope encryption of Kubernetes secrets; default: a new key of the cluster's
        own (rotated yearly, scheduled for deletion with the stack, as the cluster's secrets are).
    hyperpod_dependencies: install what SageMaker HyperPod requires on the cluster before a HyperPod cluster is
        created on it (HYPERPOD_DEPENDENCIES); `hyperpod_dependencies_ready` is then what that cluster waits for.
        Needs system_nodes, where the install runs. Default False.
    cluster_autoscaler: scale the accelerated groups between their min and max for pending pods, and back down when
        idle (kiln.constructs.eks_scheduling); default True.
    node_provision_seconds: how long a new node may take to become ready before the autoscaler gives up on it (the
        boot budget's estimate for kiln's bundle, with headroom); default the autoscaler's 900.
    gang_scheduling: Kueue with one queue over the accelerated groups: a job labelled for it starts only when all of
        its pods fit, and is requeued when they do not all run in time; default True (with accelerated groups).
    node_tags: the tags of every node's instance, volumes and network interfaces, system and accelerated groups alike
        (the spec's and kiln:cluster; a short-lived environment's too, which `kiln ci run`'s Session Manager grant
        names); default none: only the tags EKS adds. System nodes also carry kiln's node-group and cluster tags.
    neuron_release: the cluster's Neuron SDK release (kiln.catalog.neuron.resolve_neuron_release), whose chart
        release's device plugin and scheduler extension images Neuron nodes get (kiln.catalog.neuron_components);
        default none: the newest images kiln maps.
    node_monitoring_agent: EKS's node monitoring agent add-on, which sets the health conditions of every node
        kiln's groups launch (accelerated hardware, networking, kernel, storage, container runtime) that node repair
        acts on; HyperPod's nodes it leaves to HyperPod's own agent (platforms.json, eks.node_monitoring_agent).
        Default True.
    node_repair: EKS replaces (or reboots) a node of any of kiln's node groups, system and accelerated, whose
        health conditions fail, and the group keeps its size (platforms.json, eks.node_repair); default True.
    """

    vpc: ec2.IVpc
    node_subnet: ec2.ISubnet
    control_plane_subnets: Sequence[ec2.ISubnet] = ()
    efa_security_group: ec2.ISecurityGroup | None = None
    accelerated_groups: Sequence[AcceleratedNodeGroup] = ()
    external_accelerators: Sequence[AcceleratorKind] = ()
    system_nodes: SystemNodeGroup | None = field(default_factory=SystemNodeGroup)
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    cluster_name: str | None = None
    endpoint: Endpoint = "private"
    public_access_cidrs: Sequence[str] = ()
    admin_role: iam.IRole | None = None
    lustre: LustreVolume | None = None
    code_server: CodeServerPod | None = None
    bootstrap: NodeBootstrap | None = None
    cluster_env: Mapping[str, str] = field(default_factory=dict)
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    secrets_key: kms.IKey | None = None
    hyperpod_dependencies: bool = False
    cluster_autoscaler: bool = True
    node_provision_seconds: int = CLUSTER_AUTOSCALER_FACTS["default_provision_seconds"]
    gang_scheduling: bool = True
    node_tags: Mapping[str, str] = field(default_factory=dict)
    neuron_release: str | None = None
    node_monitoring_agent: bool = True
    node_repair: bool = True

    def __post_init__(self) -> None:
        require_in(self, "kubernetes_version", self.kubernetes_version, KUBERNETES_RELEASES)
        if self.hyperpod_dependencies:
            require(
                self,
                self.system_nodes is not None,
                "system_nodes",
                None,
                "a system node group with hyperpod_dependencies (HyperPod's dependencies install there, before "
                "any HyperPod node exists)",
            )
        require_in(self, "endpoint", self.endpoint, ENDPOINTS)
        require(
            self,
            60 <= self.node_provision_seconds <= 86_400,
            "node_provision_seconds",
            self.node_provision_seconds,
            "60 to 86400",
        )
        if self.accelerated_groups and self.cluster_autoscaler:
            require(
                self,
                self.cluster_name is not None and not unresolved(self.cluster_name),
                "cluster_name",
                self.cluster_name,
                "a name with cluster_autoscaler (its scaling grant is conditioned on a tag key that holds the name)",
            )
        if self.accelerated_groups and (self.cluster_autoscaler or self.gang_scheduling):
            require(
                self,
                self.system_nodes is not None,
                "system_nodes",
                None,
                "a system node group with cluster_autoscaler or gang_scheduling (they run there, before any "
                "accelerated node exists)",
            )
        names = [g.name for g in self.accelerated_groups]
        require(self, len(set(names)) == len(names), "accelerated_groups names", names, "unique names")
        require(
            self,
            EKS_SYSTEM_NODE_GROUP not in names,
            "accelerated_groups names",
            names,
            f"not {EKS_SYSTEM_NODE_GROUP!r} (the CPU group's)",
        )
        for kind in self.external_accelerators:
            require_in(self, "external_accelerators", kind, ACCELERATOR_KINDS)
        if self.accelerated_groups:
            require(
                self,
                self.efa_security_group is not None,
                "efa_security_group",
                None,
                "a security group when accelerated_groups",
            )
        if self.cluster_name is not None and not unresolved(self.cluster_name):
            require(
                self,
                bool(CLUSTER_NAME.match(self.cluster_name)),
                "cluster_name",
                self.cluster_name,
                "1-100 of A-Z, a-z, 0-9, '-', '_', starting alphanumeric",
            )
        self._check_public_access()
        if self.code_server is not None:
            require(
                self,
                self.lustre is not None and self.system_nodes is not None,
                "code_server",
                self.code_server.home,
                "lustre and system_nodes with code_server (its home is on the file system; it runs on the system "
                "nodes, never on an accelerated node)",
            )

    @property
    def accelerator_kinds(self) -> frozenset[str]:
        """Return the accelerators of the cluster's nodes: its groups' and the external ones."""
        return frozenset({*(g.accelerator_kind for g in self.accelerated_groups), *self.external_accelerators})

    def _check_public_access(self) -> None:
        cidrs = list(self.public_access_cidrs)
        if self.endpoint == "private":
            require(self, not cidrs, "public_access_cidrs", cidrs, "none with a private endpoint")
            return
        require(self, bool(cidrs), "public_access_cidrs", cidrs, "at least one CIDR for a public-and-private endpoint")
        for cidr in cidrs:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                network = None
            require(
                self,
                network is not None and network.prefixlen > 0,
                "public_access_cidrs",
                cidr,
                "CIDRs narrower than the whole internet (not 0.0.0.0/0)",
            )
