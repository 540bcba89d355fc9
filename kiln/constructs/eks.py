"""EksTrainingCluster: EKS with EFA GPU and Neuron node groups in one AZ and the add-ons training needs."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from kiln.bootstrap.fetch import fetch_user_data
from kiln.catalog.facts import ACCELERATOR_KINDS
from kiln.catalog.kubernetes import JOB_NAMESPACE, NODE_GROUP_LABEL
from kiln.catalog.neuron_components import neuron_kubernetes_components
from kiln.constructs import acknowledgements
from kiln.constructs._checks import require, require_in, unresolved
from kiln.constructs.eks_addons import (
    DEFAULT_KUBERNETES_VERSION,
    HELM_ADDONS,
    HYPERPOD_DEPENDENCIES,
    KUBERNETES_RELEASES,
    TRAINING_OPERATOR,
    VPC_CNI_IDENTITY,
    AcceleratorKind,
    GitHelmAddon,
    HelmAddon,
    LustreVolumeNames,
    PodIdentity,
    lustre_volume_manifests,
    pod_security_patch,
)
from kiln.constructs.eks_code_server import CodeServerPod, code_server_manifests
from kiln.constructs.eks_disruption import training_budget_manifest
from kiln.constructs.eks_install import (
    INSTALL_WAIT_MINUTES,
    JOB_FINISHED_PATH,
    SUCCEEDED_WAIT_MINUTES,
    git_helm_job_manifests,
    install_grant,
    install_tools,
    kustomize_job_manifests,
    revoked_binding_patch,
)
from kiln.constructs.eks_node_groups import (
    AcceleratedNodeGroup,
    SystemNodeGroup,
    add_accelerated_node_group,
    add_system_node_group,
)
from kiln.constructs.eks_scheduling import (
    AUTOSCALER_NAMESPACE,
    AUTOSCALER_SERVICE_ACCOUNT,
    CLUSTER_AUTOSCALER_FACTS,
    IMAGE_PULL_SECONDS,
    QueuedGroup,
    autoscaler_owned_tag,
    cluster_autoscaler_addon,
    kueue_addon,
    queue_manifests,
)
from kiln.constructs.keys import secrets_key
from kiln.constructs.launch_template import EfaLaunchTemplate
from kiln.constructs.lustre import ILustreFileSystem
from kiln.constructs.neuron_addons import (
    NEURON_DEVICE_PLUGIN,
    NEURON_SCHEDULER,
    NEURON_SCHEDULER_NAME,
    neuron_device_plugin_manifests,
    neuron_instance_types,
    neuron_scheduler_manifests,
)
from kiln.constructs.node_access import ssm_agent_statements
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.review import acknowledge, acknowledge_wildcards
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP

Endpoint = Literal["private", "public-and-private"]
ENDPOINTS: tuple[str, ...] = get_args(Endpoint)
CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
# AWS-managed policies of the node role, what nodes themselves need (each acknowledged in
# acknowledgements.EKS_NODE_POLICIES). The VPC CNI's policy is on its own Pod Identity role instead; Session Manager (an
# operator's shell, `kiln ci run`'s port forward) takes SSM Agent's own actions (kiln.constructs.node_access), not
# AmazonSSMManagedInstanceCore.
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
)
# What CDK's kubectl handler gets from ECR only to pull oci:// Helm charts; kiln's charts come over HTTPS.
KUBECTL_ECR_POLICIES = ("AmazonEC2ContainerRegistryReadOnly", "AmazonElasticContainerRegistryPublicReadOnly")


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
        default none.
    accelerated_groups: EFA node groups of GPU or Neuron instances; default none (HyperPod brings its own nodes).
    external_accelerators: the accelerators of nodes that join from elsewhere (HyperPod's instance groups): their
        device plugins are installed as for the groups'; default none.
    system_nodes: the CPU node group for cluster services; default 2 x m5.xlarge, None for none.
    kubernetes_version: EKS version, one of KUBERNETES_RELEASES (a kubectl layer each); default the newest.
    cluster_name: the EKS name; default: CloudFormation generates one.
    endpoint: "private" (default; nodes and the kubectl handler reach it inside the VPC) or "public-and-private".
    public_access_cidrs: who may reach a public endpoint; required (and never 0.0.0.0/0) for public-and-private,
        default none (a private endpoint takes none).
    admin_role: an IAM role given cluster-admin through an access entry; default none.
    lustre: the kiln file system as PV/PVC; default none (the FSx CSI driver is installed all the same).
    code_server: code-server (VS Code in a browser) as one pod on the system nodes, with the lustre volume mounted
        and its home on it, reached with `kubectl port-forward` only (kiln.constructs.eks_code_server); default none.
        Needs lustre and system_nodes.
    bootstrap: the bundle accelerated nodes run at boot (BootstrapAssets.node_bootstrap for kiln's `eks` bundle),
        checked against its digest, which the user data carries; default none (the EKS image's own boot only).
    cluster_env: the bundle's deploy-time values; default none.
    security_groups: further groups for every node's primary interface; default none.
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
        names); default none. System nodes also carry kiln's node-group and cluster tags.
    neuron_release: the cluster's Neuron SDK release (kiln.catalog.neuron.resolve_neuron_release), whose chart
        release's device plugin and scheduler extension images Neuron nodes get (kiln.catalog.neuron_components);
        default none: the newest images kiln maps.
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


class EksTrainingCluster(Construct):
    """EKS cluster, EFA GPU and Neuron node groups, a system node group, and the pinned training add-ons."""

    def __init__(self, scope: Construct, construct_id: str, props: EksTrainingClusterProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        release = KUBERNETES_RELEASES[props.kubernetes_version]
        control_plane_subnets = list(props.control_plane_subnets) or list(props.vpc.private_subnets)
        self._check_control_plane_subnets(control_plane_subnets)
        self.kubectl_layer = release.kubectl_layer(self, "KubectlLayer")
        self.secrets_key = props.secrets_key or secrets_key(
            self, "SecretsKey", description="kiln: envelope encryption of the EKS cluster's Kubernetes secrets"
        )
        self.cluster = eks.Cluster(
            self,
            "Resource",
            version=release.version,
            cluster_name=props.cluster_name,
            vpc=props.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=control_plane_subnets)],
            endpoint_access=eks.EndpointAccess.PRIVATE
            if props.endpoint == "private"
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*props.public_access_cidrs),
            cluster_logging=list(eks.ClusterLoggingTypes),
            # Managed node groups, not Auto Mode: EFA launch templates and placement groups need them.
            default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            # The private endpoint is always on, so CDK runs the kubectl handler in the private subnets.
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
            secrets_encryption_key=self.secrets_key,
            # No hidden cluster-admin access entry for whoever creates the cluster (CloudFormation's execution role):
            # every principal with Kubernetes rights has an entry of its own in the template (CDK's kubectl
            # handler role, admin_role; EKS adds the node groups' role itself). platforms.json, eks.access_entries.
            bootstrap_cluster_creator_admin_permissions=False,
        )
        if props.admin_role is not None:
            self.cluster.grant_access(
                "AdminAccess",
                props.admin_role.role_arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        self.node_role = self._node_role()
        # EKS's Pod Identity agent add-on (CDK creates it once per cluster), at the version EKS pins for the
        # cluster's Kubernetes version.
        self.pod_identity_agent = self.cluster.eks_pod_identity_agent
        self.cni_role, self.cni_identity = self._pod_identity("VpcCni", VPC_CNI_IDENTITY)
        # A launch template that names security groups replaces EKS's default: the cluster group must be listed.
        lustre = [props.lustre.client_security_group] if props.lustre else []
        node_security_groups = [self.cluster.cluster_security_group, *lustre, *props.security_groups]
        self.system_node_group: eks.Nodegroup | None = None
        if props.system_nodes:
            self.system_node_group = add_system_node_group(
                self,
                self.cluster,
                props.system_nodes,
                subnet=props.node_subnet,
                node_role=self.node_role,
                security_groups=node_security_groups,
                node_tags=props.node_tags,
            )
        user_data = []
        if props.bootstrap is not None:
            bootstrap = props.bootstrap
            user_data.append(
                fetch_user_data(
                    bootstrap.s3_url, bootstrap.entry_point, props.cluster_env, bundle_sha256=bootstrap.content_sha256
                )
            )
        self.launch_templates: dict[str, EfaLaunchTemplate] = {}
        self.node_groups: dict[str, eks.Nodegroup] = {}
        for group in props.accelerated_groups:
            self.launch_templates[group.name], self.node_groups[group.name] = add_accelerated_node_group(
                self,
                self.cluster,
                group,
                subnet=props.node_subnet,
                node_role=self.node_role,
                security_groups=node_security_groups,
                efa_security_group=props.efa_security_group,
                user_data_parts=user_data,
                autoscaled=props.cluster_autoscaler,
                node_tags=props.node_tags,
            )
        for nodegroup in self._all_node_groups():
            # Pod Identity credentials are injected when a pod is created: aws-node must find its association
            # (and the agent) in place before the first node joins, or it falls back to the node role.
            nodegroup.node.add_dependency(self.cni_identity, self.pod_identity_agent)
            # Each node group runs the cluster's version: EKS moves a cluster to a new version only while every managed
            # node group is at its current one, so a group left at the version it was made with blocks the next
            # upgrade (platforms.json, eks.node_group_version). A new version rolls the group after the cluster.
            nodegroup.node.default_child.add_property_override("Version", release.version.version)
        kinds = props.accelerator_kinds
        # Device plugins only for the accelerators the cluster has; EFA's and the rest always.
        self.addons: dict[str, Construct] = {
            key: self._helm_chart(_pascal(key), addon)
            for key, addon in HELM_ADDONS.items()
            if addon.accelerator is None or addon.accelerator in kinds
        }
        self.install_tools = install_tools(props.kubernetes_version)
        # One owner per CRD: beside HyperPod's dependencies (whose MPI operator owns MPIJob) the training operator
        # leaves the kinds they install out.
        owned = HYPERPOD_DEPENDENCIES.installed_crds() if props.hyperpod_dependencies else frozenset()
        self.training_operator = TRAINING_OPERATOR.leaving(owned)
        self.training_operator_ready = self._install(
            self.training_operator.name,
            kustomize_job_manifests(self.training_operator, self.install_tools),
            "TrainingOperatorReady",
        )
        # The namespace `kiln job submit` uses admits no pod that Pod Security's baseline refuses (privileged,
        # host namespaces, host paths: a way to the node and its credentials).
        self.job_pod_security = eks.KubernetesPatch(
            self,
            "JobNamespacePodSecurity",
            cluster=self.cluster,
            resource_name=f"namespace/{JOB_NAMESPACE}",
            apply_patch=pod_security_patch(props.kubernetes_version),
            restore_patch=pod_security_patch(props.kubernetes_version),
            patch_type=eks.PatchType.MERGE,
        )
        # The schedulerName of Neuron-aware placement (whole devices, contiguous cores); None without Neuron nodes.
        self.neuron_scheduler_name: str | None = None
        if "neuron" in kinds:
            self.neuron_scheduler_name = NEURON_SCHEDULER_NAME
            components = neuron_kubernetes_components(props.neuron_release)
            self.addons[NEURON_DEVICE_PLUGIN] = self.cluster.add_manifest(
                _pascal(NEURON_DEVICE_PLUGIN), *neuron_device_plugin_manifests(neuron_instance_types(), components)
            )
            self.addons[NEURON_SCHEDULER] = self.cluster.add_manifest(
                _pascal(NEURON_SCHEDULER), *neuron_scheduler_manifests(release.kube_scheduler_image, components)
            )
        # The cluster-autoscaler's role (None without it), and Kueue's install and queues (None without them).
        self.autoscaler_role: iam.Role | None = None
        if props.accelerated_groups and props.cluster_autoscaler:
            self.autoscaler_role = self._cluster_autoscaler(release_version=props.kubernetes_version)
        self.queues: eks.KubernetesManifest | None = None
        if props.accelerated_groups and props.gang_scheduling:
            self.queues = self._gang_scheduling()
        # A node group update evicts no running training pod (kiln.constructs.eks_disruption); None without groups.
        self.training_budget: eks.KubernetesManifest | None = None
        if props.accelerated_groups:
            self.training_budget = self.cluster.add_manifest(
                "TrainingDisruptionBudget",
                training_budget_manifest(sum(g.max_count for g in props.accelerated_groups)),
            )
        # What a HyperPod cluster on this one waits for; None without hyperpod_dependencies.
        self.hyperpod_dependencies_ready: Construct | None = None
        if props.hyperpod_dependencies:
            self.hyperpod_dependencies_ready = self._hyperpod_dependencies()
        self.lustre_volume = self._lustre_volume(props.lustre) if props.lustre else None
        # code-server's namespace, volume claim and Deployment; None without code_server.
        self.code_server: eks.KubernetesManifest | None = None
        if props.code_server is not None and props.lustre is not None:
            self.code_server = self._code_server(props.code_server, props.lustre)
        self._drop_kubectl_ecr_policies()
        self._acknowledge()

    def _check_control_plane_subnets(self, subnets: list[ec2.ISubnet]) -> None:
        zones = {s.availability_zone for s in subnets if not unresolved(s.availability_zone)}
        resolved = all(not unresolved(s.availability_zone) for s in subnets)
        require(
            self,
            len(subnets) >= 2 and (len(zones) >= 2 or not resolved),
            "control_plane_subnets",
            [s.subnet_id for s in subnets],
            "subnets in at least two availability zones (EKS requires two for its control plane)",
        )

    def _node_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="kiln EKS nodes: join the cluster, image pulls, SSM Agent, bootstrap bundle",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_POLICIES],
        )
        for statement in ssm_agent_statements(self):
            role.add_to_policy(statement)
        acknowledge_wildcards(role, acknowledgements.NODE_SSM_GRANTS)
        if self._props.bootstrap is not None and self._props.accelerated_groups:
            self._props.bootstrap.grant_read(role)
        return role

    def _pod_identity(
        self, construct_id: str, identity: PodIdentity, *, statements: Sequence[iam.PolicyStatement] = ()
    ) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
        """Give IDENTITY's service account in this cluster, and nothing else, a role with its managed policy (if
        any) and STATEMENTS."""
        # EKS Pod Identity tags each session with where the pod runs; the trust policy accepts only this account.
        tags = {
            "aws:RequestTag/eks-cluster-arn": self.cluster.cluster_arn,
            "aws:RequestTag/kubernetes-namespace": identity.namespace,
            "aws:RequestTag/kubernetes-service-account": identity.service_account,
        }
        role = iam.Role(
            self,
            f"{construct_id}Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")).with_conditions(
                {"StringEquals": tags}
            ),
            description=f"kiln EKS {identity.namespace}/{identity.service_account} (EKS Pod Identity)",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(identity.managed_policy)]
            if identity.managed_policy
            else [],
            inline_policies={"Actions": iam.PolicyDocument(statements=list(statements))} if statements else None,
        )
        association = eks.CfnPodIdentityAssociation(
            self,
            f"{construct_id}PodIdentity",
            cluster_name=self.cluster.cluster_name,
            namespace=identity.namespace,
            service_account=identity.service_account,
            role_arn=role.role_arn,
        )
        return role, association

    def _all_node_groups(self) -> list[eks.Nodegroup]:
        system = [self.system_node_group] if self.system_node_group is not None else []
        return [*system, *self.node_groups.values()]

    def _hyperpod_dependencies(self) -> eks.KubernetesObjectValue:
        """Install HyperPod's dependency chart at its pinned commit (a Job on the system nodes), and return the wait
        for that Job's success: a HyperPod cluster created before it would not work, or fail."""
        return self._install_and_wait(HYPERPOD_DEPENDENCIES, "HyperpodDependenciesReady")

    def _install_and_wait(self, addon: GitHelmAddon, wait_id: str) -> eks.KubernetesObjectValue:
        """Install ADDON's chart at its pinned commit (a Job, on the system nodes while no other node exists), and
        return the wait for that Job's success."""
        return self._install(
            addon.name, git_helm_job_manifests(addon, Stack.of(self).region, self.install_tools), wait_id
        )

    def _install(self, key: str, objects: list[dict], wait_id: str) -> eks.KubernetesObjectValue:
        """Apply an install's OBJECTS (install_job_manifests) as addons[KEY] and take its cluster-admin grant back
        from outside the Job, whether the install succeeds or fails; return the wait for the Job's success.

        In order: the manifest; Finished, a wait (INSTALL_WAIT_MINUTES) for the Job to end either way, which it does
        within its activeDeadlineSeconds; Revoke, a patch that empties the binding's subjects (and names the Job,
        so a new Job that re-grants it is followed by a new patch); then WAIT_ID, which fails the deployment unless
        the Job succeeded. A failed deployment rolls back: on create CloudFormation deletes the manifest (binding and
        all); on update it re-applies the previous objects, whose Job revokes at its end, and the previous Revoke is
        applied again; on delete, Revoke's restore is the same empty-subjects patch."""
        name = _pascal(key)
        install = self.cluster.add_manifest(name, *objects)
        self.addons[key] = install
        binding, job = install_grant(objects)
        job_name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        finished = eks.KubernetesObjectValue(
            self,
            f"{name}Finished",
            cluster=self.cluster,
            object_type="job",
            object_name=job_name,
            object_namespace=namespace,
            json_path=JOB_FINISHED_PATH,
            timeout=Duration.minutes(INSTALL_WAIT_MINUTES),
        )
        finished.node.add_dependency(install)
        if self.system_node_group is not None:
            # The Job runs on the system nodes: waiting starts once they exist.
            finished.node.add_dependency(self.system_node_group)
        revoked = revoked_binding_patch(job_name)
        revoke = eks.KubernetesPatch(
            self,
            f"{name}Revoke",
            cluster=self.cluster,
            resource_name=f"clusterrolebinding/{binding['metadata']['name']}",
            apply_patch=revoked,
            restore_patch=revoked,
            patch_type=eks.PatchType.MERGE,
        )
        revoke.node.add_dependency(finished)
        succeeded = eks.KubernetesObjectValue(
            self,
            wait_id,
            cluster=self.cluster,
            object_type="job",
            object_name=job_name,
            object_namespace=namespace,
            json_path=".status.succeeded",
            timeout=Duration.minutes(SUCCEEDED_WAIT_MINUTES),
        )
        succeeded.node.add_dependency(revoke)
        return succeeded

    def _cluster_autoscaler(self, *, release_version: str) -> iam.Role:
        """Run the cluster-autoscaler on the system nodes with a Pod Identity role of exactly its actions: reads
        where they take no resource scope, the node groups of this cluster, and scaling only of the Auto Scaling
        groups EKS tags as this cluster's."""
        facts = CLUSTER_AUTOSCALER_FACTS
        stack = Stack.of(self)
        name = self.cluster.cluster_name
        # The condition key holds the cluster's name, which the props give (a key cannot hold a token).
        owned = {
            f"aws:ResourceTag/{autoscaler_owned_tag(self._props.cluster_name)}": CLUSTER_AUTOSCALER_FACTS[
                "owned_tag_value"
            ]
        }
        statements = [
            iam.PolicyStatement(actions=list(facts["describe_actions"]), resources=["*"]),
            iam.PolicyStatement(
                actions=list(facts["nodegroup_actions"]),
                resources=[stack.format_arn(service="eks", resource="nodegroup", resource_name=f"{name}/*/*")],
            ),
            iam.PolicyStatement(
                actions=list(facts["scale_actions"]), resources=["*"], conditions={"StringEquals": owned}
            ),
        ]
        identity = PodIdentity(namespace=AUTOSCALER_NAMESPACE, service_account=AUTOSCALER_SERVICE_ACCOUNT)
        role, association = self._pod_identity("ClusterAutoscaler", identity, statements=statements)
        addon = cluster_autoscaler_addon(
            cluster_name=name,
            region=stack.region,
            kubernetes_version=release_version,
            provision_seconds=self._props.node_provision_seconds,
            node_selector=self._system_selector(),
        )
        chart = self._helm_chart("ClusterAutoscaler", addon)
        # Credentials are injected when the pod is created: the association must be there first.
        chart.node.add_dependency(association, self.pod_identity_agent)
        self.addons["cluster-autoscaler"] = chart
        acknowledge_wildcards(role, acknowledgements.CLUSTER_AUTOSCALER_GRANTS, cluster=name)
        return role

    def _gang_scheduling(self) -> eks.KubernetesManifest:
        """Install Kueue, then its queues over the accelerated groups once its API is there."""
        addon = kueue_addon(
            pods_ready_seconds=self._props.node_provision_seconds + IMAGE_PULL_SECONDS,
            node_selector=self._system_selector(),
        )
        ready = self._install_and_wait(addon, "KueueReady")
        groups = [
            QueuedGroup(name=g.name, instance_type=g.instance_type, max_count=g.max_count)
            for g in self._props.accelerated_groups
        ]
        queues = self.cluster.add_manifest("KueueQueues", *queue_manifests(groups))
        queues.node.add_dependency(ready)
        return queues

    def _helm_chart(self, construct_id: str, addon: HelmAddon) -> eks.HelmChart:
        """Install ADDON's chart at its pinned version from its HTTPS repository, into its existing namespace."""
        return self.cluster.add_helm_chart(
            construct_id,
            chart=addon.chart,
            repository=addon.repository,
            version=addon.version,
            namespace=addon.namespace,
            release=addon.release,
            values=dict(addon.values),
            create_namespace=False,
        )

    def _system_selector(self) -> dict[str, str]:
        return {NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP} if self.system_node_group is not None else {}

    def _lustre_volume(self, lustre: LustreVolume) -> eks.KubernetesManifest:
        names = LustreVolumeNames(
            storage_class=lustre.storage_class,
            volume=lustre.volume_name,
            claim=lustre.claim_name,
            namespace=lustre.namespace,
        )
        return self.cluster.add_manifest(
            "LustreVolume",
            *lustre_volume_manifests(
                names,
                file_system_id=lustre.file_system.file_system_id,
                dns_name=lustre.file_system.dns_name,
                mount_name=lustre.file_system.mount_name,
                storage_gib=lustre.storage_gib,
            ),
        )

    def _code_server(self, pod: CodeServerPod, lustre: LustreVolume) -> eks.KubernetesManifest:
        """Run code-server on the system nodes with the Lustre volume: its own claim in its namespace (a claim serves
        one namespace), bound to the file system as the jobs' is, in the storage class the Lustre volume created."""
        manifest = self.cluster.add_manifest(
            "CodeServer",
            *code_server_manifests(
                pod,
                storage_class=lustre.storage_class,
                file_system_id=lustre.file_system.file_system_id,
                dns_name=lustre.file_system.dns_name,
                mount_name=lustre.file_system.mount_name,
                storage_gib=lustre.storage_gib,
            ),
        )
        if self.lustre_volume is not None:
            manifest.node.add_dependency(self.lustre_volume)
        return manifest

    def _drop_kubectl_ecr_policies(self) -> None:
        """Take ECR and ECR Public read off CDK's kubectl handler role: its helm step logs in to a registry only
        for oci:// charts, and every chart kiln installs comes over HTTPS (HELM_ADDONS)."""
        handler = self.cluster.kubectl_provider.node.find_child("Handler")
        role = handler.role.node.default_child
        arns = Stack.of(self).resolve(role.managed_policy_arns)
        kept = [arn for arn in arns if not any(name in json.dumps(arn) for name in KUBECTL_ECR_POLICIES)]
        # CDK adds the policies to a role it owns, with no way to opt out: replace the role's list (on the L1, so
        # cdk-nag sees what CloudFormation gets), and drop the condition that chose ECR Public by partition.
        role.managed_policy_arns = [Token.as_string(arn) for arn in kept]
        handler.node.try_remove_child("HasEcrPublic")

    def _acknowledge(self) -> None:
        acknowledge(self.cluster.role, acknowledgements.EKS_CLUSTER_ROLE)
        acknowledge(self.node_role, *acknowledgements.EKS_NODE_POLICIES)
        acknowledge(self.cni_role, acknowledgements.EKS_CNI_POLICY)
        provider = self.cluster.kubectl_provider
        handler = provider.node.find_child("Handler")
        acknowledge(provider, *acknowledgements.KUBECTL_HANDLER_POLICIES, acknowledgements.KUBECTL_HANDLER_RUNTIME)
        acknowledge_wildcards(provider, acknowledgements.KUBECTL_HANDLER_GRANTS, handler=handler.function_arn)

    @property
    def kubernetes_version(self) -> str:
        """The cluster's Kubernetes version, a key of KUBERNETES_RELEASES (such as "1.35")."""
        return self._props.kubernetes_version

    @property
    def accelerator_kinds(self) -> frozenset[str]:
        """The accelerators of the cluster's nodes ('gpu', 'neuron'): its groups' and those of nodes that join from
        elsewhere (external_accelerators)."""
        return self._props.accelerator_kinds

    @property
    def cluster_arn(self) -> str:
        return self.cluster.cluster_arn

    @property
    def cluster_name(self) -> str:
        return self.cluster.cluster_name

    @property
    def security_group(self) -> ec2.ISecurityGroup:
        """The EKS cluster security group: control plane and every node are members."""
        return self.cluster.cluster_security_group

    @property
    def connections(self) -> ec2.Connections:
        return self.cluster.connections


def _pascal(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("-"))
