"""ParallelCluster: an AWS ParallelCluster 3 cluster deployed through its CloudFormation provider.

ParallelCluster takes a changed configuration as an update only where each changed setting's update policy allows
it (platforms.json, parallelcluster.update_policies). So that a changed bundle, pin or kiln release is no change
at all, every node's OnNodeConfigured action is the frozen resolve-bootstrap.sh with stable arguments (the region,
an SSM parameter's name and the node's role): the parameter, which the stack rewrites at each deploy, names the
current fetch.sh and bundle with their digests. ParallelCluster runs that script as root without a check of its own,
so it lives in a bucket of the cluster's own that only the stack's deployment writes, under a key named by its
digest; fetch.sh and the bundle, which are checked against the parameter's digests before they run, stay in CDK's
asset bucket. Likewise the head node and login pools boot an image that never changes (custom_ami, or
ParallelCluster's official one), and an image that may change between deploys, such as the newest bake, goes to the
queues alone (compute_ami), whose nodes an update replaces as their jobs finish.
kiln.changes.parallelcluster says which changes to a cluster's configuration an update would refuse (`kiln diff`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aws_cdk import Aws, CfnOutput, CustomResource, Fn, Stack
from aws_cdk import aws_cloudformation as cfn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_s3_deployment as s3_deployment
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kiln.bootstrap.fetch import FETCH_SCRIPT, RESOLVE_SCRIPT, file_sha256, node_manifest
from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.limits import (
    HEALTH_CHECK_INTERVAL_S,
    PARALLELCLUSTER_MAX_CONFIG_TAGS,
    PARALLELCLUSTER_PROVIDER_TAGS,
    SERVICE_NODE_ROOT_VOLUME_GIB,
    in_range,
)
from kiln.catalog.platforms import service_fact
from kiln.constructs import acknowledgements
from kiln.constructs._checks import require, require_in, require_node_group, unresolved
from kiln.constructs.bucket import DataBucket, DataBucketProps
from kiln.constructs.children import l1_of
from kiln.constructs.launch_template import CapacityOption
from kiln.constructs.lustre import ILustreFileSystem
from kiln.constructs.node_access import ssm_agent_statements
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.node_scripts import deploy_node_scripts
from kiln.constructs.review import acknowledge, acknowledge_wildcards
from kiln.contracts.bundle import HEALTH_CHECK_PROGRAM

# The one place the ParallelCluster version is pinned: provider template, schema in tests, Makefile.
PARALLELCLUSTER_VERSION = "3.16.1"
PROVIDER_TEMPLATE = (
    "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
    "/parallelcluster/{version}/templates/custom_resource/cluster.yaml"
)
# With a permissions boundary the provider runs as a role of kiln's (its CustomLambdaRole parameter, documented at
# https://docs.aws.amazon.com/parallelcluster/latest/ug/cfn-provider-stack.html): what its own PclusterLambdaRole holds,
# which it then does not create, with the policies from ParallelCluster's policies template (platforms.json,
# parallelcluster.provider_custom_role), deployed by kiln with the boundary.
PROVIDER_ROLE: dict[str, Any] = dict(service_fact("parallelcluster", "provider_custom_role").value)
POLICIES_TEMPLATE = PROVIDER_TEMPLATE.split("/parallelcluster/", 1)[0] + "/" + PROVIDER_ROLE["policies_template"]
OperatingSystem = Literal["ubuntu2204", "ubuntu2404", "al2023"]
# kiln's OS names in ParallelCluster's Image.Os words.
OPERATING_SYSTEMS: dict[str, str] = {"ubuntu2204": "ubuntu2204", "ubuntu2404": "ubuntu2404", "al2023": "alinux2023"}
CLUSTER_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,59}$")
OPEN_TO_ALL = ("0.0.0.0/0", "::/0")
# The provider's Lambda role attaches a cluster's AdditionalIamPolicies only when their ARN is like these (besides ten
# AWS managed policies): kiln's own policies take the path below instead of widening that role. Its default role and
# kiln's bounded one (ParallelCluster._provider_role) hold the same DefaultParallelClusterIamAdminPolicy, which with a
# boundary also requires it on the role attached to: every cluster role carries it (Iam/PermissionsBoundary).
ATTACHABLE_POLICIES: tuple[str, ...] = tuple(service_fact("parallelcluster", "provider_attachable_policies").value)
ATTACHABLE_PATH = "/parallelcluster/"
# The DevSettings/Timeouts a cluster may set (platforms.json): how long a node's setup may take.
BOOTSTRAP_TIMEOUTS = tuple(
    service_fact("parallelcluster", key).value["property"].rsplit("/", 1)[-1]
    for key in ("head_node_bootstrap_timeout", "compute_node_bootstrap_timeout")
)
# Scheduling/SlurmSettings/QueueUpdateStrategy: its values, and kiln's (DRAIN: running jobs finish first).
QUEUE_UPDATE_STRATEGIES: tuple[str, ...] = tuple(
    service_fact("parallelcluster", "queue_update_strategy").value["allowed"]
)
DEFAULT_QUEUE_UPDATE_STRATEGY: str = service_fact("parallelcluster", "queue_update_strategy").value["kiln"]
# The SlurmQueues setting that gives each job of the queue whole nodes (platforms.json): on for Neuron types.
JOB_EXCLUSIVE_ALLOCATION: str = service_fact("parallelcluster", "job_exclusive_allocation").value
# ParallelCluster's GPU health check (DCGM, in its Prolog) and where it is set (platforms.json, gpu_health_checks).
GPU_HEALTH_CHECKS: dict[str, str] = dict(service_fact("parallelcluster", "gpu_health_checks").value)
# Where Slurm's health check parameters go (CustomSlurmSettings, whose deny-list names none of them) and their names:
# HealthCheckProgram, HealthCheckInterval, HealthCheckNodeState (platforms.json, health_check_settings).
HEALTH_CHECK_SETTINGS: dict[str, Any] = dict(service_fact("parallelcluster", "health_check_settings").value)
CUSTOM_SLURM_SETTINGS = HEALTH_CHECK_SETTINGS["where"].rsplit("/", 1)[-1]
# Where an AMI may be set and its update policy: only the queues' image can change on a running cluster.
AMI_SETTINGS: dict[str, str] = dict(service_fact("parallelcluster", "ami_settings").value)
# Where the stack deploys every node's OnNodeConfigured Script in the cluster's bootstrap bucket: named by the script's
# digest, so the Script URL stays the same from deploy to deploy while the script does (it is frozen).
BOOTSTRAP_PREFIX = "kiln-bootstrap/"
RESOLVE_SCRIPT_NAME = f"resolve-bootstrap-{file_sha256(RESOLVE_SCRIPT)}.sh"


def _template_url(template: str) -> str:
    """Return TEMPLATE's URL (PROVIDER_TEMPLATE or POLICIES_TEMPLATE) for the pinned ParallelCluster version."""
    return Fn.sub(template.replace("{version}", PARALLELCLUSTER_VERSION))


def attachable_policy(scope: Construct, construct_id: str, **kwargs: Any) -> iam.ManagedPolicy:
    """Return a managed policy the ParallelCluster provider's Lambda role may attach to cluster roles."""
    return iam.ManagedPolicy(scope, construct_id, path=ATTACHABLE_PATH, **kwargs)


def is_attachable(policy: iam.IManagedPolicy) -> bool:
    """Return whether the provider's default Lambda role may attach POLICY (kiln's path, or a matching ARN)."""
    if isinstance(policy, iam.ManagedPolicy):
        return l1_of(policy, iam.CfnManagedPolicy).path == ATTACHABLE_PATH
    arn = policy.managed_policy_arn
    if unresolved(arn):
        return False
    # ARN patterns with ${AWS::Partition} and ${AWS::AccountId}: any partition and account.
    patterns = [re.sub(r"\$\{AWS::[A-Za-z]+\}", "*", pattern) for pattern in ATTACHABLE_POLICIES]
    return any(fnmatch.fnmatchcase(arn, pattern) for pattern in patterns)


@dataclass(frozen=True, kw_only=True)
class SlurmQueue:
    """One Slurm queue with one compute resource.

    name: queue name (lowercase letters, digits, '-').
    instance_type: its EC2 type; EFA is on whenever the type supports it.
    min_count: static nodes; default 0 (capacity blocks need min_count == max_count > 0).
    max_count: the most nodes; default 1.
    capacity: on-demand (default), spot, capacity-block or reservation.
    placement_group: a cluster placement group for the queue; default True.
    root_volume_gib: encrypted gp3 root volume; default 200.
    """

    name: str
    instance_type: str
    min_count: int = 0
    max_count: int = 1
    capacity: CapacityOption = field(default_factory=CapacityOption)
    placement_group: bool = True
    root_volume_gib: int = 200

    def __post_init__(self) -> None:
        require_node_group(self, self.name, self.min_count, self.max_count, what="queue name")
        catalog_instance_type(self.instance_type)
        if self.capacity.type == "capacity-block":
            require(
                self,
                self.min_count == self.max_count > 0,
                "min_count/max_count",
                (self.min_count, self.max_count),
                "equal and above 0 for a capacity block (ParallelCluster runs them as static nodes)",
            )

    @property
    def efa(self) -> bool:
        return catalog_instance_type(self.instance_type).efa_supported

    @property
    def gpus(self) -> bool:
        """The type has NVIDIA GPUs: ParallelCluster's GPU health check has something to check."""
        return catalog_instance_type(self.instance_type).gpu_count > 0

    @property
    def whole_nodes(self) -> bool:
        """One job per node: a type with Neuron devices, whose GRES ParallelCluster neither declares nor lets kiln
        declare (platforms.json, parallelcluster.job_exclusive_allocation)."""
        return catalog_instance_type(self.instance_type).neuron_count > 0


@dataclass(frozen=True, kw_only=True)
class ParallelClusterProps:
    """Props for ParallelCluster.

    cluster_name: the ParallelCluster name (must differ from the stack name).
    subnet: private subnet of the head node, queues and login nodes.
    queues: the Slurm queues.
    bootstrap: the bundle every node runs as its OnNodeConfigured action (BootstrapAssets.node_bootstrap for
        kiln's `parallelcluster` bundle). It, its digest and cluster_env go into the bootstrap parameter a node reads
        when it boots: running nodes keep the bundle they booted with, nodes that boot after a deploy get that
        deploy's; a node refuses a zip whose content does not match the digest.
    cluster_env: the bundle's deploy-time values.
    head_node_instance_type: the head node's EC2 type; default m5.8xlarge.
    login_instance_type: the login pool's EC2 type; default m5.2xlarge.
    login_count: the login pool's nodes, 0 for no pool; default 1.
    os: ubuntu2204 (default), ubuntu2404 or al2023.
    custom_ami: the AMI every node boots instead of ParallelCluster's official one for os (Image/CustomAmi): the
        head node and login pools always, the queues unless compute_ami. ParallelCluster never changes it on an
        existing cluster (update policy UNSUPPORTED), so it must be a literal AMI id; default none: the official AMI,
        which ParallelCluster looks up when it creates the cluster and keeps for the cluster's life.
    compute_ami: the AMI the queues boot instead (Scheduling/SlurmQueues/Image/CustomAmi), which may change from
        one deploy to the next (a deploy-time value such as the newest baked image's SSM parameter): its update
        policy is QUEUE_UPDATE_STRATEGY, so with DRAIN a new image replaces each queue's nodes as their jobs finish.
        Default none: the queues boot the head node's image (custom_ami, or the official one).
    file_system: an FSx for Lustre file system (LustreFileSystem, or from_lustre_attributes) mounted at
        fsx_mount_dir; default none: the nodes mount no shared file system.
    fsx_mount_dir: where file_system is mounted on every node; default /fsx.
    security_groups: added to every node (e.g. one the file system admits); default none: the nodes join
        only the groups ParallelCluster makes.
    ssh_allowed_ips: the CIDR (or prefix list) that may reach the head and login nodes over SSH; ParallelCluster's
        own default is 0.0.0.0/0, so it is required (the VPC's CIDR, say).
    head_node_policies: managed policies for the head node alone (e.g. writing to a Prometheus workspace). The
        provider's Lambda role attaches only policies ParallelCluster's own policy lets it (ATTACHABLE_POLICIES):
        make them with attachable_policy (path /parallelcluster/). Default none: the head node has
        ParallelCluster's own policies only.
    node_policies: managed policies for every node, head, login pools and queues alike (e.g. Session Manager's
        session logging, which any node a session reaches needs); attachable as head_node_policies. Default
        none: ParallelCluster's own policies only.
    scaledown_idle_minutes: idle time before dynamic nodes stop; default 10.
    queue_update_strategy: how an update replaces the nodes of queues whose settings changed: DRAIN (default:
        running jobs finish, then the nodes are replaced), TERMINATE (running jobs are killed) or
        COMPUTE_FLEET_STOP (such an update needs the fleet stopped).
    slurm_settings: further Scheduling.SlurmSettings entries; default none: ParallelCluster's own
        values beside the ones these props set (ScaledownIdletime, QueueUpdateStrategy, CustomSlurmSettings).
    health_check_interval_s: Slurm runs kiln's node health check (HEALTH_CHECK_PROGRAM, which the bundle writes on
        every compute node) as its HealthCheckProgram every this many seconds on every node in any state
        (CustomSlurmSettings); the check drains a failing node, which ParallelCluster then replaces. Default none: no
        HealthCheckProgram.
    gpu_health_checks: ParallelCluster's GPU health check (HealthChecks/Gpu/Enabled) on each queue of a type with
        NVIDIA GPUs; default False.
    bootstrap_timeouts: DevSettings/Timeouts in seconds (HeadNodeBootstrapTimeout, ComputeNodeBootstrapTimeout),
        long enough for the nodes' setup; unset: ParallelCluster's defaults.
    delete_with_stack: delete the cluster with the stack (default True; data lives in FSx and S3).
    bootstrap_bucket: where the stack deploys resolve-bootstrap.sh, every node's OnNodeConfigured Script, which
        ParallelCluster runs as root unchecked: give a bucket only this stack writes (kiln's CI environments pass
        one named for their reaper). Default a bucket of its own, emptied and deleted with the stack.
    permissions_boundary: the ARN of the managed policy every role ParallelCluster creates for the cluster carries
        (its cluster configuration's Iam/PermissionsBoundary); with one, the provider runs as a role of the stack's
        own from ParallelCluster's policies template given this boundary (its CustomLambdaRole), and makes no role of
        its own. Default none: no boundary, and the provider makes its own role.
    tags: the cluster configuration's Tags (the spec's and kiln:cluster, say), which ParallelCluster puts on the
        instances and volumes of the head node, the login pools and the queues (their launch templates'
        TagSpecifications) and, as its own stack's tags, on what that stack makes; not on the network interfaces a
        queue's or login pool's launch makes. The provider adds the custom resource's stack's tags, a key given here
        winning. A change is an update (Tags: SUPPORTED_UNLESS_ADC, outside the us-iso regions); nodes launched after
        it carry the new tags. Default none: only the tags ParallelCluster and the stack add.
    """

    cluster_name: str
    subnet: ec2.ISubnet
    queues: Sequence[SlurmQueue]
    bootstrap: NodeBootstrap
    cluster_env: Mapping[str, str]
    ssh_allowed_ips: str
    head_node_instance_type: str = "m5.8xlarge"
    login_instance_type: str = "m5.2xlarge"
    login_count: int = 1
    os: OperatingSystem = "ubuntu2204"
    custom_ami: str | None = None
    compute_ami: str | None = None
    file_system: ILustreFileSystem | None = None
    fsx_mount_dir: str = "/fsx"
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    head_node_policies: Sequence[iam.IManagedPolicy] = ()
    node_policies: Sequence[iam.IManagedPolicy] = ()
    scaledown_idle_minutes: int = 10
    queue_update_strategy: str = DEFAULT_QUEUE_UPDATE_STRATEGY
    slurm_settings: Mapping[str, Any] = field(default_factory=dict)
    health_check_interval_s: int | None = None
    gpu_health_checks: bool = False
    bootstrap_timeouts: Mapping[str, int] = field(default_factory=dict)
    delete_with_stack: bool = True
    bootstrap_bucket: s3.IBucket | None = None
    permissions_boundary: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(
            self,
            bool(CLUSTER_NAME.match(self.cluster_name)),
            "cluster_name",
            self.cluster_name,
            "a letter, then up to 59 letters, digits or '-'",
        )
        require(self, bool(self.queues), "queues", list(self.queues), "at least one queue")
        most_tags = PARALLELCLUSTER_MAX_CONFIG_TAGS - PARALLELCLUSTER_PROVIDER_TAGS
        require(self, len(self.tags) <= most_tags, "tags", len(self.tags), f"at most {most_tags}")
        names = [q.name for q in self.queues]
        require(self, len(set(names)) == len(names), "queue names", names, "unique names")
        require_in(self, "os", self.os, OPERATING_SYSTEMS)
        require(self, self.login_count >= 0, "login_count", self.login_count, "0 or more")
        require(
            self, self.scaledown_idle_minutes >= 1, "scaledown_idle_minutes", self.scaledown_idle_minutes, "1 or more"
        )
        require_in(self, "queue_update_strategy", self.queue_update_strategy, QUEUE_UPDATE_STRATEGIES)
        require(
            self,
            self.custom_ami is None or not unresolved(self.custom_ami),
            "custom_ami",
            self.custom_ami,
            f"a literal AMI id: an update never changes Image/CustomAmi ({AMI_SETTINGS['Image/CustomAmi']}), so a "
            "value read at deploy would fail the first deploy after it changed; give such an image as compute_ami",
        )
        require(
            self,
            "QueueUpdateStrategy" not in self.slurm_settings,
            "slurm_settings",
            sorted(self.slurm_settings),
            "settings other than QueueUpdateStrategy (set queue_update_strategy)",
        )
        require(
            self,
            self.health_check_interval_s is None or CUSTOM_SLURM_SETTINGS not in self.slurm_settings,
            "slurm_settings",
            sorted(self.slurm_settings),
            f"no {CUSTOM_SLURM_SETTINGS} beside health_check_interval_s (which sets them)",
        )
        if self.health_check_interval_s is not None:
            low, high = HEALTH_CHECK_INTERVAL_S
            require(
                self,
                in_range(self.health_check_interval_s, low, high),
                "health_check_interval_s",
                self.health_check_interval_s,
                f"from {low} to {high} seconds",
            )
        if not unresolved(self.ssh_allowed_ips):
            require(
                self,
                self.ssh_allowed_ips not in OPEN_TO_ALL,
                "ssh_allowed_ips",
                self.ssh_allowed_ips,
                "a CIDR narrower than the whole internet (the VPC's, or a prefix list)",
            )
        for name, seconds in self.bootstrap_timeouts.items():
            require_in(self, "bootstrap_timeouts", name, BOOTSTRAP_TIMEOUTS)
            require(self, seconds > 0, f"bootstrap_timeouts {name}", seconds, "a positive number of seconds")
        for name, policy in [("head_node_policies", p) for p in self.head_node_policies] + [
            ("node_policies", p) for p in self.node_policies
        ]:
            require(
                self,
                is_attachable(policy),
                name,
                policy.node.path if isinstance(policy, Construct) else policy.managed_policy_arn,
                "a policy the provider may attach: made with attachable_policy (path "
                f"{ATTACHABLE_PATH}), or an ARN matching {' or '.join(ATTACHABLE_POLICIES)}",
            )


class ParallelCluster(Construct):
    """ParallelCluster 3 through its official CloudFormation provider: a nested stack and a Custom::PclusterCluster."""

    def __init__(self, scope: Construct, construct_id: str, props: ParallelClusterProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        require(
            self,
            props.cluster_name != Stack.of(self).stack_name,
            "cluster_name",
            props.cluster_name,
            "a name other than the stack's",
        )
        self.bootstrap_bucket = (
            props.bootstrap_bucket
            or DataBucket(
                self, "BootstrapBucket", DataBucketProps(retain=False, access_log_prefix="bootstrap-bucket/")
            ).bucket
        )
        self.bootstrap_scripts = self._deploy_bootstrap_scripts()
        self.fetch_script = s3_assets.Asset(self, "FetchScript", path=str(FETCH_SCRIPT))
        self.bootstrap_parameter = self._bootstrap_parameter()
        self.bootstrap_read_policy = self._bootstrap_read_policy()
        self.ssm_agent_policy = self._ssm_agent_policy()
        self.config = self._configuration()
        # With a boundary, CloudFormation may create no role without it: the provider then runs as kiln's own role.
        boundary = props.permissions_boundary
        self.provider_role = self._provider_role(boundary) if boundary is not None else None
        self.provider = cfn.CfnStack(
            self,
            "Provider",
            template_url=_template_url(PROVIDER_TEMPLATE),
            parameters={"CustomLambdaRole": self.provider_role.role_arn} if self.provider_role is not None else None,
        )
        self.cluster = CustomResource(
            self,
            "Resource",
            service_token=self.provider.get_att("Outputs.ServiceToken").to_string(),
            resource_type="Custom::PclusterCluster",
            properties={
                "ClusterName": props.cluster_name,
                "ClusterConfiguration": self.config,
                "DeletionPolicy": "Delete" if props.delete_with_stack else "Retain",
            },
        )
        # The OnNodeConfigured Script must be in the bucket before ParallelCluster boots the first node.
        self.cluster.node.add_dependency(self.bootstrap_scripts)
        CfnOutput(self, "HeadNodePrivateIp", value=self.head_node_private_ip, description="Slurm head node")

    @property
    def head_node_private_ip(self) -> str:
        return self.cluster.get_att_string("headNode.privateIpAddress")

    @property
    def resolve_script_url(self) -> str:
        """s3://bucket/key of resolve-bootstrap.sh in the cluster's bootstrap bucket: every node's OnNodeConfigured
        Script."""
        return f"s3://{self.bootstrap_bucket.bucket_name}/{BOOTSTRAP_PREFIX}{RESOLVE_SCRIPT_NAME}"

    def _provider_role(self, boundary: str) -> iam.Role:
        """The provider's Lambda role when permissions boundary BOUNDARY applies (its CustomLambdaRole).

        The provider template's own PclusterLambdaRole, and the role of the policies stack it nests, carry no
        boundary, so CloudFormation under kiln's execution policies may create neither. kiln deploys ParallelCluster's
        policies template itself, with the boundary (its PermissionsBoundaryPolicy: its own role carries it, and its
        IAM-admin policy lets the API make, change and attach policies to only roles that carry it), and gives the
        provider a role of kiln's (the stack's aspect gives it the boundary and tags) holding what PclusterLambdaRole
        holds. Attaching policies to cluster roles stays as ATTACHABLE_POLICIES says: the same
        DefaultParallelClusterIamAdminPolicy grants it, now only on roles carrying the boundary, which every cluster
        role does (Iam/PermissionsBoundary)."""
        stack = Stack.of(self)
        self.provider_policies = cfn.CfnStack(
            self,
            "ProviderPolicies",
            template_url=_template_url(POLICIES_TEMPLATE),
            parameters={
                **PROVIDER_ROLE["policies_parameters"],
                PROVIDER_ROLE["boundary_parameter"]: boundary,
            },
        )
        # The provider's own bucket: CloudFormation names it after the provider's nested stack, <this stack>-...
        bucket = f"arn:{Aws.PARTITION}:s3:::{stack.stack_name.lower()}-*"
        role = iam.Role(
            self,
            "ProviderRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="kiln: ParallelCluster's cluster provider, within the permissions boundary",
            managed_policies=[
                *map(iam.ManagedPolicy.from_aws_managed_policy_name, PROVIDER_ROLE["aws_managed_policies"]),
                *(
                    iam.ManagedPolicy.from_managed_policy_arn(
                        self, f"Provider{output}", self.provider_policies.get_att(f"Outputs.{output}").to_string()
                    )
                    for output in PROVIDER_ROLE["policy_outputs"]
                ),
            ],
            inline_policies={
                "ProviderEventsAndBucket": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=list(PROVIDER_ROLE["events_actions"]),
                            resources=[
                                f"arn:{Aws.PARTITION}:events:{Aws.REGION}:{Aws.ACCOUNT_ID}:"
                                f"{PROVIDER_ROLE['events_resource']}"
                            ],
                        ),
                        iam.PolicyStatement(
                            actions=list(PROVIDER_ROLE["bucket_actions"]), resources=[bucket, f"{bucket}/*"]
                        ),
                    ]
                )
            },
        )
        acknowledge(role, acknowledgements.PCLUSTER_PROVIDER_LOGS)
        acknowledge_wildcards(role, acknowledgements.PCLUSTER_PROVIDER_GRANTS, stack=stack.stack_name.lower())
        return role

    def _deploy_bootstrap_scripts(self) -> s3_deployment.BucketDeployment:
        """Copy resolve-bootstrap.sh into the bootstrap bucket at each deploy, as HyperPod's lifecycle scripts are.

        CDK's asset bucket is shared by every stack of the account and region, and whoever may publish assets may
        overwrite its objects; this bucket is written by this stack's deployment alone
        (kiln.constructs.node_scripts)."""
        return deploy_node_scripts(
            self,
            "BootstrapScripts",
            bucket=self.bootstrap_bucket,
            prefix=BOOTSTRAP_PREFIX,
            sources=[s3_deployment.Source.data(RESOLVE_SCRIPT_NAME, RESOLVE_SCRIPT.read_text())],
        )

    def _on_node_configured(self, role: str) -> dict[str, Any]:
        """Run resolve-bootstrap.sh as ParallelCluster's OnNodeConfigured action, telling the node its role outright.

        Script and Args stay the same whatever the bundle, pins or kiln release (a head node's and a login pool's
        OnNodeConfigured is UNSUPPORTED for updates): the parameter they name holds what changes."""
        # The parameter's name is a Ref: CloudFormation writes this deploy's manifest before it updates the cluster.
        args = [Stack.of(self).region, self.bootstrap_parameter.parameter_name, "--role", role]
        return {"OnNodeConfigured": {"Script": self.resolve_script_url, "Args": args}}

    def _bootstrap_parameter(self) -> ssm.StringParameter:
        """The manifest of this deploy's bootstrap: fetch.sh and the bundle with their digests, and cluster.env."""
        props = self._props
        manifest = node_manifest(
            fetch_url=self.fetch_script.s3_object_url,
            fetch_sha256=file_sha256(FETCH_SCRIPT),
            bundle_url=props.bootstrap.s3_url,
            entry_point=props.bootstrap.entry_point,
            values=props.cluster_env,
            bundle_sha256=props.bootstrap.content_sha256,
        )
        # No fixed name: CloudFormation names it, and the name stays while the parameter is updated in place.
        return ssm.StringParameter(
            self,
            "NodeBootstrap",
            string_value=Stack.of(self).to_json_string(manifest),
            simple_name=True,
            description="kiln: the bootstrap ParallelCluster nodes fetch at boot (rewritten at every deploy)",
        )

    def _bootstrap_read_policy(self) -> iam.ManagedPolicy:
        """Every node reads exactly the parameter, resolve-bootstrap.sh, fetch.sh and the bundle."""
        props = self._props
        objects = [
            self.bootstrap_bucket.arn_for_objects(f"{BOOTSTRAP_PREFIX}{RESOLVE_SCRIPT_NAME}"),
            f"arn:{Aws.PARTITION}:s3:::{self.fetch_script.s3_bucket_name}/{self.fetch_script.s3_object_key}",
        ]
        return attachable_policy(
            self,
            "NodeBootstrapRead",
            description="kiln: ParallelCluster nodes read the bootstrap's parameter, scripts and bundle",
            statements=[
                iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[self.bootstrap_parameter.parameter_arn]),
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[*objects, props.bootstrap.object_arn]),
            ],
        )

    def _ssm_agent_policy(self) -> iam.ManagedPolicy:
        """Every node's SSM Agent: Session Manager and Run Command (kiln ci), not AmazonSSMManagedInstanceCore, in a
        policy the provider may attach (ParallelCluster attaches no SSM policy of its own)."""
        policy = attachable_policy(
            self,
            "NodeSsmAgent",
            description="kiln: ParallelCluster nodes' SSM Agent, for Session Manager and Run Command only",
            statements=ssm_agent_statements(self),
        )
        acknowledge_wildcards(policy, acknowledgements.NODE_SSM_GRANTS)
        return policy

    def _iam(self, policies: Sequence[iam.IManagedPolicy] = ()) -> dict[str, Any]:
        # Attached by ARN: editing the policies' statements changes no setting of the cluster.
        attached = [self.ssm_agent_policy, self.bootstrap_read_policy, *self._props.node_policies, *policies]
        return {"AdditionalIamPolicies": [{"Policy": policy.managed_policy_arn} for policy in attached]}

    def _root_volume(self, size: int) -> dict[str, Any]:
        return {"LocalStorage": {"RootVolume": {"Size": size, "Encrypted": True, "VolumeType": "gp3"}}}

    def _queue(self, queue: SlurmQueue) -> dict[str, Any]:
        props = self._props
        networking: dict[str, Any] = {
            "SubnetIds": [props.subnet.subnet_id],
            "PlacementGroup": {"Enabled": queue.placement_group},
        }
        if props.security_groups:
            networking["AdditionalSecurityGroups"] = [g.security_group_id for g in props.security_groups]
        entry: dict[str, Any] = {
            "Name": queue.name,
            "CapacityType": queue.capacity.purchase_option,
            "Networking": networking,
            "ComputeResources": [
                {
                    "Name": f"{queue.name}-nodes",
                    "InstanceType": queue.instance_type,
                    "MinCount": queue.min_count,
                    "MaxCount": queue.max_count,
                    "Efa": {"Enabled": queue.efa},
                }
            ],
            "ComputeSettings": self._root_volume(queue.root_volume_gib),
            "CustomActions": self._on_node_configured("worker"),
            "Iam": self._iam(),
        }
        if queue.whole_nodes:
            entry[JOB_EXCLUSIVE_ALLOCATION] = True
        if props.gpu_health_checks and queue.gpus:
            # HealthChecks/Gpu/Enabled, at the queue (its one compute resource).
            checks: dict[str, Any] = {"Enabled": True}
            for key in reversed(GPU_HEALTH_CHECKS["property"].split("/")[:-1]):
                checks = {key: checks}
            entry.update(checks)
        if props.compute_ami:
            # The queue's own image: the one AMI setting an update takes while the fleet runs (AMI_SETTINGS).
            entry["Image"] = {"CustomAmi": props.compute_ami}
        if queue.capacity.reservation_id:
            entry["CapacityReservationTarget"] = {"CapacityReservationId": queue.capacity.reservation_id}
        return entry

    def _health_check_settings(self) -> dict[str, Any]:
        """Slurm's HealthCheckProgram (kiln's check, which drains a failing node), its interval, and every node state
        it runs in (ANY: idle and busy nodes alike), as CustomSlurmSettings; none without health_check_interval_s."""
        interval = self._props.health_check_interval_s
        if interval is None:
            return {}
        program, every, states = HEALTH_CHECK_SETTINGS["settings"]
        return {CUSTOM_SLURM_SETTINGS: [{program: HEALTH_CHECK_PROGRAM}, {every: interval}, {states: "ANY"}]}

    def _configuration(self) -> dict[str, Any]:
        props = self._props
        head_networking: dict[str, Any] = {"SubnetId": props.subnet.subnet_id}
        if props.security_groups:
            head_networking["AdditionalSecurityGroups"] = [g.security_group_id for g in props.security_groups]
        # The head node's and login pools' image (the queues' too, without compute_ami): never changed by an update.
        image: dict[str, Any] = {"Os": OPERATING_SYSTEMS[props.os]}
        if props.custom_ami:
            image["CustomAmi"] = props.custom_ami
        config: dict[str, Any] = {
            "Region": Stack.of(self).region,
            "Image": image,
            "HeadNode": {
                "InstanceType": props.head_node_instance_type,
                "Networking": head_networking,
                **self._root_volume(SERVICE_NODE_ROOT_VOLUME_GIB),
                "Iam": self._iam(props.head_node_policies),
                # ParallelCluster then lets only root and its admin users reach IMDS on head and login nodes
                # (platforms.json, parallelcluster.imds_secured_roles); the bootstrap's configure_imds takes the rest.
                "Imds": {"Secured": True},
                "Ssh": {"AllowedIps": props.ssh_allowed_ips},
                "CustomActions": self._on_node_configured("controller"),
            },
            "Scheduling": {
                "Scheduler": "slurm",
                "SlurmSettings": {
                    "ScaledownIdletime": props.scaledown_idle_minutes,
                    "QueueUpdateStrategy": props.queue_update_strategy,
                    **self._health_check_settings(),
                    **props.slurm_settings,
                },
                "SlurmQueues": [self._queue(q) for q in props.queues],
            },
            "Imds": {"ImdsSupport": "v2.0"},
        }
        if props.permissions_boundary is not None:
            # Every role ParallelCluster makes for the cluster (head, compute and login nodes, its cleanup functions):
            # Iam/PermissionsBoundary (https://docs.aws.amazon.com/parallelcluster/latest/ug/Iam-v3.html; 3.16.1's
            # ClusterIamSchema.permissions_boundary, an ARN matching ^arn:.*:policy/, update policy SUPPORTED).
            config["Iam"] = {"PermissionsBoundary": props.permissions_boundary}
        if props.tags:
            config["Tags"] = [{"Key": key, "Value": value} for key, value in sorted(props.tags.items())]
        if props.bootstrap_timeouts:
            config["DevSettings"] = {"Timeouts": dict(props.bootstrap_timeouts)}
        if props.file_system is not None:
            config["SharedStorage"] = [
                {
                    "MountDir": props.fsx_mount_dir,
                    "Name": "fsx",
                    "StorageType": "FsxLustre",
                    "FsxLustreSettings": {"FileSystemId": props.file_system.file_system_id},
                }
            ]
        if props.login_count:
            config["LoginNodes"] = {
                "Pools": [
                    {
                        "Name": "login",
                        "InstanceType": props.login_instance_type,
                        "Count": props.login_count,
                        # Without its own, a pool takes the head node's (ParallelCluster 3.11+); said outright.
                        "Ssh": {"AllowedIps": props.ssh_allowed_ips},
                        "CustomActions": self._on_node_configured("login"),
                        "Iam": self._iam(),
                        "Networking": {
                            "SubnetIds": [props.subnet.subnet_id],
                            **(
                                {"AdditionalSecurityGroups": head_networking["AdditionalSecurityGroups"]}
                                if props.security_groups
                                else {}
                            ),
                        },
                    }
                ]
            }
        return config
