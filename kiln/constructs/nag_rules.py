"""Every scanner finding kiln accepts, and every wildcard grant it makes: one reviewed file, each with its reason.

cdk-nag AwsSolutions acknowledgements, the IAM wildcard grants (IAM, bucket and key policies), and the
checkov checks skipped on named resources all live here, so a reviewer reads every exception in one file.
Constructs acknowledge only entries from here; the stacks' checkov aspect applies CHECKOV_SKIPS.
"""

from __future__ import annotations

from dataclasses import dataclass

import kiln.ci.execution_policy as _exec
from kiln.catalog.platforms import service_fact
from kiln.preflight.permissions import LEFTOVER_READS, PARAMETER_READS, UNSCOPED_READS


@dataclass(frozen=True)
class Finding:
    """One accepted cdk-nag finding: its rule id (with the finding's own suffix) and why it is acceptable."""

    rule: str
    reason: str


@dataclass(frozen=True)
class WildcardGrant:
    """One reviewed IAM grant that cdk-nag's IAM5 flags: exact actions on resources of one shape, and why.

    actions: the action names exactly as granted (a wildcard spelled as granted, e.g. s3:GetObject*).
    resource: a regular expression matched whole against the resource as cdk-nag names it; {name}
        placeholders stand for values known at synthesis (acknowledge_wildcards fills them), so a regex count
        is written {{12}}.
    """

    actions: tuple[str, ...]
    resource: str
    reason: str


def managed_policy(policy: str) -> str:
    """Return the IAM4 finding id cdk-nag gives the AWS-managed POLICY (a name such as service-role/X)."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


def wildcard_action(action: str) -> str:
    """Return the IAM5 finding id of a wildcard action."""
    return f"AwsSolutions-IAM5[Action::{action}]"


def wildcard_resource(resource: str) -> str:
    """Return the IAM5 finding id of a wildcard resource, named as cdk-nag names it."""
    return f"AwsSolutions-IAM5[Resource::{resource}]"


# Nodes of every backend.
SSM_CORE = Finding(
    managed_policy("AmazonSSMManagedInstanceCore"),
    "EC2 Image Builder's setting-up guide requires this AWS-maintained policy on build and test instances, whose "
    "agent runs the build's components (kiln's PCS, ParallelCluster and EKS nodes hold only SSM Agent's own actions "
    "instead, NODE_SSM_GRANTS). It is broader than sessions: it also lets an instance read this account's SSM "
    "parameters (ssm:GetParameter on *).",
)
# What SSM Agent itself calls for Session Manager and Run Command (platforms.json, systems_manager.instance_actions):
# what kiln's PCS and ParallelCluster node roles hold in place of AmazonSSMManagedInstanceCore. Its heartbeat takes the
# instance as its resource (systems_manager.heartbeat_resource); its channels take none.
NODE_SSM_ACTIONS = tuple(
    action for actions in service_fact("systems_manager", "instance_actions").value.values() for action in actions
)
NODE_SSM_HEARTBEAT = tuple(action for action in NODE_SSM_ACTIONS if action.startswith("ssm:"))
NODE_SSM_CHANNELS = tuple(action for action in NODE_SSM_ACTIONS if action not in NODE_SSM_HEARTBEAT)
NODE_SSM_GRANTS = (
    WildcardGrant(
        NODE_SSM_CHANNELS,
        r"\*",
        "SSM Agent's session and command channels (ssmmessages, ec2messages), exactly those of AWS's minimal Session "
        "Manager policy and of Run Command's message delivery; these actions take no resource scope. Operators reach "
        "private nodes this way and kiln ci runs its commands; no SSM parameter, document or inventory access.",
    ),
    WildcardGrant(
        NODE_SSM_HEARTBEAT,
        r"arn:(<AWS::Partition>|aws[a-z-]*):ec2:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]{{12}}):instance/\*",
        "SSM Agent's heartbeat, which keeps the node a managed node: on this account's instances in this region only; "
        "instance ids are EC2's, unknown at synthesis.",
    ),
)

IMAGE_BUILDER_INSTANCE = Finding(
    managed_policy("EC2InstanceProfileForImageBuilder"),
    "EC2 Image Builder requires this AWS-maintained policy on build and test instances' profiles: its agent fetches "
    "components and their documents, writes the build's logs and snapshots the volume it builds.",
)

# EKS.
EKS_CLUSTER_ROLE = Finding(
    managed_policy("AmazonEKSClusterPolicy"), "EKS requires this AWS-maintained policy on its cluster service role."
)
EKS_NODE_POLICIES = (
    Finding(
        managed_policy("AmazonEKSWorkerNodePolicy"),
        "EKS requires this AWS-maintained policy for nodes to join the cluster; it also lets the node's Pod "
        "Identity agent exchange a pod's identity for its role.",
    ),
    Finding(
        managed_policy("AmazonEC2ContainerRegistryPullOnly"),
        "Nodes pull EKS system images; pull-only, nothing else in ECR.",
    ),
)
EKS_CNI_POLICY = Finding(
    managed_policy("AmazonEKS_CNI_Policy"),
    "The VPC CNI (kube-system/aws-node) attaches interfaces and assigns pod addresses with this AWS-maintained "
    "policy, on a role only that service account in this cluster can assume through EKS Pod Identity.",
)
KUBECTL_HANDLER_POLICIES = (
    Finding(
        managed_policy("service-role/AWSLambdaBasicExecutionRole"),
        "CDK's kubectl handler and provider framework: CloudWatch Logs only.",
    ),
    Finding(
        managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"),
        "CDK's kubectl handler and provider framework run in the VPC to reach the private endpoint; ENIs only.",
    ),
)
KUBECTL_HANDLER_RUNTIME = Finding(
    "AwsSolutions-L1", "CDK picks the kubectl handler's Python runtime for the handler code it ships."
)
KUBECTL_HANDLER_GRANTS = (
    WildcardGrant(
        ("lambda:InvokeFunction",),
        r"{handler}(:\*)?",
        "CDK's provider framework may invoke any version of the one kubectl handler function, and nothing else.",
    ),
)

# The cluster-autoscaler's Pod Identity role (kiln.constructs.eks_scheduling; actions from the AWS provider's README).
_EKS_ARN = r"arn:(<AWS::Partition>|aws[a-z-]*):eks:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]{{12}})"
CLUSTER_AUTOSCALER_GRANTS = (
    WildcardGrant(
        (
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations",
            "autoscaling:DescribeScalingActivities",
            "ec2:DescribeImages",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplateVersions",
            "ec2:GetInstanceTypesFromInstanceRequirements",
        ),
        r"\*",
        "Auto Scaling and EC2 Describe calls take no resource scope; the autoscaler reads the groups it discovers by "
        "their tags, their launch templates and instance types, to know what a new node would offer.",
    ),
    WildcardGrant(
        ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"),
        r"\*",
        "Only on Auto Scaling groups tagged k8s.io/cluster-autoscaler/<this cluster>=owned (the condition beside it), "
        "which EKS puts on this cluster's managed node groups; Auto Scaling names groups with ids unknown before.",
    ),
    WildcardGrant(
        ("eks:DescribeNodegroup",),
        _EKS_ARN + r":nodegroup/{cluster}/\*/\*",
        "Read-only, on this cluster's node groups (their names and ids are EKS's): labels, taints and the node "
        "template tags of a group with no nodes yet.",
    ),
)

# SageMaker HyperPod.
HYPERPOD_INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
HYPERPOD_INSTANCE_ROLE = Finding(
    managed_policy(HYPERPOD_INSTANCE_POLICY),
    "AWS's minimal policy for HyperPod cluster instances, which the service documents as required.",
)
HYPERPOD_DESCRIBE_ACTIONS = (
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)
# What HyperPod does to its nodes' interfaces (platforms.json, hyperpod.execution_role_eks_actions).
HYPERPOD_INTERFACE_ACTIONS = tuple(service_fact("hyperpod", "execution_role_eks_actions").value["interfaces"])
# Pulling images from ECR (HyperPod on EKS: the add-ons' and HyperPod's own images).
HYPERPOD_ECR_ACTIONS = tuple(service_fact("hyperpod", "execution_role_eks_actions").value["ecr"])
HYPERPOD_ECR_TOKEN = ("ecr:GetAuthorizationToken",)
_EC2_ARN = r"arn:(<AWS::Partition>|aws[a-z-]*):ec2:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]{{12}})"
HYPERPOD_ROLE_GRANTS = (
    WildcardGrant(
        HYPERPOD_DESCRIBE_ACTIONS,
        r"\*",
        "EC2 Describe calls have no resource-level scope; HyperPod reads the VPC, subnets, security groups, DHCP "
        "options and interfaces of its nodes.",
    ),
    WildcardGrant(
        ("ec2:CreateNetworkInterface",),
        _EC2_ARN + r":(network-interface|security-group)/\*",
        "HyperPod creates its nodes' interfaces: the ec2:Vpc condition keeps the interfaces and the security "
        "groups they join in the cluster's VPC (the subnet is named exactly).",
    ),
    WildcardGrant(
        HYPERPOD_INTERFACE_ACTIONS,
        _EC2_ARN + r":network-interface/\*",
        "HyperPod attaches, addresses and removes its nodes' interfaces: the ec2:Subnet condition limits this to "
        "interfaces in the cluster's compute subnet.",
    ),
    WildcardGrant(
        ("ec2:CreateTags",),
        _EC2_ARN + r":network-interface/\*",
        "Tags only while an interface is created (ec2:CreateAction condition); existing interfaces cannot be retagged.",
    ),
    WildcardGrant(
        ("s3:GetObject",),
        r"{lifecycle_bucket}/{prefix}\*",
        "Nodes read their lifecycle scripts: the objects under one prefix of the lifecycle bucket.",
    ),
    WildcardGrant(
        HYPERPOD_ECR_TOKEN,
        r"\*",
        "ECR's authorization token is not a resource: GetAuthorizationToken takes no resource scope.",
    ),
    WildcardGrant(
        tuple(a for a in HYPERPOD_ECR_ACTIONS if a not in HYPERPOD_ECR_TOKEN),
        r"arn:(<AWS::Partition>|aws[a-z-]*):ecr:(<AWS::Region>|[a-z0-9-]+):\*:repository/\*",
        "HyperPod's EKS nodes pull the EKS add-ons' images and HyperPod's own (its health agent) from AWS's ECR "
        "registries, whose account differs by region and image: image reads only, in the cluster's region.",
    ),
)
_HANDLER_READS = ("s3:GetObject*", "s3:GetBucket*", "s3:List*")
LIFECYCLE_HANDLER_GRANTS = (
    WildcardGrant(
        _HANDLER_READS,
        r"{source_bucket}(/\*)?",
        "CDK's BucketDeployment handler reads the lifecycle zip; CDK grants read on its whole source bucket.",
    ),
    WildcardGrant(
        _HANDLER_READS,
        r"arn:(<AWS::Partition>|aws[a-z-]*):s3:::cdk-[a-z0-9]+-assets-[^/]+(/\*)?",
        "CDK's BucketDeployment handler reads cluster.env and provisioning_parameters.json, which CDK stages in "
        "its asset bucket under content-hash keys, so CDK grants read on that bucket.",
    ),
    WildcardGrant(
        (
            *_HANDLER_READS,
            "s3:DeleteObject*",
            "s3:PutObject",
            "s3:PutObjectLegalHold",
            "s3:PutObjectRetention",
            "s3:PutObjectTagging",
            "s3:PutObjectVersionTagging",
            "s3:Abort*",
        ),
        r"{lifecycle_bucket}(/\*)?",
        "CDK's BucketDeployment handler writes and prunes the lifecycle scripts and gets read-write on the whole "
        "destination bucket; kiln's default lifecycle bucket holds nothing else (a lifecycle_bucket you pass "
        "shares this grant).",
    ),
)
LIFECYCLE_HANDLER_LOGS = Finding(
    managed_policy("service-role/AWSLambdaBasicExecutionRole"),
    "CDK's BucketDeployment handler writes its CloudWatch logs with the basic Lambda execution policy (logs only).",
)
LIFECYCLE_HANDLER_RUNTIME = Finding(
    "AwsSolutions-L1", "The BucketDeployment handler's runtime is pinned by aws-cdk-lib and moves with it."
)


# The TTL reaper of a short-lived environment.
_CFN_ARN = r"arn:(<AWS::Partition>|aws[a-z-]*):cloudformation:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]{{12}})"
_S3_ARN = r"arn:(<AWS::Partition>|aws[a-z-]*):s3:::"
REAPER_STACK_ACTIONS = (
    "cloudformation:DeleteStack",
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "cloudformation:ListStackResources",
)
REAPER_GRANTS = (
    WildcardGrant(
        REAPER_STACK_ACTIONS,
        _CFN_ARN + r":stack/{environment}-(compute|storage|network|reaper)/\*",
        "The reaper deletes its environment's stacks, named exactly; the trailing * is the stack id CloudFormation "
        "adds at creation, unknown at synthesis.",
    ),
    WildcardGrant(
        ("s3:DeleteObject", "s3:DeleteObjectVersion"),
        _S3_ARN + r"{environment}-(data|data-logs|lifecycle|lifecycle-logs)-(<AWS::AccountId>|[0-9]{{12}})/\*",
        "The reaper empties its environment's non-retained buckets (named exactly) so their stacks can delete them; "
        "emptying a bucket means deleting every object in it.",
    ),
)


# The CI identity: the role GitHub Actions assumes for `kiln ci` (kiln/constructs/ci_identity.py).
from kiln.preflight.permissions import BOOTSTRAP_READS  # noqa: E402

_CI_PARTITION = r"(<AWS::Partition>|aws[a-z-]*)"
_CI_ACCOUNT = r"(<AWS::AccountId>|[0-9]{{12}})"
# An environment of one of the role's cluster names (at most 18 characters): <cluster>-<run>, the run a wildcard.
_CI_ENVIRONMENT = r"[a-z][a-z0-9-]{{0,17}}-\*"
CI_IDENTITY_GRANTS = (
    WildcardGrant(
        ("sts:AssumeRole",),
        rf"arn:{_CI_PARTITION}:iam::{_CI_ACCOUNT}:role/cdk-{{qualifier}}-"
        rf"(deploy|file-publishing|image-publishing|lookup)-role-{_CI_ACCOUNT}-\*",
        "The CDK CLI deploys an environment through this account's CDK bootstrap roles of the one qualifier; their "
        "names end in the environment's region, which is not known when the role is made.",
    ),
    WildcardGrant(
        ("cloudformation:ListStacks",),
        r"\*",
        "ListStacks takes no resource scope; kiln ci sweep lists stacks to find expired environments.",
    ),
    WildcardGrant(
        ("ssm:GetCommandInvocation", "ssm:ListCommandInvocations"),
        r"\*",
        "Read-only: Run Command results take no resource scope; kiln reads the output of the commands it sent.",
    ),
    WildcardGrant(
        ("ssm:CancelCommand",),
        r"\*",
        "kiln ci run cancels a command that outlives its timeout. The Service Authorization Reference lists no "
        "resource type and no condition key for ssm:CancelCommand, so IAM can grant it only on *: the role could "
        "cancel another principal's Run Command in this account (an interruption, never access to a node).",
    ),
    WildcardGrant(
        UNSCOPED_READS,
        r"\*",
        "Read-only calls that take no resource scope: kiln preflight, which kiln ci up runs before deploying, reads "
        "quotas, offerings, reservations, subnets, their route tables and endpoints, security groups, network "
        "interfaces, images, instances and file systems; kiln ci finds an "
        "environment's nodes by their kiln:environment tag with DescribeInstances.",
    ),
    WildcardGrant(
        LEFTOVER_READS,
        r"\*",
        "Read-only, for preflight's leftovers check (kiln ci up runs it): the tagging API (tag:GetResources) and "
        "AMP's ListWorkspaces take no resource scope; DescribeBackups, DescribeKey and GetBucketLogging describe "
        "what that listing found under kiln's tags, whose ids the role cannot know in advance.",
    ),
    WildcardGrant(
        PARAMETER_READS,
        rf"arn:{_CI_PARTITION}:ssm:\*::parameter/aws/service/global-infrastructure/\*",
        "kiln preflight reads AWS's public parameters of the services each region offers, in any region.",
    ),
    WildcardGrant(
        BOOTSTRAP_READS,
        rf"arn:{_CI_PARTITION}:iam::{_CI_ACCOUNT}:role/cdk-{{qualifier}}-cfn-exec-role-{_CI_ACCOUNT}-\*",
        "Read-only: kiln preflight lists the policies attached to the CDK bootstrap's CloudFormation execution role "
        "of the one qualifier (warning when it is AdministratorAccess); its name ends in the environment's region.",
    ),
    WildcardGrant(
        (
            "cloudformation:DeleteStack",
            "cloudformation:DescribeStackEvents",
            "cloudformation:DescribeStacks",
            "cloudformation:GetTemplate",
            "cloudformation:ListStackResources",
        ),
        rf"arn:{_CI_PARTITION}:cloudformation:\*:{_CI_ACCOUNT}:stack/{_CI_ENVIRONMENT}/\*",
        "Stacks of the role's environments only (<cluster>-<run>, in the environment's region; CloudFormation "
        "appends the stack id); DeleteStack also needs the stack's kiln:environment tag to name an environment of the "
        "same cluster.",
    ),
    WildcardGrant(
        ("s3:GetBucketTagging", "s3:ListBucket", "s3:ListBucketVersions", "s3:DeleteObject", "s3:DeleteObjectVersion"),
        rf"arn:{_CI_PARTITION}:s3:::{_CI_ENVIRONMENT}-(data|lifecycle)\*-{_CI_ACCOUNT}(/\*)?",
        "kiln ci down empties an environment's own four buckets (<env>-data, -data-logs, -lifecycle, -lifecycle-logs, "
        "each ending in the account id) before deleting its stacks: <env>-data*-<account> and "
        "<env>-lifecycle*-<account> (one pattern per pair keeps six clusters in one inline policy). A long-lived "
        "cluster's <cluster>-data-<account> does not match (the run part is missing).",
    ),
    WildcardGrant(
        ("scheduler:GetSchedule", "scheduler:UpdateSchedule"),
        rf"arn:{_CI_PARTITION}:scheduler:\*:{_CI_ACCOUNT}:schedule/default/{_CI_ENVIRONMENT}-reaper",
        "kiln ci extend and down read and move the reaper schedule of the role's environments (<env>-reaper in the "
        "default group), in the environment's region.",
    ),
    WildcardGrant(
        ("iam:PassRole",),
        rf"arn:{_CI_PARTITION}:iam::{_CI_ACCOUNT}:role/{_CI_ENVIRONMENT}-reaper-invoke",
        "UpdateSchedule passes the schedule's own invoke role (<env>-reaper-invoke) again, and only to EventBridge "
        "Scheduler (iam:PassedToService).",
    ),
    WildcardGrant(
        ("ssm:SendCommand",),
        rf"arn:{_CI_PARTITION}:ec2:\*:{_CI_ACCOUNT}:instance/\*",
        "Instance ids are unknown in advance: Run Command reaches only instances whose kiln:environment tag names one "
        "of the role's environments and that also carry a tag no user can set (aws: prefix): a ParallelCluster head "
        "node's aws:cloudformation:stack-name naming one of the role's environments, or a PCS node's "
        "aws:pcs:compute-node-group-id.",
    ),
    WildcardGrant(
        ("ssm:SendCommand",),
        rf"arn:{_CI_PARTITION}:ssm:\*::document/AWS-RunShellScript",
        "AWS's own shell document, the only Run Command document the role may use, in the environment's region.",
    ),
    WildcardGrant(
        ("ssm:StartSession",),
        rf"arn:{_CI_PARTITION}:ssm:\*::document/AWS-StartNonInteractiveCommand",
        "AWS's own non-interactive session document (kiln ci run on HyperPod), in the environment's region; beside "
        "the port-forwarding one, the only session documents the role may use.",
    ),
    WildcardGrant(
        ("ssm:StartSession",),
        rf"arn:{_CI_PARTITION}:ec2:\*:{_CI_ACCOUNT}:instance/\*",
        "Instance ids are unknown in advance: kiln ci run forwards a port to a private EKS API endpoint through a "
        "system node, and may start sessions only on instances whose kiln:environment tag names one of the role's "
        "environments (ssm:resourceTag condition) and that an Auto Scaling group launched (its "
        "aws:autoscaling:groupName tag, which no user can set), as EKS managed node groups' instances are.",
    ),
    WildcardGrant(
        ("ssm:StartSession",),
        rf"arn:{_CI_PARTITION}:ssm:\*::document/AWS-StartPortForwardingSessionToRemoteHost",
        "AWS's own document for forwarding a port to a host the node reaches (kiln ci run on a private EKS endpoint), "
        "in the environment's region.",
    ),
    WildcardGrant(
        ("ssm:TerminateSession",),
        r"\*",
        "kiln ci run ends a HyperPod session that outlives its timeout and an EKS port forward once the command is "
        "done; session ids are Session Manager's, and the condition on the session's aws:ssmmessages:session-id tag "
        "(its starter's aws:userid) limits this to the role's own sessions.",
    ),
    WildcardGrant(
        ("ssm:StartSession",),
        rf"arn:{_CI_PARTITION}:sagemaker:\*:{_CI_ACCOUNT}:cluster/\*",
        "Session Manager names a HyperPod node by its cluster's ARN, which holds a service-assigned id, not the "
        "cluster's name: no pattern can narrow it to the role's environments, so this allows sessions on any HyperPod "
        "cluster of this account.",
    ),
    WildcardGrant(
        ("pcs:GetCluster", "pcs:ListComputeNodeGroups"),
        rf"arn:{_CI_PARTITION}:pcs:\*:{_CI_ACCOUNT}:cluster/\*",
        "Read-only: PCS cluster ARNs hold a service-assigned id, not the name, so any PCS cluster of this account.",
    ),
    WildcardGrant(
        ("sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"),
        rf"arn:{_CI_PARTITION}:sagemaker:\*:{_CI_ACCOUNT}:cluster/\*",
        "Read-only: HyperPod cluster ARNs hold a service-assigned id, not the name, so any HyperPod cluster of this "
        "account.",
    ),
    WildcardGrant(
        ("eks:DescribeCluster", "eks:ListNodegroups"),
        rf"arn:{_CI_PARTITION}:eks:\*:{_CI_ACCOUNT}:cluster/{_CI_ENVIRONMENT}",
        "Read-only, on the EKS clusters of the role's environments (named after the environment), in its region.",
    ),
    WildcardGrant(
        ("eks:DescribeNodegroup",),
        rf"arn:{_CI_PARTITION}:eks:\*:{_CI_ACCOUNT}:nodegroup/{_CI_ENVIRONMENT}/\*/\*",
        "Read-only, on the node groups of the role's environments' EKS clusters (group names and ids are EKS's).",
    ),
)

# The CloudFormation execution policies `kiln ci identity` writes for `cdk bootstrap` (kiln/ci/execution_policy.py):
# JSON documents, not template resources, reviewed pair by pair all the same (execution_policy_review).
_X_ARN = r"arn:aws[a-z-]*"
_X_ACCOUNT = r"<aws:PrincipalAccount>"
_X_ENV = _CI_ENVIRONMENT
_X_IN_REGIONS = "in any region (the environment's is not known when the policy is written)"
_X_BY_ID = (
    "Its ARNs hold service-assigned ids, not names kiln chooses, so no pattern can narrow them to kiln's environments: "
    "this reaches every such resource of the account (the residual risk kiln's docs name)."
)
CI_EXECUTION_GRANTS = (
    WildcardGrant(
        _exec.STACK_ACTIONS,
        rf"{_X_ARN}:cloudformation:\*:{_X_ACCOUNT}:stack/{_X_ENV}/\*",
        "Nested stacks of the environments' stacks (named <parent>-<id>-<suffix>, so <cluster>-*); CloudFormation "
        f"appends the stack id; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.TRANSFORM_ACTIONS,
        rf"{_X_ARN}:cloudformation:\*:aws:transform/Serverless-2016-10-31",
        "ParallelCluster's cluster provider template uses AWS's Serverless transform, which CloudFormation runs with "
        f"the execution role's CreateChangeSet on the transform itself; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        (*_exec.ROLE_ACTIONS, *_exec.ATTACH_ACTIONS),
        rf"{_X_ARN}:iam::{_X_ACCOUNT}:role/((aws-pcs/)?{_X_ENV}|ParallelClusterLambdaRole-\*)",
        "Roles of the environments' stacks only: CloudFormation names them <stack>-<id>-<suffix> (<cluster>-*, under "
        "/aws-pcs/ for PCS nodes), ParallelCluster's provider names its own ParallelClusterLambdaRole-<stack id>. "
        "AttachRolePolicy only of kiln's AWS managed policies and of policies of these names (iam:PolicyARN). "
        "A role of these names can still be given any inline policy: this bounds which roles CI touches, not what "
        "a role it makes may do (no permissions boundary; kiln's docs name this).",
    ),
    WildcardGrant(
        _exec.POLICY_ACTIONS,
        rf"{_X_ARN}:iam::{_X_ACCOUNT}:policy/((parallelcluster/)?{_X_ENV}|ParallelCluster\*"
        r"|DefaultParallelClusterIamAdminPolicy-\*)",
        "Managed policies of the environments' stacks (<cluster>-*, under /parallelcluster/ for ParallelCluster's "
        "nodes) and those ParallelCluster's provider names after its stack id; no other policy of the account.",
    ),
    WildcardGrant(
        _exec.INSTANCE_PROFILE_ACTIONS,
        rf"{_X_ARN}:iam::{_X_ACCOUNT}:instance-profile/(aws-pcs/)?{_X_ENV}",
        "Instance profiles of the environments' stacks (<cluster>-*, under /aws-pcs/ for PCS nodes) only.",
    ),
    WildcardGrant(
        _exec.LINKED_ROLE_ACTIONS,
        rf"{_X_ARN}:iam::{_X_ACCOUNT}:role/aws-service-role/\*",
        "EKS, PCS, FSx, HyperPod, Grafana and Managed Prometheus create their service-linked roles on first use; such "
        "a role holds only its service's AWS-defined policy and only that service assumes it.",
    ),
    WildcardGrant(
        _exec.FSX_LINKED_ROLE_ACTIONS,
        rf"{_X_ARN}:iam::{_X_ACCOUNT}:role/aws-service-role/s3\.data-source\.lustre\.fsx\.amazonaws\.com/\*",
        "FSx for Lustre writes the policy of its S3 data-repository service-linked role with the caller's "
        "permissions; that role only.",
    ),
    WildcardGrant(
        _exec.BUCKET_ACTIONS,
        rf"{_X_ARN}:s3:::{_X_ENV}",
        "Buckets of the environments' stacks only: kiln names them <env>-<purpose>-<account>, CloudFormation names "
        "the rest after the stack (<cluster>-*).",
    ),
    WildcardGrant(
        _exec.OBJECT_ACTIONS,
        rf"{_X_ARN}:s3:::{_X_ENV}/\*",
        "Objects of the environments' buckets only (CloudFormation empties nothing; the handler's delete and ACL "
        "calls).",
    ),
    WildcardGrant(
        _exec.CODE_READS,
        rf"{_X_ARN}:s3:::(cdk-{{qualifier}}-assets-{_X_ACCOUNT}-\*|\*-aws-parallelcluster)/\*",
        "Read-only: Lambda reads function and layer code with the caller's permissions, from the CDK bootstrap's "
        "asset bucket of the one qualifier (its name ends in the region) and ParallelCluster's public regional "
        "buckets.",
    ),
    WildcardGrant(
        _exec.FUNCTION_ACTIONS,
        rf"{_X_ARN}:lambda:\*:{_X_ACCOUNT}:function:({_X_ENV}|pcluster-cfn-\*)",
        "Functions of the environments' stacks (<stack>-<id>-<suffix>, so <cluster>-*) and ParallelCluster's "
        "provider function (pcluster-cfn-<stack id>); InvokeFunction is how CloudFormation calls a custom "
        f"resource's provider; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.LAYER_ACTIONS,
        rf"{_X_ARN}:lambda:\*:{_X_ACCOUNT}:layer:\*",
        "CDK's kubectl and AWS CLI layers and ParallelCluster's (PCLayer-<stack id>) are not named after the stack. "
        "A layer is code a function opts into; publishing one grants nothing.",
    ),
    WildcardGrant(
        _exec.LOG_GROUP_ACTIONS,
        rf"{_X_ARN}:logs:\*:{_X_ACCOUNT}:log-group:({_X_ENV}|/aws/lambda/pcluster-cfn-\*)",
        "Log groups of the environments' stacks (<cluster>-*) and of ParallelCluster's provider function only; "
        f"{_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.LOGS_ACCOUNT_ACTIONS,
        r"\*",
        "Log deliveries (flow logs, the scraper's and workspaces' logs), the account's log resource policies and "
        "DescribeLogGroups take no resource scope.",
    ),
    WildcardGrant(
        _exec.KEY_CREATE,
        r"\*",
        "CreateKey takes no resource scope; creating a key gives access to no other key.",
    ),
    WildcardGrant(
        _exec.KEY_ACTIONS,
        rf"{_X_ARN}:kms:\*:{_X_ACCOUNT}:key/\*",
        "Key ids are KMS's: only keys tagged kiln:environment with one of the environments (aws:ResourceTag), as "
        "CloudFormation tags kiln's keys at creation; no other key's policy, grants or deletion.",
    ),
    WildcardGrant(
        _exec.EC2_ACTIONS,
        r"\*",
        "The VPC, subnets, gateways, routes, security groups, endpoints, flow logs, placement groups and launch "
        f"templates, and the instances EKS and PCS launch. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.UNSCOPED_READS,
        r"\*",
        "Read-only calls the handlers make beside their own service's (Lambda's, Grafana's, the scraper's, flow "
        "logs', the VPC endpoint's), none of which kiln could scope to a name.",
    ),
    WildcardGrant(
        _exec.EKS_ACTIONS,
        rf"{_X_ARN}:eks:\*:{_X_ACCOUNT}:(cluster|nodegroup|addon|access-entry|podidentityassociation)/{_X_ENV}",
        "EKS clusters of the environments (named after the environment) and what is inside them (their ARNs start "
        f"with the cluster's name); {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.PCS_ACTIONS,
        rf"{_X_ARN}:pcs:\*:{_X_ACCOUNT}:cluster/\*",
        f"PCS clusters, their node groups and queues. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.PCS_SECRET_ACTIONS,
        rf"{_X_ARN}:secretsmanager:\*:{_X_ACCOUNT}:secret:\*",
        "PCS creates each cluster's Slurm key as a secret with the caller's permissions. Create and tag only: no "
        "secret can be read or changed.",
    ),
    WildcardGrant(
        _exec.HYPERPOD_ACTIONS,
        rf"{_X_ARN}:sagemaker:\*:{_X_ACCOUNT}:cluster/\*",
        f"HyperPod clusters. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.FSX_ACTIONS,
        r"\*",
        f"Lustre file systems and their data repository associations. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.PROMETHEUS_ACTIONS,
        rf"{_X_ARN}:aps:\*:{_X_ACCOUNT}:\*",
        f"Managed Prometheus workspaces and scrapers. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.GRAFANA_ACTIONS,
        rf"{_X_ARN}:grafana:\*:{_X_ACCOUNT}:/workspaces/\*",
        f"Managed Grafana workspaces. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.IDENTITY_CENTER_ACTIONS,
        r"\*",
        "kiln's Grafana workspaces sign in with IAM Identity Center; the workspace handler registers and removes its "
        "managed application there, which takes no resource scope.",
    ),
    WildcardGrant(
        _exec.PARAMETER_ACTIONS,
        rf"{_X_ARN}:ssm:\*:{_X_ACCOUNT}:parameter/CFN-\*",
        "CDK's EKS construct keeps a parameter without a name; CloudFormation names such parameters CFN-<id>-<suffix>. "
        "No other parameter of the account.",
    ),
    WildcardGrant(
        _exec.SCHEDULE_ACTIONS,
        rf"{_X_ARN}:scheduler:\*:{_X_ACCOUNT}:schedule/default/{_X_ENV}",
        f"The reapers' schedules (<env>-reaper in the default group); {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.TOPIC_ACTIONS,
        rf"{_X_ARN}:sns:\*:{_X_ACCOUNT}:{_X_ENV}",
        f"The reapers' alarm topics (<env>-reaper-alarm); {_X_IN_REGIONS}.",
    ),
)

# Buckets (kiln/constructs/bucket.py): their bucket policies.
BUCKET_AUTO_DELETE = WildcardGrant(
    ("s3:PutBucketPolicy", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*"),
    r"{bucket}(/\*)?",
    "CDK's auto-delete handler empties a bucket that is not retained (CI environments, the HyperPod lifecycle "
    "bucket) when its stack is deleted; the bucket policy lets that handler's role alone list and delete in this "
    "bucket.",
)
ACCESS_LOG_DELIVERY = WildcardGrant(
    ("s3:PutObject",),
    r"{bucket}/{prefix}\*",
    "S3's logging service writes the access logs of the one source bucket (aws:SourceArn condition) under one "
    "prefix; the * is the key of each log object.",
)

# KMS keys (kiln/constructs/keys.py): their key policies, where a Resource of * is the key itself.
KEY_ACCOUNT_ADMIN = WildcardGrant(
    ("kms:*",),
    r"\*",
    "CDK's default key policy: the account's root principal holds this key, so that IAM policies of this account "
    "decide who may use it and the key can never become unmanageable; in a key policy * is this key alone.",
)
LOGS_KEY_USE = WildcardGrant(
    ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:GenerateDataKey", "kms:DescribeKey"),
    r"\*",
    "CloudWatch Logs of this region encrypts and decrypts log events with this key, for log groups of this account "
    "in this region only (kms:EncryptionContext:aws:logs:arn condition); in a key policy * is this key alone.",
)


@dataclass(frozen=True)
class CheckovSkip:
    """One checkov check kiln does not meet on some resources, and why that is acceptable there.

    resource_type: the CloudFormation type of those resources.
    paths: regular expressions, each matched whole against a resource's construct path below its stack.
    """

    check: str
    resource_type: str
    paths: tuple[str, ...]
    reason: str


# CDK's own deploy-time functions, which CloudFormation invokes for custom resources.
_RESTRICT_DEFAULT_SG = r"Custom::VpcRestrictDefaultSGCustomResourceProvider/Handler"
_AUTO_DELETE_OBJECTS = r"Custom::S3AutoDeleteObjectsCustomResourceProvider/Handler"
_BUCKET_DEPLOYMENT = r"Custom::CDKBucketDeployment[0-9A-F]{32}/Resource"
_KUBECTL_HANDLER = r"(.+/)?KubectlProvider/Handler/Resource"
_KUBECTL_FRAMEWORK = r"(.+/)?KubectlProvider/Provider/framework-onEvent/Resource"
_CDK_FUNCTIONS = (_RESTRICT_DEFAULT_SG, _AUTO_DELETE_OBJECTS, _BUCKET_DEPLOYMENT, _KUBECTL_HANDLER, _KUBECTL_FRAMEWORK)
_FUNCTION = "AWS::Lambda::Function"
_LOG_GROUP = "AWS::Logs::LogGroup"


@dataclass(frozen=True)
class ManagedPolicyReview:
    """An AWS-managed policy that CDK's own handler roles attach where cdk-nag raises no finding (their roles are
    plain CloudFormation resources), matched by construct path below the stack, with why it is acceptable."""

    policy: str
    paths: tuple[str, ...]
    reason: str


# The reviewed AWS-managed policies of CDK's deploy-time handler roles cdk-nag does not see; `kiln report` lists
# them with the other attachments (kiln.iam_wildcards.managed_policy_uses).
MANAGED_POLICY_REVIEWS = (
    ManagedPolicyReview(
        "service-role/AWSLambdaBasicExecutionRole",
        (
            r"Custom::VpcRestrictDefaultSGCustomResourceProvider/Role",
            r"Custom::S3AutoDeleteObjectsCustomResourceProvider/Role",
        ),
        "CDK's default security group lockdown and bucket emptying handlers write their CloudWatch logs with the "
        "basic Lambda execution policy (logs only).",
    ),
)

CHECKOV_SKIPS = (
    CheckovSkip(
        "CKV_AWS_115",
        _FUNCTION,
        _CDK_FUNCTIONS,
        "CDK's deploy-time handlers (default security group lockdown, bucket emptying, lifecycle script upload, "
        "kubectl) run a few times per deploy, one request at a time; reserved concurrency would take capacity from "
        "the account's unreserved pool for good.",
    ),
    CheckovSkip(
        "CKV_AWS_116",
        _FUNCTION,
        _CDK_FUNCTIONS,
        "CloudFormation waits for the answer of CDK's deploy-time handlers to its custom resources: a failure fails "
        "that resource and the deploy rolls back, so a dead-letter queue would keep an event nothing replays.",
    ),
    CheckovSkip(
        "CKV_AWS_117",
        _FUNCTION,
        (_RESTRICT_DEFAULT_SG, _AUTO_DELETE_OBJECTS, _BUCKET_DEPLOYMENT),
        "CDK's default security group lockdown, bucket emptying and lifecycle script upload only call EC2 and S3 "
        "APIs and reach nothing inside the cluster's VPC (the kubectl handlers, which reach the private EKS "
        "endpoint, do run in it).",
    ),
    CheckovSkip(
        "CKV_AWS_173",
        _FUNCTION,
        (_BUCKET_DEPLOYMENT,),
        "The BucketDeployment handler's one environment variable is the path of the CA bundle in its image "
        "(AWS_CA_BUNDLE), nothing secret; Lambda encrypts it at rest with its AWS-owned key.",
    ),
    CheckovSkip(
        "CKV_AWS_173",
        _FUNCTION,
        (_KUBECTL_HANDLER,),
        "The kubectl handler's one environment variable selects regional STS endpoints "
        "(AWS_STS_REGIONAL_ENDPOINTS=regional), nothing secret; Lambda encrypts it at rest with its AWS-owned key.",
    ),
    CheckovSkip(
        "CKV_AWS_173",
        _FUNCTION,
        (_KUBECTL_FRAMEWORK,),
        "The provider framework's one environment variable is the ARN of the kubectl handler it calls, nothing "
        "secret; Lambda encrypts it at rest with its AWS-owned key.",
    ),
    CheckovSkip(
        "CKV_AWS_18",
        "AWS::S3::Bucket",
        (r"(.+/)?AccessLogs/Resource",),
        "An access-log bucket does not log access to itself: S3 would write a log object for every log delivery, "
        "without end, and logging it to a third bucket only moves the question. Only S3's logging service may "
        "write to it (bucket policy), and it is versioned, so a deleted log stays recoverable.",
    ),
    # kiln's own functions (kiln/constructs/functions.py): the reaper and the dashboard provisioner.
    CheckovSkip(
        "CKV_AWS_115",
        _FUNCTION,
        (r"(.+/)?Reaper/Function/Resource", r"(.+/)?DashboardProvisioner/Resource"),
        "Reserving concurrency fails the deploy in accounts whose Lambda quota leaves less than 100 unreserved, "
        "common in new accounts; these functions run a few times per environment or deploy, and two side by side "
        "do no harm (idempotent deletions and reschedules; one CloudFormation event at a time).",
    ),
    # The TTL reaper of a short-lived environment (kiln/constructs/reaper.py).
    CheckovSkip(
        "CKV_AWS_117",
        _FUNCTION,
        (r"(.+/)?Reaper/Function/Resource",),
        "The reaper deletes its environment's VPC, so it must not run inside it; it only calls AWS APIs.",
    ),
    CheckovSkip(
        "CKV_AWS_116",
        _FUNCTION,
        (r"(.+/)?Reaper/Function/Resource",),
        "Only its schedule invokes the reaper, and the schedule's retry policy redelivers a failed invocation; the "
        "event carries nothing a dead-letter queue would need to keep.",
    ),
    CheckovSkip(
        "CKV_AWS_173",
        _FUNCTION,
        (r"(.+/)?Reaper/Function/Resource",),
        "The reaper's environment variables hold only the names of its environment, stack and schedule.",
    ),
    CheckovSkip(
        "CKV_AWS_158",
        _LOG_GROUP,
        (r"(.+/)?Reaper/Logs/Resource",),
        "The reaper's log lines name the stacks and buckets it deletes and hold no data; CloudWatch Logs encrypts "
        "every log group at rest, and a customer-managed key would outlive the environment by its deletion window.",
    ),
    # Amazon Managed Grafana's dashboard provisioning function (kiln/constructs/grafana.py).
    CheckovSkip(
        "CKV_AWS_116",
        _FUNCTION,
        (r"(.+/)?DashboardProvisioner/Resource",),
        "Only CloudFormation invokes the dashboard provisioner, for its custom resource, and the function answers "
        "CloudFormation itself, failure included: a failed deploy rolls back and the next deploy provisions again, "
        "so a dead-letter queue would keep an event nothing replays.",
    ),
    CheckovSkip(
        "CKV_AWS_117",
        _FUNCTION,
        (r"(.+/)?DashboardProvisioner/Resource",),
        "The dashboard provisioner calls the Amazon Managed Grafana API and the workspace's own HTTPS endpoint, "
        "both public AWS endpoints; it reaches nothing inside a VPC.",
    ),
    CheckovSkip(
        "CKV_AWS_158",
        _LOG_GROUP,
        (r"(.+/)?DashboardProvisionerLogs/Resource",),
        "The dashboard provisioner's log lines name the dashboards, data source and HTTP statuses, never the "
        "service account token; CloudWatch Logs encrypts every log group at rest.",
    ),
    # Baked images (kiln/constructs/training_image.py).
    CheckovSkip(
        "CKV_AWS_158",
        _LOG_GROUP,
        (r"(.+/)?Image/BuildLogs/Resource",),
        "Image build logs hold package-manager and installer output, no data or secrets; CloudWatch Logs encrypts "
        "every log group at rest.",
    ),
)
