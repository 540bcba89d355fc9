"""The cdk-nag AwsSolutions findings kiln accepts: one reviewed list, every entry with its reason.

Constructs acknowledge only entries from here, so a reviewer reads every accepted finding in one file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One accepted cdk-nag finding: its rule id (with the finding's own suffix) and why it is acceptable."""

    rule: str
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
    "Session Manager is how operators reach private nodes (no SSH ingress); AWS maintains this minimal policy.",
)

# EKS.
EKS_CLUSTER_ROLE = Finding(
    managed_policy("AmazonEKSClusterPolicy"), "EKS requires this AWS-maintained policy on its cluster service role."
)
EKS_NODE_POLICIES = (
    Finding(
        managed_policy("AmazonEKSWorkerNodePolicy"),
        "EKS requires this AWS-maintained policy for nodes to join the cluster.",
    ),
    Finding(
        managed_policy("AmazonEKS_CNI_Policy"),
        "The VPC CNI on every node assigns pod addresses with this AWS-maintained policy.",
    ),
    Finding(
        managed_policy("AmazonEC2ContainerRegistryPullOnly"),
        "Nodes pull EKS system images; pull-only, nothing else in ECR.",
    ),
    SSM_CORE,
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
    Finding(
        managed_policy("AmazonEC2ContainerRegistryReadOnly"),
        "CDK's kubectl handler may pull OCI Helm charts from ECR.",
    ),
)
KUBECTL_HANDLER_RUNTIME = Finding(
    "AwsSolutions-L1", "CDK picks the kubectl handler's Python runtime for the handler code it ships."
)
KUBECTL_HANDLER_VERSIONS = "CDK's provider framework may invoke any version of the one kubectl handler function."
ECR_PUBLIC_POLICY = "AmazonElasticContainerRegistryPublicReadOnly"


def kubectl_ecr_public(policy_expression: dict) -> Finding:
    """Return the finding of the kubectl handler's conditional ECR Public policy (cdk-nag names it by its JSON)."""
    return Finding(
        f"AwsSolutions-IAM4[Policy::{json.dumps(policy_expression, separators=(',', ':'))}]",
        "CDK's kubectl handler may pull OCI Helm charts from ECR Public (aws partition only).",
    )


# SageMaker HyperPod.
HYPERPOD_INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
HYPERPOD_INSTANCE_ROLE = Finding(
    managed_policy(HYPERPOD_INSTANCE_POLICY),
    "AWS's minimal policy for HyperPod cluster instances, which the service documents as required.",
)
HYPERPOD_ROLE_WILDCARDS = (
    "Network-interface actions HyperPod needs take no resource scope (Describe*) or act on interfaces it creates; "
    "S3 reads are limited to the lifecycle prefix."
)
LIFECYCLE_HANDLER = (
    "CDK's BucketDeployment handler copies the lifecycle scripts from the CDK asset bucket into the lifecycle "
    "bucket, which holds nothing else; it writes its logs with the basic Lambda role."
)
LIFECYCLE_HANDLER_LOGS = Finding(managed_policy("service-role/AWSLambdaBasicExecutionRole"), LIFECYCLE_HANDLER)
LIFECYCLE_HANDLER_RUNTIME = Finding(
    "AwsSolutions-L1", "The BucketDeployment handler's runtime is pinned by aws-cdk-lib and moves with it."
)
