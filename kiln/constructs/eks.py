"""EksTrainingCluster: EKS with EFA GPU and Neuron node groups in one AZ and the add-ons training needs.

Like aws-eks-v2's Cluster, it grows through add_* methods (node groups, manifests, Helm charts, access entries, Pod
Identity roles), and its constructor builds what its props ask for with the same methods. Its props and their checks
are kiln.constructs.eks_props; the node groups' templates kiln.constructs.eks_node_groups; install Jobs and their waits
kiln.constructs.eks_install_wait; the cluster-autoscaler and Kueue kiln.constructs.eks_scheduling; the file system's
volumes kiln.constructs.eks_volumes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from kiln.bootstrap.fetch import fetch_user_data
from kiln.catalog.kubernetes import JOB_NAMESPACE, NEURON_SCHEDULER_NAME, NODE_GROUP_LABEL
from kiln.catalog.neuron_components import neuron_kubernetes_components
from kiln.constructs import acknowledgements
from kiln.constructs._checks import refuse, require, unresolved
from kiln.constructs.children import UnexpectedTree, child_of, l1_of
from kiln.constructs.eks_addons import (
    HELM_ADDONS,
    HYPERPOD_DEPENDENCIES,
    KUBERNETES_RELEASES,
    NODE_MONITORING_AGENT,
    TRAINING_OPERATOR,
    VPC_CNI_IDENTITY,
    HelmAddon,
    PodIdentity,
    pod_security_patch,
)
from kiln.constructs.eks_disruption import training_budget_manifest
from kiln.constructs.eks_install import install_tools, kustomize_job_manifests
from kiln.constructs.eks_install_wait import install_and_wait, install_chart_and_wait, pascal
from kiln.constructs.eks_node_groups import (
    AcceleratedNodeGroup,
    add_accelerated_node_group,
    add_system_node_group,
    node_role,
)
from kiln.constructs.eks_props import EksTrainingClusterProps
from kiln.constructs.eks_scheduling import QueuedGroup, add_cluster_autoscaler, add_gang_scheduling
from kiln.constructs.eks_volumes import add_code_server, add_lustre_volume
from kiln.constructs.keys import secrets_key
from kiln.constructs.launch_template import EfaLaunchTemplate
from kiln.constructs.neuron_addons import (
    NEURON_DEVICE_PLUGIN,
    NEURON_SCHEDULER,
    neuron_device_plugin_manifests,
    neuron_instance_types,
    neuron_scheduler_manifests,
)
from kiln.constructs.review import acknowledge, acknowledge_wildcards
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP

# What CDK's kubectl handler gets from ECR only to pull oci:// Helm charts; kiln's charts come over HTTPS.
KUBECTL_ECR_POLICIES = ("AmazonEC2ContainerRegistryReadOnly", "AmazonElasticContainerRegistryPublicReadOnly")
# What admin_role gets: EKS's cluster-admin access policy, on the whole cluster.
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


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
            cluster_admin = eks.AccessPolicy.from_access_policy_name(
                CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
            )
            self.add_access("AdminAccess", props.admin_role.role_arn, [cluster_admin])
        self.node_role = node_role(self, props.bootstrap if props.accelerated_groups else None)
        # EKS's Pod Identity agent add-on (CDK creates it once per cluster), at the version EKS pins for the
        # cluster's Kubernetes version.
        self.pod_identity_agent = self.cluster.eks_pod_identity_agent
        self.cni_role, self.cni_identity = self.add_pod_identity("VpcCni", VPC_CNI_IDENTITY)
        # EKS's node monitoring agent (None without it): the health conditions node repair acts on. Removing it from
        # the props removes it from the cluster (not preserved on delete).
        self.node_monitoring_agent: eks.Addon | None = None
        if props.node_monitoring_agent:
            self.node_monitoring_agent = eks.Addon(
                self,
                "NodeMonitoringAgent",
                cluster=self.cluster,  # type: ignore[arg-type]  # jsii's Python Cluster omits ICluster's kubectl_provider_options
                addon_name=NODE_MONITORING_AGENT,
                preserve_on_delete=False,
            )
        # A launch template that names security groups replaces EKS's default: the cluster group must be listed.
        lustre = [props.lustre.client_security_group] if props.lustre else []
        self._node_security_groups = [self.cluster.cluster_security_group, *lustre, *props.security_groups]
        self.system_node_group: eks.Nodegroup | None = None
        if props.system_nodes:
            self.system_node_group = add_system_node_group(
                self,
                self.cluster,
                props.system_nodes,
                subnet=props.node_subnet,
                node_role=self.node_role,
                security_groups=self._node_security_groups,
                node_tags=props.node_tags,
                node_repair=props.node_repair,
            )
            self._join(self.system_node_group)
        self._user_data: list[str] = []
        if props.bootstrap is not None:
            bootstrap = props.bootstrap
            self._user_data.append(
                fetch_user_data(
                    bootstrap.s3_url, bootstrap.entry_point, props.cluster_env, bundle_sha256=bootstrap.content_sha256
                )
            )
        self.launch_templates: dict[str, EfaLaunchTemplate] = {}
        self.node_groups: dict[str, eks.Nodegroup] = {}
        for group in props.accelerated_groups:
            self.add_node_group(group)
        kinds = props.accelerator_kinds
        # Device plugins only for the accelerators the cluster has; EFA's and the rest always.
        self.addons: dict[str, Construct] = {
            key: self.add_helm_chart(pascal(key), addon)
            for key, addon in HELM_ADDONS.items()
            if addon.accelerator is None or addon.accelerator in kinds
        }
        self.install_tools = install_tools(props.kubernetes_version)
        # One owner per CRD: beside HyperPod's dependencies (whose MPI operator owns MPIJob) the training operator
        # leaves the kinds they install out.
        owned = HYPERPOD_DEPENDENCIES.installed_crds() if props.hyperpod_dependencies else frozenset()
        self.training_operator = TRAINING_OPERATOR.leaving(owned)
        self.training_operator_ready = install_and_wait(
            self,
            self.training_operator.name,
            kustomize_job_manifests(self.training_operator, self.install_tools),
            "TrainingOperatorReady",
        )
        # The namespace `kiln job submit` uses admits no pod that Pod Security's baseline refuses (privileged,
        # host namespaces, host paths: a way to the node and its credentials).
        self.job_pod_security = eks.KubernetesPatch(
            self,
            "JobNamespacePodSecurity",
            cluster=self.cluster,  # type: ignore[arg-type]  # jsii's Python Cluster omits ICluster's kubectl_provider_options
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
            self.addons[NEURON_DEVICE_PLUGIN] = self.add_manifest(
                pascal(NEURON_DEVICE_PLUGIN), *neuron_device_plugin_manifests(neuron_instance_types(), components)
            )
            self.addons[NEURON_SCHEDULER] = self.add_manifest(
                pascal(NEURON_SCHEDULER), *neuron_scheduler_manifests(release.kube_scheduler_image, components)
            )
        # The cluster-autoscaler's role (None without it), and Kueue's install and queues (None without them).
        self.autoscaler_role: iam.Role | None = None
        # The props refuse cluster_autoscaler with accelerated groups and no cluster_name.
        if props.accelerated_groups and props.cluster_autoscaler and props.cluster_name is not None:
            self.autoscaler_role = add_cluster_autoscaler(
                self, cluster_name=props.cluster_name, provision_seconds=props.node_provision_seconds
            )
        self.queues: eks.KubernetesManifest | None = None
        if props.accelerated_groups and props.gang_scheduling:
            groups = [
                QueuedGroup(name=g.name, instance_type=g.instance_type, max_count=g.max_count)
                for g in props.accelerated_groups
            ]
            self.queues = add_gang_scheduling(self, groups, provision_seconds=props.node_provision_seconds)
        # A node group update evicts no running training pod (kiln.constructs.eks_disruption); None without groups.
        self.training_budget: eks.KubernetesManifest | None = None
        if props.accelerated_groups:
            self.training_budget = self.add_manifest(
                "TrainingDisruptionBudget",
                training_budget_manifest(sum(g.max_count for g in props.accelerated_groups)),
            )
        # What a HyperPod cluster on this one waits for (its dependency chart at its pinned commit, installed by a Job
        # on the system nodes: a HyperPod cluster created before it would not work, or fail); None without
        # hyperpod_dependencies.
        self.hyperpod_dependencies_ready: Construct | None = None
        if props.hyperpod_dependencies:
            self.hyperpod_dependencies_ready = install_chart_and_wait(
                self, HYPERPOD_DEPENDENCIES, "HyperpodDependenciesReady"
            )
        self.lustre_volume = add_lustre_volume(self, props.lustre) if props.lustre else None
        # code-server's namespace, volume claim and Deployment; None without code_server.
        self.code_server: eks.KubernetesManifest | None = None
        if props.code_server is not None and props.lustre is not None:
            self.code_server = add_code_server(self, props.code_server, props.lustre, self.lustre_volume)
        self._drop_kubectl_ecr_policies()
        self._acknowledge()

    def add_node_group(self, group: AcceleratedNodeGroup) -> eks.Nodegroup:
        """Add GROUP, an EFA GPU or Neuron node group, and return it: its launch template (the props' node subnet,
        EFA and further security groups, bootstrap and node tags) in launch_templates, the node group in node_groups,
        joining once the VPC CNI's Pod Identity is in place and running the cluster's Kubernetes version. The
        cluster-autoscaler (cluster_autoscaler) scales it too; Kueue's queues, the training disruption budget and
        the device plugins follow the props' accelerated_groups, so a group that needs them belongs there."""
        props = self._props
        efa_security_group = props.efa_security_group
        if efa_security_group is None:
            refuse(self, "efa_security_group", None, "a security group in the props to add an accelerated node group")
        taken = [EKS_SYSTEM_NODE_GROUP, *self.node_groups]
        require(self, group.name not in taken, "node group name", group.name, f"a name other than {taken}")
        self.launch_templates[group.name], nodegroup = add_accelerated_node_group(
            self,
            self.cluster,
            group,
            subnet=props.node_subnet,
            node_role=self.node_role,
            security_groups=self._node_security_groups,
            efa_security_group=efa_security_group,
            user_data_parts=self._user_data,
            autoscaled=props.cluster_autoscaler,
            node_tags=props.node_tags,
            node_repair=props.node_repair,
        )
        self.node_groups[group.name] = nodegroup
        self._join(nodegroup)
        return nodegroup

    def add_manifest(self, construct_id: str, *manifest: dict[str, Any]) -> eks.KubernetesManifest:
        """Apply MANIFEST's Kubernetes objects to the cluster (through CDK's kubectl handler) and return them."""
        return self.cluster.add_manifest(construct_id, *manifest)

    def add_helm_chart(self, construct_id: str, addon: HelmAddon) -> eks.HelmChart:
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

    def add_access(self, construct_id: str, principal_arn: str, access_policies: Sequence[eks.IAccessPolicy]) -> None:
        """Give the IAM principal PRINCIPAL_ARN an access entry to the cluster with ACCESS_POLICIES (EKS access
        policies, such as AmazonEKSClusterAdminPolicy on the cluster's scope)."""
        self.cluster.grant_access(construct_id, principal_arn, list(access_policies))

    def add_pod_identity(
        self, construct_id: str, identity: PodIdentity, *, statements: Sequence[iam.PolicyStatement] = ()
    ) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
        """Give IDENTITY's service account in this cluster, and nothing else, a role with its managed policy (if
        any) and STATEMENTS, through EKS Pod Identity; return the role and its association."""
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

    def _join(self, nodegroup: eks.Nodegroup) -> None:
        """Make NODEGROUP join the cluster as kiln's node groups do."""
        # Pod Identity credentials are injected when a pod is created: aws-node must find its association (and the
        # agent) in place before the first node joins, or it falls back to the node role.
        nodegroup.node.add_dependency(self.cni_identity, self.pod_identity_agent)
        # Each node group runs the cluster's version: EKS moves a cluster to a new version only while every managed
        # node group is at its current one, so a group left at the version it was made with blocks the next upgrade
        # (platforms.json, eks.node_group_version). A new version rolls the group after the cluster.
        version = KUBERNETES_RELEASES[self._props.kubernetes_version].version.version
        l1_of(nodegroup, eks.CfnNodegroup).add_property_override("Version", version)

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

    @property
    def system_node_selector(self) -> dict[str, str]:
        """The nodeSelector of pods that run on the system nodes (none without a system group)."""
        return {NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP} if self.system_node_group is not None else {}

    def _drop_kubectl_ecr_policies(self) -> None:
        """Take ECR and ECR Public read off CDK's kubectl handler role: its helm step logs in to a registry only
        for oci:// charts, and every chart kiln installs comes over HTTPS (HELM_ADDONS)."""
        handler = self._kubectl_handler()
        role = l1_of(handler.role, iam.CfnRole)
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
        provider = self._kubectl_provider()
        acknowledge(provider, *acknowledgements.KUBECTL_HANDLER_POLICIES, acknowledgements.KUBECTL_HANDLER_RUNTIME)
        acknowledge_wildcards(
            provider, acknowledgements.KUBECTL_HANDLER_GRANTS, handler=self._kubectl_handler().function_arn
        )

    def _kubectl_provider(self) -> eks.IKubectlProvider:
        """Return CDK's kubectl provider of the cluster, which kiln always asks for (kubectl_provider_options)."""
        provider = self.cluster.kubectl_provider
        if provider is None:
            raise UnexpectedTree(f"{self.cluster.node.path} has no kubectl provider")
        return provider

    def _kubectl_handler(self) -> lambda_.Function:
        """Return the Lambda function CDK's kubectl provider runs kubectl and helm in."""
        return child_of(self._kubectl_provider(), "Handler", lambda_.Function)

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
