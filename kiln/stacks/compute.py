"""ComputeStack: the scheduler backend the spec names, with nodes booting kiln's bootstrap."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.constructs import (
    BootstrapAssets,
    BootstrapAssetsProps,
    DataBucket,
    DataBucketProps,
    EksObservability,
    EksTrainingCluster,
    GrafanaWorkspace,
    GrafanaWorkspaceProps,
    HyperPodCluster,
    NodeBootstrap,
    ParallelCluster,
    PcsCluster,
    attachable_policy,
)
from kiln.constructs.eks_scheduling import CLUSTER_AUTOSCALER_FACTS
from kiln.constructs.session_logs import SessionLogs, SessionLogsProps
from kiln.contracts.backends import BACKENDS, EKS, PARALLELCLUSTER, PCS
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import session_document
from kiln.node_config.budget import eks_node_provision_seconds, parallelcluster_timeouts
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.compute_context import ComputeContext, cluster_placement_groups
from kiln.stacks.eks import eks_observability_props, eks_props
from kiln.stacks.hyperpod import hyperpod_props
from kiln.stacks.image import ImageStack
from kiln.stacks.network import NetworkStack
from kiln.stacks.parallelcluster import parallelcluster_props
from kiln.stacks.pcs import pcs_ami, pcs_cluster_props
from kiln.stacks.retention import retention
from kiln.stacks.storage import StorageStack


def has_compute(spec: ClusterSpec) -> bool:
    """Return whether kiln builds a compute stack for SPEC."""
    return spec.compute.backend in BACKENDS


class ComputeStack(cdk.Stack):
    """The spec's compute backend: AWS PCS, ParallelCluster, SageMaker HyperPod (Slurm or EKS) or EKS."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: ClusterSpec,
        network: NetworkStack,
        storage: StorageStack,
        image: ImageStack | None = None,
        ci: CiEnvironment | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope, construct_id, description=f"kiln {spec.name}: compute ({spec.compute.backend})", **kwargs
        )
        if not has_compute(spec):
            raise ValueError(f"compute.backend: got {spec.compute.backend!r}; allowed here: {', '.join(BACKENDS)}")
        config = config_from_spec(spec)
        context = ComputeContext(
            spec=spec,
            network=network,
            storage=storage,
            ci=ci,
            image_id=self._node_image(spec, image),
            agent_workspace=storage.prometheus if config.prometheus_agent else None,
            placement_groups=cluster_placement_groups(self, spec),
        )
        self.spec = spec
        self.ci = ci
        self.context = context
        self.pcs: PcsCluster | None = None
        self.parallelcluster: ParallelCluster | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.eks: EksTrainingCluster | None = None
        # The one rendered bundle of this spec's nodes (HyperPod's lifecycle scripts included).
        self.bootstrap = BootstrapAssets(self, "Bootstrap", BootstrapAssetsProps(config=config))
        nodes: NodeBootstrap = self.bootstrap.node_bootstrap
        platform = spec.platform
        self.session_logs = self._session_logs()
        if platform is PCS:
            props = pcs_cluster_props(context, bootstrap=nodes, ami_id=pcs_ami(self, context))
            self.pcs = PcsCluster(self, "Pcs", props)
        elif platform is PARALLELCLUSTER:
            self.parallelcluster = ParallelCluster(
                self,
                "ParallelCluster",
                parallelcluster_props(
                    context,
                    bootstrap=nodes,
                    bootstrap_timeouts=parallelcluster_timeouts(spec, config),
                    head_node_policies=self._agent_policies(context),
                    node_policies=[self.session_logs.attachable_node_policy()] if self.session_logs else [],
                    bootstrap_bucket=self._ci_lifecycle_bucket(),
                ),
            )
        elif platform is EKS:
            props = eks_props(
                context,
                bootstrap=nodes,
                admin_role=self._ci_admin(),
                node_provision_seconds=eks_node_provision_seconds(
                    spec, config, CLUSTER_AUTOSCALER_FACTS["default_provision_seconds"]
                ),
            )
            self.eks = EksTrainingCluster(self, "Eks", props)
        else:
            if platform.uses_kubernetes:
                self.eks = EksTrainingCluster(
                    self, "Eks", eks_props(context, bootstrap=None, admin_role=self._ci_admin())
                )
            eks_cluster = self.eks.cluster if self.eks else None
            props = hyperpod_props(
                context, lifecycle=nodes, eks_cluster=eks_cluster, lifecycle_bucket=self._ci_lifecycle_bucket()
            )
            self.hyperpod = HyperPodCluster(self, "HyperPod", props)
            if self.eks is not None:
                # HyperPod's nodes join as EKS workers: the CNI's identity must exist before the first one, and
                # HyperPod's dependencies must be installed before the cluster is created.
                self.hyperpod.cluster.node.add_dependency(self.eks.cni_identity, self.eks.pod_identity_agent)
                if self.eks.hyperpod_dependencies_ready is not None:
                    self.hyperpod.cluster.node.add_dependency(self.eks.hyperpod_dependencies_ready)
        self._place_node_groups(context)
        self._grant_agent(context)
        self._grant_session_logs()
        self._observability(storage)
        self._outputs()

    def _place_node_groups(self, context: ComputeContext) -> None:
        """Each node group names its placement group in DependsOn. Its launch template refers to the group, but when a
        change replaces the node group (kept launch template) and drops the placement group, only a direct dependency
        makes CloudFormation delete the old node group, and so its instances, first: "resource A is deleted before
        resource B" (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-dependson.html),
        and EC2 deletes no placement group that holds an instance
        (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/delete-placement-group.html)."""
        backend = self.pcs or self.eks
        node_groups = backend.node_groups if backend is not None else {}
        for name, placement in context.placement_groups.items():
            node_groups[name].node.add_dependency(placement)

    def _agent_policies(self, context: ComputeContext) -> list[iam.IManagedPolicy]:
        """ParallelCluster's head node runs the agent: a managed policy letting it write to the workspace."""
        workspace = context.agent_workspace
        if workspace is None:
            return []
        policy = attachable_policy(
            self,
            "MetricsWriter",
            description=f"kiln {self.spec.name}: the head node's Prometheus agent writes to the metrics workspace",
            statements=workspace.remote_write_statements(),
        )
        return [policy]

    def _grant_agent(self, context: ComputeContext) -> None:
        """PCS and HyperPod give all their nodes one role: the node running the agent writes through it."""
        workspace = context.agent_workspace
        if workspace is None:
            return
        role = self.pcs.role if self.pcs is not None else self.hyperpod.role if self.hyperpod is not None else None
        if role is not None:
            workspace.grant_remote_write(role)

    def _session_logs(self) -> SessionLogs | None:
        """The cluster's own Session document with session logging (spec session_logs), on the backends whose users
        reach the nodes through a Session Manager shell; the spec rules refuse it where Kubernetes is the way in."""
        wanted = self.spec.session_logs
        if wanted is None:
            return None
        if self.spec.platform.uses_kubernetes:
            raise ValueError(f"session_logs: not available on {self.spec.platform.label} (no Session Manager shell)")
        bucket = None
        if wanted.destination == "s3":
            # By its name, known at synthesis (the spec rules require storage.bucket.name; a CI environment names its
            # own): the policy's object ARN is then this stack's own, reviewed as cdk-nag names it.
            name = self.ci.bucket_name("data") if self.ci is not None else self.spec.storage.bucket.name
            bucket = s3.Bucket.from_bucket_name(self, "SessionLogBucket", name)
        props = SessionLogsProps(
            document_name=session_document(self.spec.name),
            destination=wanted.destination,
            bucket=bucket,
            retain=retention(self.spec).data,
        )
        session_logs = SessionLogs(self, "SessionLogs", props)
        cdk.CfnOutput(
            self,
            ComputeOutput.SESSION_KEY_ARN.value,
            value=session_logs.key.key_arn,
            description=f"Sessions with {props.document_name} are encrypted with it: kms:GenerateDataKey to start one",
        )
        return session_logs

    def _grant_session_logs(self) -> None:
        """PCS and HyperPod give all their nodes one role, with which SSM Agent logs a session: grant it there.
        ParallelCluster's nodes got the managed policy as their AdditionalIamPolicies (attachable_node_policy)."""
        role = self.pcs.role if self.pcs is not None else self.hyperpod.role if self.hyperpod is not None else None
        if self.session_logs is not None and role is not None:
            self.session_logs.attach_node_policy(role)

    def _observability(self, storage: StorageStack) -> None:
        """Exporters on EKS (Helm charts and AMP's collector) and the Grafana workspace with kiln's dashboards."""
        wanted = self.spec.observability
        self.eks_observability: EksObservability | None = None
        self.grafana: GrafanaWorkspace | None = None
        if wanted is None:
            return
        props = eks_observability_props(self.context, self.eks.cluster) if self.eks is not None else None
        if props is not None:
            self.eks_observability = EksObservability(self, "Observability", props)
        if wanted.grafana and storage.prometheus is not None:
            workspace = storage.prometheus
            self.grafana = GrafanaWorkspace(
                self,
                "Grafana",
                GrafanaWorkspaceProps(
                    name=f"{self.spec.name}-dashboards",
                    prometheus_workspace_arn=workspace.workspace_arn,
                    prometheus_endpoint=workspace.prometheus_endpoint,
                    prometheus_key_arn=workspace.key.key_arn,
                ),
            )
            cdk.CfnOutput(self, "GrafanaUrl", value=self.grafana.url)

    def _node_image(self, spec: ClusterSpec, image: ImageStack | None) -> str | None:
        """Return the AMI nodes boot: the newest image the image stack baked (read at each deploy), else ami_id. On
        ParallelCluster only the queues boot the bake (kiln.stacks.parallelcluster): an update never changes the
        head node's or login nodes' image."""
        if image is None:
            return spec.compute.image.ami_id
        self.add_stack_dependency(image)
        parameter = cdk.CfnParameter(
            self,
            "BakedImageId",
            type="AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
            default=image.parameter_name,
            description=f"The parameter holding the newest AMI baked by {image.stack_name} (`kiln ami build`)",
        )
        return parameter.value_as_string

    def _ci_admin(self) -> iam.IRole | None:
        if self.ci is None or self.ci.admin_role_arn is None:
            return None
        return iam.Role.from_role_arn(self, "CiAdminRole", self.ci.admin_role_arn, mutable=False)

    def _ci_lifecycle_bucket(self) -> s3.IBucket | None:
        """The bucket of the node scripts the stack deploys (HyperPod's lifecycle scripts, ParallelCluster's
        OnNodeConfigured script) in a CI environment; elsewhere none, and the construct makes its own."""
        # A short-lived environment names its buckets, so its reaper may empty them (kiln.stacks.ci_mode).
        if self.ci is None:
            return None
        props = DataBucketProps(
            bucket_name=self.ci.bucket_name("lifecycle"),
            access_log_bucket_name=self.ci.bucket_name("lifecycle-logs"),
            retain=False,
            access_log_prefix="lifecycle-bucket/",
        )
        return DataBucket(self, "LifecycleBucket", props).bucket

    def _outputs(self) -> None:
        """Name the cluster in outputs with fixed keys: `kiln ci` finds its head node and readiness by them."""
        values = {
            ComputeOutput.BACKEND: self.spec.compute.backend,
            ComputeOutput.ORCHESTRATOR: self.spec.effective_orchestrator or "none",
            ComputeOutput.CLUSTER_NAME: self.spec.name,
        }
        if self.pcs is not None:
            values[ComputeOutput.PCS_CLUSTER_ID] = self.pcs.cluster.attr_id
            if self.pcs.login_group is not None:
                values[ComputeOutput.PCS_LOGIN_NODE_GROUP_ID] = self.pcs.login_group.attr_id
        if self.hyperpod is not None:
            values[ComputeOutput.HYPERPOD_CLUSTER_ARN] = self.hyperpod.cluster.attr_cluster_arn
        if self.eks is not None:
            values[ComputeOutput.EKS_CLUSTER_NAME] = self.eks.cluster.cluster_name
        for key, value in values.items():
            cdk.CfnOutput(self, key.value, value=value)
