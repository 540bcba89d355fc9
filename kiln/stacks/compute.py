"""ComputeStack: the scheduler backend the spec names, with nodes booting kiln's bootstrap; the platform's builder
(kiln.stacks.backends) adds its constructs, and the stack wires what it returns the same way for every platform."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.constructs import (
    BootstrapAssets,
    BootstrapAssetsProps,
    EksObservability,
    GrafanaWorkspace,
    GrafanaWorkspaceProps,
)
from kiln.constructs.session_logs import SessionLogs, SessionLogsProps
from kiln.contracts.backends import BACKENDS
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import session_document
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec
from kiln.stacks.backends import BackendBuild, builder_for
from kiln.stacks.backends.eks import eks_observability_props
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.compute_context import ComputeContext, cluster_placement_groups
from kiln.stacks.errors import UnbuildableSpec
from kiln.stacks.image import ImageStack
from kiln.stacks.network import NetworkStack
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
            raise UnbuildableSpec(f"compute.backend: got {spec.compute.backend!r}; allowed here: {', '.join(BACKENDS)}")
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
        self.config = config
        self.context = context
        # The one rendered bundle of this spec's nodes (HyperPod's lifecycle scripts included).
        self.bootstrap = BootstrapAssets(self, "Bootstrap", BootstrapAssetsProps(config=config))
        self.session_logs = self._session_logs()
        # What the platform's builder made: its construct (backend.construct), node role, node groups and outputs.
        self.backend: BackendBuild[Construct] = builder_for(spec.platform)(self, context, self.bootstrap.node_bootstrap)
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
        for name, placement in context.placement_groups.items():
            self.backend.node_groups[name].node.add_dependency(placement)

    def _grant_agent(self, context: ComputeContext) -> None:
        """PCS and HyperPod give all their nodes one role: the node running the agent writes through it
        (ParallelCluster's head node has a managed policy from its builder)."""
        workspace = context.agent_workspace
        if workspace is None:
            return
        role = self.backend.node_role
        if role is not None:
            workspace.grant_remote_write(role)

    def _session_logs(self) -> SessionLogs | None:
        """The cluster's own Session document with session logging (spec session_logs), on the backends whose users
        reach the nodes through a Session Manager shell; the spec rules refuse it where Kubernetes is the way in."""
        wanted = self.spec.session_logs
        if wanted is None:
            return None
        if self.spec.platform.uses_kubernetes:
            raise UnbuildableSpec(
                f"session_logs: not available on {self.spec.platform.label} (no Session Manager shell)"
            )
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
        role = self.backend.node_role
        if self.session_logs is not None and role is not None:
            self.session_logs.attach_node_policy(role)

    def _observability(self, storage: StorageStack) -> None:
        """Exporters on EKS (Helm charts and AMP's collector) and the Grafana workspace with kiln's dashboards."""
        wanted = self.spec.observability
        self.eks_observability: EksObservability | None = None
        self.grafana: GrafanaWorkspace | None = None
        if wanted is None:
            return
        eks = self.backend.eks
        props = eks_observability_props(self.context, eks.cluster) if eks is not None else None
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
        ParallelCluster only the queues boot the bake (kiln.stacks.backends.parallelcluster): an update never changes
        the head node's or login nodes' image."""
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

    def _outputs(self) -> None:
        """Name the cluster in outputs with fixed keys: `kiln ci` finds its head node and readiness by them."""
        values = {
            ComputeOutput.BACKEND: self.spec.compute.backend,
            ComputeOutput.ORCHESTRATOR: self.spec.effective_orchestrator or "none",
            ComputeOutput.CLUSTER_NAME: self.spec.name,
        }
        values.update(self.backend.outputs)
        for key, value in values.items():
            cdk.CfnOutput(self, key.value, value=value)
