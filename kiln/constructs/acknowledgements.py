"""Every scanner finding kiln accepts, and every wildcard grant it makes: one reviewed file, each with its reason.

cdk-nag AwsSolutions acknowledgements, the IAM wildcard grants (IAM, bucket and key policies), and the
checkov checks skipped on named resources all live here, so a reviewer reads every exception in one file.
Constructs acknowledge only entries from here, through kiln.constructs.review (which also holds the aspects that
apply CHECKOV_SKIPS and MANAGED_POLICY_REVIEWS). The actions of a reviewed grant are written here once, and the
construct that grants them takes them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import kiln.contracts.execution_policy as _exec
from kiln.catalog.platforms import service_fact
from kiln.constructs._checks import ARN_PARTITION
from kiln.contracts.cdk_bootstrap import CDK_BOOTSTRAP_ROLES, CFN_EXECUTION_ROLE
from kiln.contracts.environment import BUCKET_PURPOSES, DELETE_ORDER
from kiln.contracts.permissions import BOOTSTRAP_READS, LEFTOVER_READS, PARAMETER_READS, UNSCOPED_READS
from kiln.contracts.permissions_boundary import SERVICES as BOUNDARY_SERVICES
from kiln.contracts.ssm_documents import NON_INTERACTIVE_COMMAND_DOCUMENT, PORT_FORWARD_DOCUMENT, RUN_SHELL_DOCUMENT


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


# The parts of an ARN as cdk-nag names them in a finding: a pseudo parameter as <AWS::Partition>, or the value.
# WildcardGrant resources are str.format templates, so a regular expression's count is written {{12}}.
PARTITION = rf"(<AWS::Partition>|{ARN_PARTITION})"
REGION = r"(<AWS::Region>|[a-z0-9-]+)"
ACCOUNT = r"(<AWS::AccountId>|[0-9]{{12}})"
# A region or account part that is a wildcard in the grant itself, and the empty part of a global service's ARN.
ANY = r"\*"
NONE = ""


def arn_pattern(
    service: str, resource: str, *, region: str = REGION, account: str = ACCOUNT, partition: str = PARTITION
) -> str:
    """Return the pattern of SERVICE's ARNs whose resource part matches RESOURCE (a pattern itself).

    The partition, region and account match what cdk-nag names unless given: ANY for a grant's own wildcard, NONE
    for a part the ARN leaves empty (IAM's and S3's region, S3's account).
    """
    return f"arn:{partition}:{service}:{region}:{account}:{resource}"


def one_of(names: tuple[str, ...]) -> str:
    """Return a group matching any of NAMES (plain names: letters, digits and '-')."""
    return f"({'|'.join(names)})"


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
        arn_pattern("ec2", r"instance/\*"),
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

# The cluster-autoscaler's Pod Identity role (kiln.constructs.eks_scheduling; its actions are platforms.json's
# eks.cluster_autoscaler, from the AWS provider's README).
_AUTOSCALER = service_fact("eks", "cluster_autoscaler").value
CLUSTER_AUTOSCALER_GRANTS = (
    WildcardGrant(
        tuple(_AUTOSCALER["describe_actions"]),
        r"\*",
        "Auto Scaling and EC2 Describe calls take no resource scope; the autoscaler reads the groups it discovers by "
        "their tags, their launch templates and instance types, to know what a new node would offer.",
    ),
    WildcardGrant(
        tuple(_AUTOSCALER["scale_actions"]),
        r"\*",
        "Only on Auto Scaling groups tagged k8s.io/cluster-autoscaler/<this cluster>=owned (the condition beside it), "
        "which EKS puts on this cluster's managed node groups; Auto Scaling names groups with ids unknown before.",
    ),
    WildcardGrant(
        tuple(_AUTOSCALER["nodegroup_actions"]),
        arn_pattern("eks", r"nodegroup/{cluster}/\*/\*"),
        "Read-only, on this cluster's node groups (their names and ids are EKS's): labels, taints and the node "
        "template tags of a group with no nodes yet.",
    ),
)

# ParallelCluster's provider run as kiln's own role (a permissions boundary applies): what the provider template's own
# PclusterLambdaRole holds (platforms.json, parallelcluster.provider_custom_role).
_PCLUSTER_PROVIDER_ROLE = service_fact("parallelcluster", "provider_custom_role").value
PCLUSTER_PROVIDER_LOGS = Finding(
    managed_policy("service-role/AWSLambdaBasicExecutionRole"),
    "ParallelCluster's provider functions write their CloudWatch logs with the basic Lambda execution policy (logs "
    "only), as the provider template's own role does.",
)
PCLUSTER_PROVIDER_GRANTS = (
    WildcardGrant(
        tuple(_PCLUSTER_PROVIDER_ROLE["events_actions"]),
        arn_pattern("events", r"rule/\*"),
        "ParallelCluster's API manages the EventBridge rules of the clusters it runs, whose names it chooses; the "
        "provider template's own role holds exactly this grant (its EventsPolicy). This region and account only.",
    ),
    WildcardGrant(
        tuple(_PCLUSTER_PROVIDER_ROLE["bucket_actions"]),
        arn_pattern("s3", r"{stack}-\*(/\*)?", region=NONE, account=NONE),
        "The provider's own bucket (its PclusterCustomResourceBucket, where it keeps each request's event), named by "
        "CloudFormation after the provider's nested stack, whose name begins with this stack's: the template's own "
        "S3Policy names that bucket exactly, which kiln cannot (no output gives it). Objects and listing only, in "
        "this stack's buckets; the role that holds it already runs this cluster.",
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
# Creating its nodes' interfaces, tagging them as they are created, and the nodes' reading of their lifecycle scripts.
HYPERPOD_INTERFACE_CREATE = ("ec2:CreateNetworkInterface",)
HYPERPOD_INTERFACE_TAGS = ("ec2:CreateTags",)
HYPERPOD_LIFECYCLE_READS = ("s3:GetObject",)
HYPERPOD_ROLE_GRANTS = (
    WildcardGrant(
        HYPERPOD_DESCRIBE_ACTIONS,
        r"\*",
        "EC2 Describe calls have no resource-level scope; HyperPod reads the VPC, subnets, security groups, DHCP "
        "options and interfaces of its nodes.",
    ),
    WildcardGrant(
        HYPERPOD_INTERFACE_CREATE,
        arn_pattern("ec2", r"(network-interface|security-group)/\*"),
        "HyperPod creates its nodes' interfaces: the ec2:Vpc condition keeps the interfaces and the security "
        "groups they join in the cluster's VPC (the subnet is named exactly).",
    ),
    WildcardGrant(
        HYPERPOD_INTERFACE_ACTIONS,
        arn_pattern("ec2", r"network-interface/\*"),
        "HyperPod attaches, addresses and removes its nodes' interfaces: the ec2:Subnet condition limits this to "
        "interfaces in the cluster's compute subnet.",
    ),
    WildcardGrant(
        HYPERPOD_INTERFACE_TAGS,
        arn_pattern("ec2", r"network-interface/\*"),
        "Tags only while an interface is created (ec2:CreateAction condition); existing interfaces cannot be retagged.",
    ),
    WildcardGrant(
        HYPERPOD_LIFECYCLE_READS,
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
        arn_pattern("ecr", r"repository/\*", region=ANY, account=ANY),
        "HyperPod's EKS nodes pull the EKS add-ons' images and HyperPod's own (its health agent) from AWS's ECR "
        "registries, whose account and region differ by image (the EFA plugin's is in us-west-2 whatever the "
        "cluster's region), as AWS's reference execution role grants: image reads only.",
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
        arn_pattern("s3", r"cdk-[a-z0-9]+-assets-[^/]+(/\*)?", region=NONE, account=NONE),
        "CDK's BucketDeployment handler reads cluster.env and provisioning_parameters.json (HyperPod) or "
        "resolve-bootstrap.sh (ParallelCluster), which CDK stages in its asset bucket under content-hash keys, so CDK "
        "grants read on that bucket.",
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
        "CDK's BucketDeployment handler writes and prunes the node scripts (HyperPod's lifecycle scripts, "
        "ParallelCluster's OnNodeConfigured script) and gets read-write on the whole destination bucket; kiln's "
        "default bucket for them holds nothing else (a lifecycle_bucket or bootstrap_bucket you pass shares this "
        "grant). It is the one writer of that bucket kiln creates.",
    ),
)
LIFECYCLE_HANDLER_LOGS = Finding(
    managed_policy("service-role/AWSLambdaBasicExecutionRole"),
    "CDK's BucketDeployment handler writes its CloudWatch logs with the basic Lambda execution policy (logs only).",
)
LIFECYCLE_HANDLER_RUNTIME = Finding(
    "AwsSolutions-L1", "The BucketDeployment handler's runtime is pinned by aws-cdk-lib and moves with it."
)


# Tearing an environment down, as the TTL reaper and `kiln ci down` both do: delete its stacks while reading their
# state, events and resources; empty its buckets first (their tags say whose they are).
STACK_DELETE = ("cloudformation:DeleteStack",)
TEARDOWN_STACK_READS = (
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "cloudformation:ListStackResources",
)
TEARDOWN_BUCKET_READS = ("s3:GetBucketTagging", "s3:ListBucket", "s3:ListBucketVersions")
OBJECT_DELETES = ("s3:DeleteObject", "s3:DeleteObjectVersion")
# Reading and moving an environment's reaper schedule: the reaper reschedules itself; `kiln ci extend` and `down`
# move it.
RESCHEDULE_ACTIONS = ("scheduler:GetSchedule", "scheduler:UpdateSchedule")
# UpdateSchedule hands the schedule its invoke role again (to EventBridge Scheduler only).
PASS_ROLE = ("iam:PassRole",)

# The TTL reaper of a short-lived environment.
REAPER_STACK_ACTIONS = (*STACK_DELETE, *TEARDOWN_STACK_READS)
REAPER_GRANTS = (
    WildcardGrant(
        REAPER_STACK_ACTIONS,
        arn_pattern("cloudformation", rf"stack/{{environment}}-{one_of(DELETE_ORDER)}/\*"),
        "The reaper deletes its environment's stacks, named exactly; the trailing * is the stack id CloudFormation "
        "adds at creation, unknown at synthesis.",
    ),
    WildcardGrant(
        OBJECT_DELETES,
        arn_pattern("s3", rf"{{environment}}-{one_of(BUCKET_PURPOSES)}-{ACCOUNT}/\*", region=NONE, account=NONE),
        "The reaper empties its environment's non-retained buckets (named exactly) so their stacks can delete them; "
        "emptying a bucket means deleting every object in it.",
    ),
)


# The CI identity: the role GitHub Actions assumes for `kiln ci` (kiln/constructs/ci_identity.py), whose actions
# are these and the teardown's above.
ASSUME_ROLE = ("sts:AssumeRole",)
# Read-only calls that IAM cannot scope to a resource: granted on *.
LIST_STACKS = ("cloudformation:ListStacks",)
COMMAND_RESULTS = ("ssm:GetCommandInvocation", "ssm:ListCommandInvocations")
# The Service Authorization Reference lists no resource type (and no condition key) for ssm:CancelCommand, so IAM can
# grant it only on "*" (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html).
CANCEL_COMMAND = ("ssm:CancelCommand",)
SEND_COMMAND = ("ssm:SendCommand",)
START_SESSION = ("ssm:StartSession",)
TERMINATE_SESSION = ("ssm:TerminateSession",)
PCS_READS = ("pcs:GetCluster", "pcs:ListComputeNodeGroups")
HYPERPOD_READS = ("sagemaker:DescribeCluster", "sagemaker:ListClusterNodes")
EKS_CLUSTER_READS = ("eks:DescribeCluster", "eks:ListNodegroups")
NODEGROUP_READS = ("eks:DescribeNodegroup",)
# The kiln-owned buckets of an environment, by family (data, lifecycle; each with its -logs bucket): what kiln ci down
# reads by one pattern per family.
BUCKET_FAMILIES = tuple(kind for kind in BUCKET_PURPOSES if not kind.endswith("-logs"))
# An environment of one of the role's cluster names (at most 18 characters): <cluster>-<run>, the run a wildcard.
_CI_ENVIRONMENT = r"[a-z][a-z0-9-]{{0,17}}-\*"
_CI_INSTANCES = arn_pattern("ec2", r"instance/\*", region=ANY)
_CI_HYPERPOD_CLUSTERS = arn_pattern("sagemaker", r"cluster/\*", region=ANY)


def _ci_document(name: str) -> str:
    """Return the pattern of AWS's own SSM document NAME, in any region."""
    return arn_pattern("ssm", f"document/{name}", region=ANY, account=NONE)


# kiln's permissions boundary (kiln.contracts.permissions_boundary), which the CI identity stack creates.
BOUNDARY_GRANTS = (
    WildcardGrant(
        tuple(f"{service}:*" for service in BOUNDARY_SERVICES),
        r"\*",
        "A permissions boundary grants nothing: it caps what the roles carrying it may do at the services kiln's roles "
        "use, whatever their own policies say, and its Deny statements keep every such role from making or changing "
        "a role or user without this boundary, removing a boundary, editing this policy, or minting users, keys and "
        "trust policies. Each role's own policy grants its narrow permissions.",
    ),
)

CI_IDENTITY_GRANTS = (
    WildcardGrant(
        ASSUME_ROLE,
        arn_pattern(
            "iam",
            rf"role/cdk-{{qualifier}}-({'|'.join(CDK_BOOTSTRAP_ROLES)})-{ACCOUNT}-\*",
            region=NONE,
        ),
        "The CDK CLI deploys an environment through this account's CDK bootstrap roles of the one qualifier; their "
        "names end in the environment's region, which is not known when the role is made.",
    ),
    WildcardGrant(
        LIST_STACKS,
        r"\*",
        "ListStacks takes no resource scope; kiln ci sweep lists stacks to find expired environments.",
    ),
    WildcardGrant(
        COMMAND_RESULTS,
        r"\*",
        "Read-only: Run Command results take no resource scope; kiln reads the output of the commands it sent.",
    ),
    WildcardGrant(
        CANCEL_COMMAND,
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
        arn_pattern("ssm", r"parameter/aws/service/global-infrastructure/\*", region=ANY, account=NONE),
        "kiln preflight reads AWS's public parameters of the services each region offers, in any region.",
    ),
    WildcardGrant(
        BOOTSTRAP_READS,
        arn_pattern("iam", rf"role/cdk-{{qualifier}}-{CFN_EXECUTION_ROLE}-{ACCOUNT}-\*", region=NONE),
        "Read-only: kiln preflight lists the policies attached to the CDK bootstrap's CloudFormation execution role "
        "of the one qualifier (warning when it is AdministratorAccess); its name ends in the environment's region.",
    ),
    WildcardGrant(
        (*STACK_DELETE, *TEARDOWN_STACK_READS),
        arn_pattern("cloudformation", rf"stack/{_CI_ENVIRONMENT}/\*", region=ANY),
        "Stacks of the role's environments only (<cluster>-<run>, in the environment's region; CloudFormation "
        "appends the stack id); DeleteStack also needs the stack's kiln:environment tag to name an environment of the "
        "same cluster.",
    ),
    WildcardGrant(
        TEARDOWN_BUCKET_READS,
        arn_pattern("s3", rf"{_CI_ENVIRONMENT}-{one_of(BUCKET_FAMILIES)}\*-{ACCOUNT}", region=NONE, account=NONE),
        "Read-only: kiln ci down lists and reads the tags of an environment's buckets (<env>-data*-<account> and "
        "<env>-lifecycle*-<account>, one pattern per pair keeps five clusters in one inline policy) before emptying "
        "them. A long-lived cluster's <cluster>-data-<account> does not match (the run part is missing).",
    ),
    WildcardGrant(
        OBJECT_DELETES,
        arn_pattern("s3", rf"{_CI_ENVIRONMENT}-{one_of(BUCKET_PURPOSES)}-{ACCOUNT}/\*", region=NONE, account=NONE),
        "kiln ci down empties an environment's own four buckets (<env>-data, -data-logs, -lifecycle, -lifecycle-logs, "
        "each ending in the account id) before deleting its stacks, each purpose by its exact name "
        "(environment_bucket_name): no other bucket that merely starts with <env>-data, and not a long-lived "
        "cluster's <cluster>-data-<account> (the run part is missing).",
    ),
    WildcardGrant(
        RESCHEDULE_ACTIONS,
        arn_pattern("scheduler", rf"schedule/default/{_CI_ENVIRONMENT}-reaper", region=ANY),
        "kiln ci extend and down read and move the reaper schedule of the role's environments (<env>-reaper in the "
        "default group), in the environment's region.",
    ),
    WildcardGrant(
        PASS_ROLE,
        arn_pattern("iam", rf"role/{_CI_ENVIRONMENT}-reaper-invoke", region=NONE),
        "UpdateSchedule passes the schedule's own invoke role (<env>-reaper-invoke) again, and only to EventBridge "
        "Scheduler (iam:PassedToService).",
    ),
    WildcardGrant(
        SEND_COMMAND,
        _CI_INSTANCES,
        "Instance ids are unknown in advance: Run Command reaches only instances whose kiln:environment tag names one "
        "of the role's environments and that also carry a tag no user can set (aws: prefix): a ParallelCluster head "
        "node's aws:cloudformation:stack-name naming one of the role's environments (so a long-lived cluster whose "
        "stack is named like one, without kiln:environment, is out of reach), or a PCS node's "
        "aws:pcs:compute-node-group-id.",
    ),
    WildcardGrant(
        SEND_COMMAND,
        _ci_document(RUN_SHELL_DOCUMENT),
        "AWS's own shell document, the only Run Command document the role may use, in the environment's region.",
    ),
    WildcardGrant(
        START_SESSION,
        _ci_document(NON_INTERACTIVE_COMMAND_DOCUMENT),
        "AWS's own non-interactive session document (kiln ci run on HyperPod), in the environment's region; beside "
        "the port-forwarding one, the only session documents the role may use.",
    ),
    WildcardGrant(
        START_SESSION,
        _CI_INSTANCES,
        "Instance ids are unknown in advance: kiln ci run forwards a port to a private EKS API endpoint through a "
        "system node, and may start sessions only on instances whose kiln:environment tag names one of the role's "
        "environments (ssm:resourceTag condition) and that an Auto Scaling group launched (its "
        "aws:autoscaling:groupName tag, which no user can set), as EKS managed node groups' instances are.",
    ),
    WildcardGrant(
        START_SESSION,
        _ci_document(PORT_FORWARD_DOCUMENT),
        "AWS's own document for forwarding a port to a host the node reaches (kiln ci run on a private EKS endpoint), "
        "in the environment's region.",
    ),
    WildcardGrant(
        TERMINATE_SESSION,
        r"\*",
        "kiln ci run ends a HyperPod session that outlives its timeout and an EKS port forward once the command is "
        "done; session ids are Session Manager's, and the condition on the session's aws:ssmmessages:session-id tag "
        "(its starter's aws:userid) limits this to the role's own sessions.",
    ),
    WildcardGrant(
        START_SESSION,
        _CI_HYPERPOD_CLUSTERS,
        "Session Manager names a HyperPod node by its cluster's ARN, which holds a service-assigned id, not the "
        "cluster's name: sessions only on clusters tagged kiln:environment with one of the role's environments "
        "(aws:ResourceTag), as CloudFormation tags the environments' clusters.",
    ),
    WildcardGrant(
        PCS_READS,
        arn_pattern("pcs", r"cluster/\*", region=ANY),
        "Read-only: PCS cluster ARNs hold a service-assigned id, not the name, so any PCS cluster of this account.",
    ),
    WildcardGrant(
        HYPERPOD_READS,
        _CI_HYPERPOD_CLUSTERS,
        "Read-only: HyperPod cluster ARNs hold a service-assigned id, not the name, so any HyperPod cluster of this "
        "account.",
    ),
    WildcardGrant(
        EKS_CLUSTER_READS,
        arn_pattern("eks", f"cluster/{_CI_ENVIRONMENT}", region=ANY),
        "Read-only, on the EKS clusters of the role's environments (named after the environment), in its region.",
    ),
    WildcardGrant(
        NODEGROUP_READS,
        arn_pattern("eks", rf"nodegroup/{_CI_ENVIRONMENT}/\*/\*", region=ANY),
        "Read-only, on the node groups of the role's environments' EKS clusters (group names and ids are EKS's).",
    ),
)

# The CloudFormation execution policies `kiln ci identity` writes for `cdk bootstrap` (kiln.contracts.execution_policy):
# JSON documents, not template resources, reviewed pair by pair all the same (execution_policy_review).
_X_ACCOUNT = r"<aws:PrincipalAccount>"
_X_ENV = _CI_ENVIRONMENT
_X_IN_REGIONS = "in any region (the environment's is not known when the policy is written)"
_X_BY_ID = (
    "Its ARNs hold service-assigned ids, not names kiln chooses, so no pattern can narrow them to kiln's environments: "
    "this reaches every such resource of the account (the residual risk kiln's docs name)."
)


def _x_arn(service: str, resource: str, *, region: str = ANY, account: str = _X_ACCOUNT) -> str:
    """Return the pattern of SERVICE's ARNs in an execution policy: a JSON document, so the partition is a pattern and
    the account the policy variable, in any region unless given."""
    return arn_pattern(service, resource, region=region, account=account, partition=ARN_PARTITION)


CI_EXECUTION_GRANTS = (
    WildcardGrant(
        _exec.STACK_ACTIONS,
        _x_arn("cloudformation", rf"stack/{_X_ENV}/\*"),
        "Nested stacks of the environments' stacks (named <parent>-<id>-<suffix>, so <cluster>-*); CloudFormation "
        f"appends the stack id; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.TRANSFORM_ACTIONS,
        _x_arn("cloudformation", "transform/Serverless-2016-10-31", account="aws"),
        "ParallelCluster's cluster provider template uses AWS's Serverless transform, which CloudFormation runs with "
        f"the execution role's CreateChangeSet on the transform itself; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        (*_exec.ROLE_ACTIONS, *_exec.ATTACH_ACTIONS),
        _x_arn("iam", rf"role/((aws-pcs/)?{_X_ENV}|ParallelClusterLambdaRole-\*)", region=NONE),
        "Roles of the environments' stacks only: CloudFormation names them <stack>-<id>-<suffix> (<cluster>-*, under "
        "/aws-pcs/ for PCS nodes), ParallelCluster's provider names its own ParallelClusterLambdaRole-<stack id>. "
        "Created only with kiln's permissions boundary (iam:PermissionsBoundary) and a kiln:environment tag of the "
        "environments (aws:RequestTag); inline and attached policies and the boundary change only on roles so tagged "
        "that carry that boundary; trust, tags and deletion only on roles so tagged; passed only when so tagged, to "
        "the services kiln's stacks hand roles to (iam:PassedToService). AttachRolePolicy only of kiln's AWS managed "
        "policies and of policies of these names (iam:PolicyARN). The boundary denies every role inside it making or "
        "changing a role without it, so no role made this way exceeds it.",
    ),
    WildcardGrant(
        _exec.POLICY_ACTIONS,
        _x_arn(
            "iam",
            rf"policy/((parallelcluster/)?{_X_ENV}|ParallelCluster\*|DefaultParallelClusterIamAdminPolicy-\*)",
            region=NONE,
        ),
        "Managed policies of the environments' stacks (<cluster>-*, under /parallelcluster/ for ParallelCluster's "
        "nodes) and those ParallelCluster's provider names after its stack id; no other policy of the account.",
    ),
    WildcardGrant(
        _exec.INSTANCE_PROFILE_ACTIONS,
        _x_arn("iam", f"instance-profile/(aws-pcs/)?{_X_ENV}", region=NONE),
        "Instance profiles of the environments' stacks (<cluster>-*, under /aws-pcs/ for PCS nodes) only.",
    ),
    WildcardGrant(
        _exec.LINKED_ROLE_ACTIONS,
        _x_arn("iam", r"role/aws-service-role/\*", region=NONE),
        "EKS, PCS, FSx, HyperPod, Grafana and Managed Prometheus create their service-linked roles on first use; such "
        "a role holds only its service's AWS-defined policy and only that service assumes it.",
    ),
    WildcardGrant(
        _exec.FSX_LINKED_ROLE_ACTIONS,
        _x_arn("iam", r"role/aws-service-role/s3\.data-source\.lustre\.fsx\.amazonaws\.com/\*", region=NONE),
        "FSx for Lustre writes the policy of its S3 data-repository service-linked role with the caller's "
        "permissions; that role only.",
    ),
    WildcardGrant(
        _exec.BUCKET_ACTIONS,
        _x_arn("s3", _X_ENV, region=NONE, account=NONE),
        "Buckets of the environments' stacks only: kiln names them <env>-<purpose>-<account>, CloudFormation names "
        "the rest after the stack (<cluster>-*).",
    ),
    WildcardGrant(
        _exec.OBJECT_ACTIONS,
        _x_arn("s3", rf"{_X_ENV}/\*", region=NONE, account=NONE),
        "Objects of the environments' buckets only (CloudFormation empties nothing; the handler's delete and ACL "
        "calls).",
    ),
    WildcardGrant(
        _exec.CODE_READS,
        _x_arn(
            "s3", rf"(cdk-{{qualifier}}-assets-{_X_ACCOUNT}-\*|\*-aws-parallelcluster)/\*", region=NONE, account=NONE
        ),
        "Read-only: Lambda reads function and layer code with the caller's permissions, from the CDK bootstrap's "
        "asset bucket of the one qualifier (its name ends in the region) and ParallelCluster's public regional "
        "buckets.",
    ),
    WildcardGrant(
        _exec.FUNCTION_ACTIONS,
        _x_arn("lambda", rf"function:({_X_ENV}|pcluster-cfn-\*)"),
        "Functions of the environments' stacks (<stack>-<id>-<suffix>, so <cluster>-*) and ParallelCluster's "
        "provider function (pcluster-cfn-<stack id>); InvokeFunction is how CloudFormation calls a custom "
        f"resource's provider; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.LAYER_ACTIONS,
        _x_arn("lambda", r"layer:\*"),
        "CDK's kubectl and AWS CLI layers and ParallelCluster's (PCLayer-<stack id>) are not named after the stack. "
        "A layer is code a function opts into; publishing one grants nothing.",
    ),
    WildcardGrant(
        _exec.LOG_GROUP_ACTIONS,
        _x_arn("logs", rf"log-group:({_X_ENV}|/aws/lambda/pcluster-cfn-\*)"),
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
        _x_arn("kms", r"key/\*"),
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
        _exec.EC2_TAGGING,
        r"\*",
        "EC2 tags only as a resource is created (ec2:CreateAction set by the creating call) or on resources already "
        "tagged kiln:environment with one of the environments: CI cannot put an environment's tag on someone else's "
        "resource.",
    ),
    WildcardGrant(
        _exec.DESTRUCTIVE_ACTIONS,
        r"\*",
        "Terminating instances, deleting file systems, their data repository associations and HyperPod clusters or "
        "nodes: ids are the services', so only resources tagged kiln:environment with one of the environments and "
        "aws:cloudformation:stack-name with a stack of theirs (a tag of AWS's no caller can set): what the "
        "environments' own stacks created.",
    ),
    WildcardGrant(
        _exec.UNSCOPED_READS,
        r"\*",
        "Read-only calls the handlers make beside their own service's (Lambda's, Grafana's, the scraper's, flow "
        "logs', the VPC endpoint's), none of which kiln could scope to a name.",
    ),
    WildcardGrant(
        _exec.EKS_ACTIONS,
        _x_arn("eks", f"(cluster|nodegroup|addon|access-entry|podidentityassociation)/{_X_ENV}"),
        "EKS clusters of the environments (named after the environment) and what is inside them (their ARNs start "
        f"with the cluster's name); {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.PCS_ACTIONS,
        _x_arn("pcs", r"cluster/\*"),
        f"PCS clusters, their node groups and queues. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.CAPACITY_READS,
        r"\*",
        "Read-only: PCS describes the capacity block or reservation a compute node group names with its caller's "
        "credentials (AWS's PCS permissions pages); EC2's Describe calls take no resource scope.",
    ),
    WildcardGrant(
        _exec.PCS_SECRET_ACTIONS,
        _x_arn("secretsmanager", r"secret:\*"),
        "PCS creates each cluster's Slurm key as a secret with the caller's permissions. Create and tag only: no "
        "secret can be read or changed.",
    ),
    WildcardGrant(
        _exec.HYPERPOD_ACTIONS,
        _x_arn("sagemaker", r"cluster/\*"),
        f"HyperPod clusters. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.FSX_ACTIONS,
        r"\*",
        f"Lustre file systems and their data repository associations. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.PROMETHEUS_ACTIONS,
        _x_arn("aps", r"\*"),
        f"Managed Prometheus workspaces and scrapers. {_X_BY_ID}",
    ),
    WildcardGrant(
        _exec.GRAFANA_ACTIONS,
        _x_arn("grafana", r"/workspaces/\*"),
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
        _x_arn("ssm", r"parameter/CFN-\*"),
        "CDK's EKS construct keeps a parameter without a name; CloudFormation names such parameters CFN-<id>-<suffix>. "
        "No other parameter of the account.",
    ),
    WildcardGrant(
        _exec.DOCUMENT_ACTIONS,
        _x_arn("ssm", f"document/kiln-{_X_ENV}-session"),
        "The environments' own Session documents (spec session_logs: kiln-<env>-session), which log their sessions; "
        f"no other document of the account; {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.SCHEDULE_ACTIONS,
        _x_arn("scheduler", f"schedule/default/{_X_ENV}"),
        f"The reapers' schedules (<env>-reaper in the default group); {_X_IN_REGIONS}.",
    ),
    WildcardGrant(
        _exec.TOPIC_ACTIONS,
        _x_arn("sns", _X_ENV),
        f"The reapers' alarm topics (<env>-reaper-alarm); {_X_IN_REGIONS}.",
    ),
)

# Buckets (kiln/constructs/bucket.py): their bucket policies.
BUCKET_AUTO_DELETE = WildcardGrant(
    ("s3:PutBucketPolicy", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*"),
    r"{bucket}(/\*)?",
    "CDK's auto-delete handler empties a bucket that is not retained (CI environments, the HyperPod lifecycle "
    "bucket, ParallelCluster's bootstrap bucket) when its stack is deleted; the bucket policy lets that handler's "
    "role alone list and delete in this bucket.",
)
ACCESS_LOG_DELIVERY = WildcardGrant(
    ("s3:PutObject",),
    r"{bucket}/{prefix}\*",
    "S3's logging service writes the access logs of the one source bucket (aws:SourceArn condition) under one "
    "prefix; the * is the key of each log object.",
)

# Session logs (kiln/constructs/session_logs.py): the nodes' policy, one grant per destination.
SESSION_LOG_GROUPS = WildcardGrant(
    ("logs:DescribeLogGroups",),
    arn_pattern("logs", r"log-group:\*"),
    "SSM Agent lists log groups to check that the session log group exists and is encrypted before it streams a "
    "session there (platforms.json, systems_manager.session_logging); a read of this account's groups in this region, "
    "no log data. Writing is granted on the cluster's group alone.",
)
SESSION_LOG_OBJECTS = WildcardGrant(
    ("s3:PutObject",),
    r"{bucket}/session-logs/\*",
    "SSM Agent writes each session's log as an object under session-logs/ in the cluster's bucket; the * is the key "
    "of each log object, named by the session. No read, list or delete.",
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
# them with the other attachments (kiln.contracts.iam_wildcards.managed_policy_uses).
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
    # kiln's permissions boundary (kiln/contracts/permissions_boundary.py), which the CI identity stack creates.
    *(
        CheckovSkip(
            check,
            "AWS::IAM::ManagedPolicy",
            (r"Identity/PermissionsBoundary/Resource",),
            f"kiln's permissions boundary ({what} is what checkov sees in its service-wide Allow): a boundary grants "
            "nothing, it caps the roles that carry it at the services kiln's roles use, and its Deny statements forbid "
            "making or changing a role or user without it, removing a boundary, editing it, minting users, keys "
            "or trust policies, and passing, assuming or running code as a role, stack, function or instance not "
            "tagged kiln:environment. Each role's own policy grants its narrow permissions.",
        )
        for check, what in (
            ("CKV_AWS_107", "credentials exposure"),
            ("CKV_AWS_108", "data exfiltration"),
            ("CKV_AWS_109", "permissions management without constraints"),
            ("CKV_AWS_111", "write access without constraints"),
        )
    ),
)
