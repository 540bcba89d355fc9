"""HyperPodCluster: a SageMaker HyperPod cluster whose lifecycle scripts are kiln's bootstrap."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from kiln.bootstrap.cluster_env import cluster_env_text
from kiln.catalog import UnknownInstanceType
from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.catalog.limits import HYPERPOD_VOLUME_MAX_GIB, HYPERPOD_VOLUME_MIN_GIB
from kiln.catalog.names import hyperpod_type_name
from kiln.catalog.platforms import service_fact
from kiln.constructs import acknowledgements
from kiln.constructs._checks import PropError, field_name, require, require_in
from kiln.constructs.bucket import DataBucket, DataBucketProps
from kiln.constructs.eks_addons import GPU_PRESENT_LABEL
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.node_scripts import deploy_node_scripts
from kiln.constructs.review import acknowledge, acknowledge_wildcards

NodeRole = Literal["controller", "login", "worker"]
ROLES: tuple[str, ...] = get_args(NodeRole)
Orchestrator = Literal["slurm", "eks"]
ORCHESTRATORS: tuple[str, ...] = get_args(Orchestrator)
HYPERPOD_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
# What replaces a faulty node: HyperPod itself (automatic) or the cluster's administrator (none); CreateCluster's
# NodeRecovery value of each (platforms.json, hyperpod.node_recovery).
NodeRecovery = Literal["automatic", "none"]
NODE_RECOVERY: dict[str, str] = service_fact("hyperpod", "node_recovery").value
# The deep health checks an accelerated group's nodes run when they start (platforms.json, hyperpod.deep_health_checks).
DEEP_HEALTH_CHECKS: list[str] = list(service_fact("hyperpod", "deep_health_checks").value)


@dataclass(frozen=True, kw_only=True)
class HyperPodInstanceGroup:
    """One HyperPod instance group.

    name: the group name (HyperPod and the lifecycle scripts know nodes by it).
    instance_type: the EC2 name (p5.48xlarge); the cluster uses its ml.* name.
    count: nodes in the group (HyperPod groups have a fixed size).
    role: controller, login or worker (Slurm); worker for EKS; default worker.
    storage_gib: the EBS volume HyperPod mounts at /opt/sagemaker; default 500.
    """

    name: str
    instance_type: str
    count: int
    role: NodeRole = "worker"
    storage_gib: int = 500

    def __post_init__(self) -> None:
        require(self, HYPERPOD_NAME.fullmatch(self.name) is not None, "name", self.name, "1-63 letters, digits and '-'")
        require_in(self, "role", self.role, ROLES)
        require(self, self.count >= 1, "count", self.count, "1 or more")
        require(
            self,
            HYPERPOD_VOLUME_MIN_GIB <= self.storage_gib <= HYPERPOD_VOLUME_MAX_GIB,
            "storage_gib",
            self.storage_gib,
            f"{HYPERPOD_VOLUME_MIN_GIB} to {HYPERPOD_VOLUME_MAX_GIB}",
        )
        try:
            offered = catalog_instance_type(self.instance_type).hyperpod
        except UnknownInstanceType as exc:
            raise PropError(f"{field_name(self, 'instance_type')}: {exc}") from None
        require(self, offered, "instance_type", self.instance_type, "a type HyperPod offers (see `kiln catalog list`)")

    @property
    def accelerated(self) -> bool:
        return catalog_instance_type(self.instance_type).accelerator is not None


@dataclass(frozen=True, kw_only=True)
class HyperPodClusterProps:
    """Props for HyperPodCluster.

    cluster_name: the HyperPod cluster name.
    vpc: the VPC of the nodes' interfaces.
    subnet: the subnet of the nodes' interfaces (the compute subnet, for EFA and FSx).
    instance_groups: controller, login and worker groups (Slurm), or worker groups (EKS).
    lifecycle: the zipped lifecycle scripts and the one HyperPod runs on create
        (BootstrapAssets.node_bootstrap for kiln's `hyperpod` bundle, or its `eks` one with orchestrator eks).
    cluster_env: deploy-time values written beside the scripts as cluster.env (tokens allowed).
    lifecycle_bucket: the bucket the scripts go to; default a bucket of their own, so the copying handler never
        touches data. The execution role may read only the scripts.
    lifecycle_prefix: the key prefix of the scripts in it; default hyperpod/<cluster_name>/lifecycle/.
    security_groups: further groups for the nodes (EFA, file system clients); default none: the nodes join
        only the groups HyperPod's VpcConfig gets from the other props.
    provisioning_parameters: written as provisioning_parameters.json beside the scripts; default none (no file).
    orchestrator: slurm (default; the lifecycle scripts configure Slurm) or eks.
    eks_cluster: the EKS cluster for orchestrator eks (EksTrainingCluster.cluster, or
        eks.Cluster.from_cluster_attributes with cluster_security_group_id); its nodes join its security group.
        Default none (orchestrator slurm).
    image_id: an AMI built on a SageMaker HyperPod base AMI for every group (e.g. TrainingImage's); default
        HyperPod's own image.
    node_recovery: automatic (default): HyperPod reboots or replaces a node its health checks find faulty
        (NodeRecovery Automatic); none: a faulty node stays for the administrator (NodeRecovery None).
    deep_health_checks: HyperPod's deep health checks (InstanceStress, InstanceConnectivity) on an accelerated
        group's nodes when they start or are replaced; default True. False: none (nodes start sooner, untested).
    """

    cluster_name: str
    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    instance_groups: Sequence[HyperPodInstanceGroup]
    lifecycle: NodeBootstrap
    cluster_env: Mapping[str, str]
    lifecycle_bucket: s3.IBucket | None = None
    lifecycle_prefix: str = ""
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    provisioning_parameters: Mapping[str, Any] = field(default_factory=dict)
    orchestrator: Orchestrator = "slurm"
    eks_cluster: eks.ICluster | None = None
    image_id: str | None = None
    node_recovery: NodeRecovery = "automatic"
    deep_health_checks: bool = True

    def __post_init__(self) -> None:
        require(
            self,
            HYPERPOD_NAME.fullmatch(self.cluster_name) is not None,
            "cluster_name",
            self.cluster_name,
            "1-63 letters, digits and '-'",
        )
        require_in(self, "orchestrator", self.orchestrator, ORCHESTRATORS)
        require_in(self, "node_recovery", self.node_recovery, NODE_RECOVERY)
        require(self, bool(self.instance_groups), "instance_groups", list(self.instance_groups), "at least one group")
        names = [g.name for g in self.instance_groups]
        require(self, len(set(names)) == len(names), "instance group names", names, "unique names")
        roles = [g.role for g in self.instance_groups]
        if self.orchestrator == "slurm":
            require(
                self,
                roles.count("controller") == 1,
                "controller groups",
                roles.count("controller"),
                "exactly one for Slurm",
            )
            require(self, self.eks_cluster is None, "eks_cluster", self.eks_cluster, "none for orchestrator slurm")
        else:
            require(self, set(roles) == {"worker"}, "roles", roles, "worker only with EKS (EKS runs the control plane)")
            require(self, self.eks_cluster is not None, "eks_cluster", None, "the EKS cluster for orchestrator eks")
        require(
            self,
            not self.lifecycle_prefix.startswith("/"),
            "lifecycle_prefix",
            self.lifecycle_prefix,
            "a key prefix without a leading /",
        )

    @property
    def prefix(self) -> str:
        base = self.lifecycle_prefix or f"hyperpod/{self.cluster_name}/lifecycle"
        return base.rstrip("/") + "/"


class HyperPodCluster(Construct):
    """SageMaker HyperPod: instance groups, kiln's lifecycle scripts in S3, least-privilege role, recovery.

    Tags (CDK's Tags.of) reach the cluster resource (AWS::SageMaker::Cluster Tags, CreateCluster's "custom tags for
    managing the SageMaker HyperPod cluster as an AWS resource") and nothing HyperPod launches: no setting of the
    cluster or its instance groups tags their instances, volumes or the network interfaces HyperPod makes in the VPC.
    """

    def __init__(self, scope: Construct, construct_id: str, props: HyperPodClusterProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        self.security_group = ec2.SecurityGroup(
            self,
            "NodeSecurityGroup",
            vpc=props.vpc,
            description="HyperPod nodes: all traffic among members (Slurm, NCCL); egress for lifecycle downloads",
        )
        # Ingress from members only: the group allows all outbound already, so an egress rule to itself would be
        # dropped with a synth warning (what connections.allow_internally adds).
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "HyperPod nodes")
        self.lifecycle_bucket = (
            props.lifecycle_bucket
            or DataBucket(
                self, "LifecycleBucket", DataBucketProps(retain=False, access_log_prefix="lifecycle-bucket/")
            ).bucket
        )
        self.lifecycle = self._deploy_lifecycle()
        self.role = self._execution_role()
        self.cluster = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=props.cluster_name,
            instance_groups=[self._group(g) for g in props.instance_groups],
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                subnets=[props.subnet.subnet_id],
                security_group_ids=[g.security_group_id for g in self.node_security_groups],
            ),
            node_recovery=NODE_RECOVERY[props.node_recovery],
            # An EKS cluster is given exactly when the orchestrator is eks (the props check).
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=props.eks_cluster.cluster_arn)
            )
            if props.eks_cluster is not None
            else None,
        )
        # The scripts must be in S3 before HyperPod runs them on the first nodes.
        self.cluster.node.add_dependency(self.lifecycle)
        CfnOutput(self, "ClusterArn", value=self.cluster.attr_cluster_arn, description="SageMaker HyperPod cluster")
        # SourceS3Uri stays fixed, so changed scripts update S3 and not the cluster: HyperPod runs them on nodes
        # provisioned later, and only UpdateClusterSoftware reruns them on running nodes (platforms.json,
        # hyperpod.lifecycle_reruns). Deploys print this output, so the place the nodes read is in plain view.
        CfnOutput(
            self,
            "LifecycleEntryPoint",
            value=f"{self.source_s3_uri}{props.lifecycle.entry_point}",
            description="HyperPod runs these lifecycle scripts on nodes it provisions (new groups, more nodes, "
            "replaced nodes); running nodes keep the ones they booted with until UpdateClusterSoftware reruns them",
        )

    @property
    def lifecycle_bundle(self) -> NodeBootstrap:
        """The zipped lifecycle scripts the nodes run, and the one HyperPod runs on create (the props' lifecycle)."""
        return self._props.lifecycle

    @property
    def source_s3_uri(self) -> str:
        return f"s3://{self.lifecycle_bucket.bucket_name}/{self._props.prefix}"

    @property
    def cluster_arn(self) -> str:
        return self.cluster.attr_cluster_arn

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections

    @property
    def node_security_groups(self) -> list[ec2.ISecurityGroup]:
        """Every group the nodes' interfaces join: their own, the given ones, and EKS's cluster group."""
        groups = [self.security_group, *self._props.security_groups]
        if self._props.eks_cluster is not None:
            # The nodes are EKS workers: they talk to the control plane through the cluster security group.
            try:
                groups.append(self._props.eks_cluster.cluster_security_group)
            except Exception:  # jsii: an imported cluster that was given no cluster security group
                raise PropError(
                    f"{field_name(self, 'eks_cluster')}: got a cluster without its security group; allowed: "
                    "EksTrainingCluster.cluster, or eks.Cluster.from_cluster_attributes(..., "
                    "cluster_security_group_id=...)"
                ) from None
        return groups

    def _deploy_lifecycle(self) -> s3_deployment.BucketDeployment:
        props = self._props
        sources = [
            s3_deployment.Source.bucket(props.lifecycle.bucket, props.lifecycle.object_key),
            s3_deployment.Source.data("cluster.env", cluster_env_text(props.cluster_env)),
        ]
        if props.provisioning_parameters:
            sources.append(
                s3_deployment.Source.json_data("provisioning_parameters.json", dict(props.provisioning_parameters))
            )
        # HyperPod runs them unchecked: only this deployment may write them (kiln.constructs.node_scripts).
        return deploy_node_scripts(
            self,
            "LifecycleScripts",
            bucket=self.lifecycle_bucket,
            prefix=props.prefix,
            sources=sources,
            source_bucket=props.lifecycle.bucket,
        )

    def _execution_role(self) -> iam.Role:
        props = self._props
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=self._trust(),
            description="kiln HyperPod nodes: the cluster instance policy, VPC interfaces, and the lifecycle scripts",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(acknowledgements.HYPERPOD_INSTANCE_POLICY)
            ],
        )
        for statement in self._vpc_statements():
            role.add_to_policy(statement)
        if props.eks_cluster is not None:
            # The nodes are EKS workers: the VPC CNI on them takes its Pod Identity through the node's role.
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["eks-auth:AssumeRoleForPodIdentity"], resources=[props.eks_cluster.cluster_arn]
                )
            )
            for statement in self._ecr_statements():
                role.add_to_policy(statement)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(acknowledgements.HYPERPOD_LIFECYCLE_READS),
                resources=[self.lifecycle_bucket.arn_for_objects(f"{props.prefix}*")],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.lifecycle_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{props.prefix}*"]}},
            )
        )
        acknowledge(role, acknowledgements.HYPERPOD_INSTANCE_ROLE)
        acknowledge_wildcards(
            role,
            acknowledgements.HYPERPOD_ROLE_GRANTS,
            lifecycle_bucket=self.lifecycle_bucket.bucket_arn,
            prefix=props.prefix,
        )
        return role

    def _trust(self) -> iam.ServicePrincipal:
        """SageMaker may assume the role for HyperPod clusters of this account only, where it says which cluster it
        acts for (platforms.json, hyperpod.execution_role_trust: whether HyperPod sends the keys is undocumented)."""
        trust = service_fact("hyperpod", "execution_role_trust").value
        stack = Stack.of(self)
        clusters = trust["cluster_arn"].format(partition=stack.partition, region=stack.region, account=stack.account)
        return iam.ServicePrincipal(
            trust["service"],
            conditions={
                "StringEqualsIfExists": {"aws:SourceAccount": stack.account},
                "ArnLikeIfExists": {"aws:SourceArn": clusters},
            },
        )

    def _ecr_statements(self) -> list[iam.PolicyStatement]:
        """What EKS nodes need to pull the add-ons' images and HyperPod's from AWS's registries: of any region, as
        AWS's reference execution role grants (the EFA plugin's image is in one region's registry whatever the
        cluster's; platforms.json, hyperpod.execution_role_eks_actions)."""
        repositories = Stack.of(self).format_arn(
            service="ecr", region="*", account="*", resource="repository", resource_name="*"
        )
        return [
            iam.PolicyStatement(actions=list(acknowledgements.HYPERPOD_ECR_TOKEN), resources=["*"]),
            iam.PolicyStatement(
                actions=[
                    a for a in acknowledgements.HYPERPOD_ECR_ACTIONS if a not in acknowledgements.HYPERPOD_ECR_TOKEN
                ],
                resources=[repositories],
            ),
        ]

    def _vpc_statements(self) -> list[iam.PolicyStatement]:
        """What HyperPod does in the cluster's VPC with the execution role: its nodes' interfaces, nothing else."""
        stack = Stack.of(self)
        subnet = stack.format_arn(service="ec2", resource="subnet", resource_name=self._props.subnet.subnet_id)
        vpc = stack.format_arn(service="ec2", resource="vpc", resource_name=self._props.vpc.vpc_id)
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        groups = stack.format_arn(service="ec2", resource="security-group", resource_name="*")
        return [
            # Describe calls take no resource scope.
            iam.PolicyStatement(actions=list(acknowledgements.HYPERPOD_DESCRIBE_ACTIONS), resources=["*"]),
            # New interfaces only in the compute subnet, with security groups of the cluster's VPC.
            iam.PolicyStatement(
                actions=list(acknowledgements.HYPERPOD_INTERFACE_CREATE),
                resources=[subnet, interfaces, groups],
                conditions={"ArnEquals": {"ec2:Vpc": vpc}},
            ),
            # Changes only to interfaces in the compute subnet.
            iam.PolicyStatement(
                actions=list(acknowledgements.HYPERPOD_INTERFACE_ACTIONS),
                resources=[interfaces],
                conditions={"ArnEquals": {"ec2:Subnet": subnet}},
            ),
            # Tags only while creating an interface.
            iam.PolicyStatement(
                actions=list(acknowledgements.HYPERPOD_INTERFACE_TAGS),
                resources=[interfaces],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
            ),
        ]

    def _group(self, group: HyperPodInstanceGroup) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=hyperpod_type_name(group.instance_type),
            instance_count=group.count,
            execution_role=self.role.role_arn,
            image_id=self._props.image_id,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.source_s3_uri, on_create=self._props.lifecycle.entry_point
            ),
            # One thread per core on accelerated nodes: training wants the cores, not hyperthreads.
            threads_per_core=1 if group.accelerated else None,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.storage_gib
                    )
                )
            ],
            on_start_deep_health_checks=DEEP_HEALTH_CHECKS
            if group.accelerated and self._props.deep_health_checks
            else None,
            kubernetes_config=self._kubernetes_config(group) if self._props.orchestrator == "eks" else None,
        )

    @staticmethod
    def _kubernetes_config(group: HyperPodInstanceGroup) -> sagemaker.CfnCluster.ClusterKubernetesConfigProperty:
        """Label the group's EKS nodes as kiln labels its own node groups: by group, and GPU nodes as such (what
        kiln's GPU add-ons, the DCGM exporter among them, select)."""
        labels = {NODE_GROUP_LABEL: group.name}
        if catalog_instance_type(group.instance_type).gpu_count:
            labels |= GPU_PRESENT_LABEL
        return sagemaker.CfnCluster.ClusterKubernetesConfigProperty(labels=labels)
