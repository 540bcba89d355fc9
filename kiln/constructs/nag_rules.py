"""The cdk-nag AwsSolutions findings kiln accepts: one reviewed list, every entry with its reason.

Constructs acknowledge only entries from here, so a reviewer reads every accepted finding in one file.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    "Session Manager is how operators reach private nodes (no SSH ingress). AWS's policy for it is broader than "
    "sessions alone: it also lets a node read this account's SSM parameters and run Run Command documents.",
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
    SSM_CORE,
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
HYPERPOD_INTERFACE_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
)
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
