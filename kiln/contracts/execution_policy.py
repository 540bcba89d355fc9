"""The CloudFormation execution policies for kiln's CI stacks, for `cdk bootstrap` to hand CloudFormation, not admin.

`cdk deploy` works through the CDK bootstrap's deploy role, which passes CloudFormation the bootstrap's execution
role; a default `cdk bootstrap` gives that role AdministratorAccess, so whoever may deploy may create anything.
`kiln ci identity` writes these customer managed policy documents beside its assembly, for
`cdk bootstrap --cloudformation-execution-policies` (https://docs.aws.amazon.com/cdk/v2/guide/ref-cli-cmd-bootstrap.html).

The actions are those CloudFormation's resource handlers list for the resource types kiln's CI stacks hold (the
registry schemas' handlers.*.permissions, which cfn-lint ships; a test checks every example's types against them),
less the mutating ones of features kiln never sets (NOT_GRANTED, each with its reason). Resources are scoped to
kiln's names where the ARN holds a name kiln chooses: <cluster>-* for stacks, roles, policies, buckets, functions,
log groups, EKS clusters and schedules. Services whose ARNs hold only service-assigned ids (EC2, PCS, HyperPod, FSx,
Managed Prometheus, Managed Grafana) are granted on their id wildcards; every wildcard pair has a reviewed reason in
kiln.constructs.acknowledgements.CI_EXECUTION_GRANTS. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kiln.contracts.cdk_bootstrap import DEFAULT_CDK_QUALIFIER
from kiln.contracts.errors import Failure
from kiln.contracts.permissions_boundary import (
    BOUNDARY_NAME,
    BOUNDARY_REMOVAL,
    PERMISSIONS_BOUNDARY_KEY,
    POLICY_EDITS,
    boundary_arn,
)
from kiln.contracts.tags import TAG_ENVIRONMENT

# IAM counts a managed policy's characters without white space; 6,144 at most
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html).
MANAGED_POLICY_MAX_CHARS = 6144
# A role holds 10 managed policies unless the quota is raised (same page); the bootstrap's execution role holds
# only these.
MAX_POLICIES = 10
# The account of whoever the policy is attached to, as an IAM policy variable: a global condition key, usable in
# Resource and Condition values (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html),
# so the documents need no account id.
ACCOUNT = "${aws:PrincipalAccount}"
# ParallelCluster's templates name these themselves, from their stack id, not from kiln's stack: the cluster
# provider's function pcluster-cfn-<id>, and the policies template's role ParallelClusterLambdaRole-<id> and policies
# ParallelClusterClusterPolicy1-<id>, DefaultParallelClusterIamAdminPolicy-<id> and the like (aws-parallelcluster:
# cloudformation/custom_resource/cluster.yaml, cloudformation/policies/parallelcluster-policies.yaml). In CI kiln nests
# the policies template itself with the boundary (its PermissionsBoundaryPolicy) and gives the provider a role of its
# own (CustomLambdaRole), so the provider makes no role: every role here is created with the boundary
# (tests/stacks/test_permissions_boundary.py evaluates each).
PCLUSTER_FUNCTION = "pcluster-cfn-*"
PCLUSTER_ROLE = "ParallelClusterLambdaRole-*"
PCLUSTER_POLICIES = ("ParallelCluster*", "DefaultParallelClusterIamAdminPolicy-*")
# Its template uses the AWS::Serverless transform: CloudFormation needs CreateChangeSet on the transform's ARN
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-template.html).
SERVERLESS_TRANSFORM = "transform/Serverless-2016-10-31"
# FSx for Lustre links a file system to S3 through this service-linked role, whose policy FSx writes with the
# caller's permissions.
FSX_S3_LINKED_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*"
# The AWS managed policies kiln's roles attach (ManagedPolicyArns of the examples' templates) and those
# ParallelCluster's provider attaches to its own roles.
AWS_MANAGED_POLICIES = (
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonEKSClusterPolicy",
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonSSMManagedInstanceCore",
    "AmazonSageMakerClusterInstanceRolePolicy",
    "AWSXRayDaemonWriteAccess",
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
)

STACK_ACTIONS = (
    "cloudformation:CreateStack",
    "cloudformation:DeleteStack",
    "cloudformation:DescribeStacks",
    "cloudformation:GetStackPolicy",
    "cloudformation:GetTemplate",
    "cloudformation:SetStackPolicy",
    "cloudformation:UpdateStack",
    "cloudformation:UpdateTerminationProtection",
)
# Roles: reads on kiln's names; creation only with kiln's boundary and a kiln:environment tag of the environments;
# policy and boundary changes only of such roles, with the boundary (iam:PermissionsBoundary: the Service Authorization
# Reference lists it for CreateRole, PutRolePolicy, DeleteRolePolicy, AttachRolePolicy, DetachRolePolicy and
# PutRolePermissionsBoundary, https://docs.aws.amazon.com/service-authorization/latest/reference/
# list_awsidentityandaccessmanagementiam.html); the rest only of roles tagged with one of the environments.
ROLE_READS = ("iam:GetRole", "iam:GetRolePolicy", "iam:ListAttachedRolePolicies", "iam:ListRolePolicies")
ROLE_CREATE = ("iam:CreateRole",)
BOUNDED_ROLE_CHANGES = (
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
)
TAGGED_ROLE_CHANGES = (
    "iam:DeleteRole",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:UpdateAssumeRolePolicy",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
)
PASS_ROLE = ("iam:PassRole",)
ROLE_ACTIONS = (*ROLE_READS, *ROLE_CREATE, *BOUNDED_ROLE_CHANGES, *TAGGED_ROLE_CHANGES, *PASS_ROLE)
ATTACH_ACTIONS = ("iam:AttachRolePolicy",)
# The services CloudFormation hands kiln's roles to (iam:PassedToService, a condition key of iam:PassRole in the same
# reference): the service each role trusts (tests/stacks/test_permissions_boundary.py holds every trusted service of
# every CI template to this list) and the service that hands it on: Lambda (functions, ParallelCluster's provider),
# EC2 (instance profiles and launch templates), EKS (clusters and node groups; pods.eks for Pod Identity
# associations), PCS (node groups' instance profiles), SageMaker (HyperPod's execution role), EventBridge Scheduler (the
# reaper's invoke role), VPC flow logs (their delivery role), Managed Grafana (its workspace role) and Managed
# Prometheus's collector (a scraper's source role).
PASSED_TO_SERVICES = (
    "ec2.amazonaws.com",
    "eks.amazonaws.com",
    "grafana.amazonaws.com",
    "lambda.amazonaws.com",
    "pcs.amazonaws.com",
    "pods.eks.amazonaws.com",
    "sagemaker.amazonaws.com",
    "scheduler.amazonaws.com",
    "scraper.aps.amazonaws.com",
    "vpc-flow-logs.amazonaws.com",
)
# A role's tags are aws:ResourceTag/<key> to IAM, and a tag a request sets is aws:RequestTag/<key>
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_iam-tags.html): CloudFormation passes a role's Tags, the
# stacks' kiln:environment among them, in CreateRole.
RESOURCE_TAG = f"aws:ResourceTag/{TAG_ENVIRONMENT}"
REQUEST_TAG = f"aws:RequestTag/{TAG_ENVIRONMENT}"
# Tags with the aws: prefix are AWS's: nobody can set them
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-resource-tags.html), and
# CloudFormation tags what it creates with its stack's name. Destructive calls need both tags: kiln:environment (the
# environment) and this one (created by a stack of the environments: <env>-<part>, or a nested stack of one), so a
# kiln:environment tag put on someone else's instance, file system or cluster does not make it deletable.
STACK_NAME_TAG = "aws:ResourceTag/aws:cloudformation:stack-name"
# Destructive calls on resources whose ARNs hold service-assigned ids, limited to resources tagged with the
# environments: EC2 (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html: instance
# supports aws:ResourceTag/${TagKey}), FSx (list_amazonfsx.html: file-system and association resources support
# aws:ResourceTag/${TagKey}), SageMaker (list_amazonsagemaker.html: cluster supports aws:ResourceTag/${TagKey}).
DESTRUCTIVE_ACTIONS = (
    "ec2:TerminateInstances",
    "fsx:DeleteDataRepositoryAssociation",
    "fsx:DeleteFileSystem",
    "sagemaker:BatchDeleteClusterNodes",
    "sagemaker:DeleteCluster",
)
# EC2 tags only at creation (ec2:CreateAction names the creating call, list_amazonec2.html; "Grant permission to tag
# resources during creation", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html)
# or on resources already tagged with the environments: never kiln:environment onto another owner's resource.
EC2_TAGGING = ("ec2:CreateTags", "ec2:DeleteTags")
POLICY_ACTIONS = (
    "iam:CreatePolicy",
    "iam:CreatePolicyVersion",
    "iam:DeletePolicy",
    "iam:DeletePolicyVersion",
    "iam:GetPolicy",
    "iam:GetPolicyVersion",
    "iam:ListEntitiesForPolicy",
    "iam:ListPolicyVersions",
)
INSTANCE_PROFILE_ACTIONS = (
    "iam:AddRoleToInstanceProfile",
    "iam:CreateInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:GetInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:TagInstanceProfile",
)
LINKED_ROLE_ACTIONS = ("iam:CreateServiceLinkedRole", "iam:DeleteServiceLinkedRole")
FSX_LINKED_ROLE_ACTIONS = ("iam:AttachRolePolicy", "iam:PutRolePolicy")
BUCKET_ACTIONS = (
    "s3:CreateBucket",
    "s3:CreateBucketMetadataTableConfiguration",
    "s3:DeleteBucket",
    "s3:DeleteBucketAnalyticsConfiguration",
    "s3:DeleteBucketCors",
    "s3:DeleteBucketEncryption",
    "s3:DeleteBucketLifecycle",
    "s3:DeleteBucketMetadataTableConfiguration",
    "s3:DeleteBucketMetricsConfiguration",
    "s3:DeleteBucketPolicy",
    "s3:DeleteBucketReplication",
    "s3:DeleteBucketWebsite",
    "s3:GetAccelerateConfiguration",
    "s3:GetAnalyticsConfiguration",
    "s3:GetBucketAbac",
    "s3:GetBucketAcl",
    "s3:GetBucketCORS",
    "s3:GetBucketLogging",
    "s3:GetBucketMetadataTableConfiguration",
    "s3:GetBucketNotification",
    "s3:GetBucketObjectLockConfiguration",
    "s3:GetBucketOwnershipControls",
    "s3:GetBucketPolicy",
    "s3:GetBucketPublicAccessBlock",
    "s3:GetBucketTagging",
    "s3:GetBucketVersioning",
    "s3:GetBucketWebsite",
    "s3:GetEncryptionConfiguration",
    "s3:GetIntelligentTieringConfiguration",
    "s3:GetInventoryConfiguration",
    "s3:GetLifecycleConfiguration",
    "s3:GetMetricsConfiguration",
    "s3:GetReplicationConfiguration",
    "s3:ListBucket",
    "s3:ListTagsForResource",
    "s3:PutAccelerateConfiguration",
    "s3:PutAnalyticsConfiguration",
    "s3:PutBucketAbac",
    "s3:PutBucketAcl",
    "s3:PutBucketCORS",
    "s3:PutBucketLogging",
    "s3:PutBucketNotification",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutBucketOwnershipControls",
    "s3:PutBucketPolicy",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketReplication",
    "s3:PutBucketTagging",
    "s3:PutBucketVersioning",
    "s3:PutBucketWebsite",
    "s3:PutEncryptionConfiguration",
    "s3:PutIntelligentTieringConfiguration",
    "s3:PutInventoryConfiguration",
    "s3:PutLifecycleConfiguration",
    "s3:PutMetricsConfiguration",
    "s3:PutObjectLockConfiguration",
    "s3:PutReplicationConfiguration",
    "s3:TagResource",
    "s3:UntagResource",
    "s3:UpdateBucketMetadataAnnotationTableConfiguration",
    "s3:UpdateBucketMetadataInventoryTableConfiguration",
    "s3:UpdateBucketMetadataJournalTableConfiguration",
)
OBJECT_ACTIONS = ("s3:DeleteObject", "s3:PutObjectAcl")
CODE_READS = ("s3:GetObject", "s3:GetObjectVersion")
FUNCTION_ACTIONS = (
    "lambda:AssociateRuntimeAlias",
    "lambda:CreateFunction",
    "lambda:DeleteFunction",
    "lambda:DeleteFunctionCodeSigningConfig",
    "lambda:DeleteFunctionConcurrency",
    "lambda:GetFunction",
    "lambda:GetFunctionCodeSigningConfig",
    "lambda:GetFunctionRecursionConfig",
    "lambda:GetFunctionScalingConfig",
    "lambda:GetRuntimeManagementConfig",
    "lambda:InvokeFunction",
    "lambda:PublishVersion",
    "lambda:PutFunctionCodeSigningConfig",
    "lambda:PutFunctionConcurrency",
    "lambda:PutFunctionRecursionConfig",
    "lambda:PutFunctionScalingConfig",
    "lambda:PutRuntimeManagementConfig",
    "lambda:TagResource",
    "lambda:UntagResource",
    "lambda:UpdateFunctionCode",
    "lambda:UpdateFunctionConfiguration",
)
# ParallelCluster's provider function runs as its Lambda role: its code and configuration (layers, role) stay as the
# provider template, pinned by version, made them. Its template's code is inline and fixed per ParallelCluster release,
# so an update of kiln's stacks never changes it (a new release means a new environment).
PCLUSTER_FUNCTION_ACTIONS = tuple(
    a for a in FUNCTION_ACTIONS if a not in ("lambda:UpdateFunctionCode", "lambda:UpdateFunctionConfiguration")
)
LAYER_ACTIONS = (
    "lambda:DeleteLayerVersion",
    "lambda:GetLayerVersion",
    "lambda:PublishLayerVersion",
)
LOG_GROUP_ACTIONS = (
    "logs:AssociateKmsKey",
    "logs:CreateLogGroup",
    "logs:DeleteDataProtectionPolicy",
    "logs:DeleteIndexPolicy",
    "logs:DeleteLogGroup",
    "logs:DeleteRetentionPolicy",
    "logs:DescribeIndexPolicies",
    "logs:DisassociateKmsKey",
    "logs:GetDataProtectionPolicy",
    "logs:ListTagsForResource",
    "logs:PutBearerTokenAuthentication",
    "logs:PutDataProtectionPolicy",
    "logs:PutIndexPolicy",
    "logs:PutLogGroupDeletionProtection",
    "logs:PutRetentionPolicy",
    "logs:TagResource",
    "logs:UntagResource",
)
# Vended log deliveries, the account's log resource policies and log group listing take no resource scope.
LOGS_ACCOUNT_ACTIONS = (
    "logs:CreateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:DeleteResourcePolicy",
    "logs:DescribeLogGroups",
    "logs:DescribeResourcePolicies",
    "logs:GetLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:UpdateLogDelivery",
)
KEY_CREATE = ("kms:CreateKey",)
KEY_ACTIONS = (
    "kms:CreateGrant",
    "kms:DescribeKey",
    "kms:DisableKey",
    "kms:DisableKeyRotation",
    "kms:EnableKey",
    "kms:EnableKeyRotation",
    "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:ListResourceTags",
    "kms:PutKeyPolicy",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:UpdateKeyDescription",
)
EC2_ACTIONS = (
    "ec2:AllocateAddress",
    "ec2:AssignPrivateNatGatewayAddress",
    "ec2:AssociateAddress",
    "ec2:AssociateNatGatewayAddress",
    "ec2:AssociateRouteTable",
    "ec2:AssociateSubnetCidrBlock",
    "ec2:AttachInternetGateway",
    "ec2:AttachNetworkInterface",
    "ec2:AuthorizeSecurityGroupEgress",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:CreateFleet",
    "ec2:CreateFlowLogs",
    "ec2:CreateInternetGateway",
    "ec2:CreateLaunchTemplate",
    "ec2:CreateLaunchTemplateVersion",
    "ec2:CreateNatGateway",
    "ec2:CreateNetworkInterface",
    "ec2:CreatePlacementGroup",
    "ec2:CreateRoute",
    "ec2:CreateRouteTable",
    "ec2:CreateSecurityGroup",
    "ec2:CreateSubnet",
    "ec2:CreateVpc",
    "ec2:CreateVpcEndpoint",
    "ec2:DeleteFlowLogs",
    "ec2:DeleteInternetGateway",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeleteNatGateway",
    "ec2:DeleteNetworkInterface",
    "ec2:DeletePlacementGroup",
    "ec2:DeleteRoute",
    "ec2:DeleteRouteTable",
    "ec2:DeleteSecurityGroup",
    "ec2:DeleteSubnet",
    "ec2:DeleteVpc",
    "ec2:DeleteVpcEndpoints",
    "ec2:DescribeAddresses",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeFlowLogs",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeKeyPairs",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeNatGateways",
    "ec2:DescribeNetworkAcls",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribePlacementGroups",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroupRules",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSnapshots",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeVpcEncryptionControls",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeVpcs",
    "ec2:DescribeVpnGateways",
    "ec2:DetachInternetGateway",
    "ec2:DetachNetworkInterface",
    "ec2:DisassociateAddress",
    "ec2:DisassociateNatGatewayAddress",
    "ec2:DisassociateRouteTable",
    "ec2:DisassociateSubnetCidrBlock",
    "ec2:GetManagedPrefixListEntries",
    "ec2:GetSecurityGroupsForVpc",
    "ec2:ModifyLaunchTemplate",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:ModifySubnetAttribute",
    "ec2:ModifyVpcAttribute",
    "ec2:ModifyVpcEndpoint",
    "ec2:ModifyVpcTenancy",
    "ec2:ReleaseAddress",
    "ec2:ReplaceRoute",
    "ec2:ReplaceRouteTableAssociation",
    "ec2:RevokeSecurityGroupEgress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:RunInstances",
    "ec2:UnassignPrivateNatGatewayAddress",
    "ec2:UpdateSecurityGroupRuleDescriptionsEgress",
    "ec2:UpdateSecurityGroupRuleDescriptionsIngress",
)
# Reads the handlers list beside EC2's (Lambda's, flow logs', Grafana's, the scraper's, the VPC endpoint's): none
# takes a resource scope that kiln could name.
UNSCOPED_READS = (
    "autoscaling:DescribeTags",
    "elasticfilesystem:DescribeMountTargets",
    "kafka:DescribeCluster",
    "kafka:DescribeClusterV2",
    "kafka:GetBootstrapBrokers",
    "kafka:ListClusters",
    "kafka:ListNodes",
    "lambda:GetCodeSigningConfig",
    "organizations:DescribeOrganization",
    "s3files:ListMountTargets",
    "s3tables:GetTable",
    "s3tables:GetTableMetadataLocation",
    "vpc-lattice:DescribeServiceNetworkVpcEndpointAssociation",
)
EKS_ACTIONS = (
    "eks:ActivateCertificateAuthority",
    "eks:AssociateAccessPolicy",
    "eks:CreateAccessEntry",
    "eks:CreateAddon",
    "eks:CreateCluster",
    "eks:CreateNodegroup",
    "eks:CreatePodIdentityAssociation",
    "eks:DeleteAccessEntry",
    "eks:DeleteAddon",
    "eks:DeleteCluster",
    "eks:DeleteNodegroup",
    "eks:DeletePodIdentityAssociation",
    "eks:DescribeAccessEntry",
    "eks:DescribeAddon",
    "eks:DescribeCluster",
    "eks:DescribeNodegroup",
    "eks:DescribePodIdentityAssociation",
    "eks:DescribeUpdate",
    "eks:DisassociateAccessPolicy",
    "eks:ListAssociatedAccessPolicies",
    "eks:ListUpdates",
    "eks:TagResource",
    "eks:UntagResource",
    "eks:UpdateAccessEntry",
    "eks:UpdateAddon",
    "eks:UpdateClusterConfig",
    "eks:UpdateClusterVersion",
    "eks:UpdateNodegroupConfig",
    "eks:UpdateNodegroupVersion",
    "eks:UpdatePodIdentityAssociation",
)
# EKS ARNs: cluster/<name>, and <kind>/<cluster name>/... for everything inside a cluster.
EKS_RESOURCE_KINDS = ("cluster", "nodegroup", "addon", "access-entry", "podidentityassociation")
PCS_ACTIONS = (
    "pcs:CreateCluster",
    "pcs:CreateComputeNodeGroup",
    "pcs:CreateQueue",
    "pcs:DeleteCluster",
    "pcs:DeleteComputeNodeGroup",
    "pcs:DeleteQueue",
    "pcs:GetCluster",
    "pcs:GetComputeNodeGroup",
    "pcs:GetQueue",
    "pcs:ListTagsForResource",
    "pcs:TagResource",
    "pcs:UntagResource",
    "pcs:UpdateCluster",
    "pcs:UpdateComputeNodeGroup",
    "pcs:UpdateQueue",
)
# PCS keeps each cluster's Slurm key in a Secrets Manager secret it creates with the caller's permissions.
PCS_SECRET_ACTIONS = ("secretsmanager:CreateSecret", "secretsmanager:TagResource")
# What a backend's service calls with its caller's credentials (here CloudFormation's execution role) when a compute
# group runs in a capacity block or reservation, beyond what CloudFormation's handler schemas list: each action with
# the page that documents it, per backend (tests/contracts/test_capacity_permissions.py evaluates each).
# - PCS: CreateComputeNodeGroup and UpdateComputeNodeGroup with purchaseOption CAPACITY_BLOCK. The node group page
#   and the minimum-permissions page name ec2:DescribeCapacityReservations, DescribeCapacityBlocks and
#   DescribeCapacityBlockStatus (older copies of both name the first alone): all three, read-only, are granted.
# - EKS managed node groups (CapacityType CAPACITY_BLOCK with a launch template that targets the block): AWS's page
#   names no permission of the caller's beyond CreateNodegroup; EKS's service-linked role launches the instances
#   (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html).
# - ParallelCluster: its own roles make the calls, inside kiln's boundary, not this role
#   (kiln.contracts.permissions_boundary.PCLUSTER_CAPACITY_CALLS).
# - HyperPod: takes no capacity block or reservation (spec rule: capacity must be on-demand on hyperpod).
PCS_MIN_PERMISSIONS = "https://docs.aws.amazon.com/pcs/latest/userguide/security-min-permissions.html"
CAPACITY_CALLS: dict[str, dict[str, str]] = {
    "pcs": {
        "ec2:DescribeCapacityReservations": "https://docs.aws.amazon.com/pcs/latest/userguide/capacity-blocks-configure-cng.html",
        "ec2:DescribeCapacityBlocks": PCS_MIN_PERMISSIONS,
        "ec2:DescribeCapacityBlockStatus": PCS_MIN_PERMISSIONS,
    },
    "eks": {},
}
# The reads take no resource scope (EC2's Describe calls), so they are granted on "*".
CAPACITY_READS = tuple(sorted({action for calls in CAPACITY_CALLS.values() for action in calls}))
HYPERPOD_ACTIONS = (
    "sagemaker:AddTags",
    "sagemaker:BatchAddClusterNodes",
    "sagemaker:CreateCluster",
    "sagemaker:DeleteTags",
    "sagemaker:DescribeCluster",
    "sagemaker:ListTags",
    "sagemaker:UpdateCluster",
    "sagemaker:UpdateClusterSoftware",
)
# AWS::FSx::FileSystem has no registry handler schema; these are the FileSystem API calls CloudFormation makes for it.
FSX_ACTIONS = (
    "fsx:CreateDataRepositoryAssociation",
    "fsx:CreateFileSystem",
    "fsx:DescribeDataRepositoryAssociations",
    "fsx:DescribeFileSystems",
    "fsx:ListTagsForResource",
    "fsx:TagResource",
    "fsx:UntagResource",
    "fsx:UpdateDataRepositoryAssociation",
    "fsx:UpdateFileSystem",
)
PROMETHEUS_ACTIONS = (
    "aps:CreateAlertManagerDefinition",
    "aps:CreateLoggingConfiguration",
    "aps:CreateQueryLoggingConfiguration",
    "aps:CreateScraper",
    "aps:CreateWorkspace",
    "aps:DeleteAlertManagerDefinition",
    "aps:DeleteLoggingConfiguration",
    "aps:DeleteQueryLoggingConfiguration",
    "aps:DeleteScraper",
    "aps:DeleteScraperLoggingConfiguration",
    "aps:DeleteWorkspace",
    "aps:DescribeAlertManagerDefinition",
    "aps:DescribeLoggingConfiguration",
    "aps:DescribeQueryLoggingConfiguration",
    "aps:DescribeScraper",
    "aps:DescribeScraperLoggingConfiguration",
    "aps:DescribeWorkspace",
    "aps:DescribeWorkspaceConfiguration",
    "aps:ListTagsForResource",
    "aps:PutAlertManagerDefinition",
    "aps:TagResource",
    "aps:UntagResource",
    "aps:UpdateLoggingConfiguration",
    "aps:UpdateQueryLoggingConfiguration",
    "aps:UpdateScraper",
    "aps:UpdateScraperLoggingConfiguration",
    "aps:UpdateWorkspaceAlias",
    "aps:UpdateWorkspaceConfiguration",
)
GRAFANA_ACTIONS = (
    "grafana:CreateWorkspace",
    "grafana:DeleteWorkspace",
    "grafana:DescribeWorkspace",
    "grafana:DescribeWorkspaceAuthentication",
    "grafana:DescribeWorkspaceConfiguration",
    "grafana:ListTagsForResource",
    "grafana:TagResource",
    "grafana:UntagResource",
    "grafana:UpdateWorkspace",
    "grafana:UpdateWorkspaceAuthentication",
    "grafana:UpdateWorkspaceConfiguration",
)
# kiln's Grafana workspaces sign in with IAM Identity Center (AuthenticationProviders AWS_SSO): the workspace
# handler registers a managed application there.
IDENTITY_CENTER_ACTIONS = (
    "sso:CreateManagedApplicationInstance",
    "sso:DeleteManagedApplicationInstance",
    "sso:DescribeRegisteredRegions",
    "sso:GetApplicationInstance",
    "sso:GetSharedSsoConfiguration",
    "sso:ListApplicationInstances",
)
PARAMETER_ACTIONS = (
    "ssm:AddTagsToResource",
    "ssm:DeleteParameter",
    "ssm:GetParameters",
    "ssm:ListTagsForResource",
    "ssm:PutParameter",
    "ssm:RemoveTagsFromResource",
)
# The cluster's own Session document (spec session_logs: kiln.contracts.ssm_documents.session_document names it
# kiln-<cluster>-session): the AWS::SSM::Document handlers' calls, less what only attachments from S3 and a role for
# them need (kiln's document has neither).
DOCUMENT_ACTIONS = (
    "ssm:AddTagsToResource",
    "ssm:CreateDocument",
    "ssm:DeleteDocument",
    "ssm:DescribeDocument",
    "ssm:GetDocument",
    "ssm:ListTagsForResource",
    "ssm:RemoveTagsFromResource",
    "ssm:UpdateDocument",
    "ssm:UpdateDocumentDefaultVersion",
)
SCHEDULE_ACTIONS = (
    "scheduler:CreateSchedule",
    "scheduler:DeleteSchedule",
    "scheduler:GetSchedule",
    "scheduler:UpdateSchedule",
)
TRANSFORM_ACTIONS = ("cloudformation:CreateChangeSet",)
# The reaper's alarm topic (<environment>-reaper-alarm) and any subscription to it.
TOPIC_ACTIONS = (
    "sns:CreateTopic",
    "sns:DeleteTopic",
    "sns:GetDataProtectionPolicy",
    "sns:GetSubscriptionAttributes",
    "sns:GetTopicAttributes",
    "sns:ListSubscriptionsByTopic",
    "sns:ListTagsForResource",
    "sns:PutDataProtectionPolicy",
    "sns:SetSubscriptionAttributes",
    "sns:SetTopicAttributes",
    "sns:Subscribe",
    "sns:TagResource",
    "sns:Unsubscribe",
    "sns:UntagResource",
)

# What the handlers list that these policies leave out: the mutating calls of features kiln's templates never use.
NOT_GRANTED = {
    "ec2:AcceptAddressTransfer": "takes over an Elastic IP another account transfers; kiln allocates its own",
    "ec2:AttachVpnGateway": "kiln's VPC gateway attachment is an internet gateway, never a VPN gateway",
    "ec2:DetachVpnGateway": "kiln's VPC gateway attachment is an internet gateway, never a VPN gateway",
    "ec2:CreateVpcEncryptionControl": "kiln's VPC sets no encryption control",
    "ec2:ModifyImageAttribute": "HyperPod shares a custom AMI only when an instance group names one (kiln's name "
    "none); it would let CI share any AMI of the account",
    "ec2:ModifySnapshotAttribute": "as ec2:ModifyImageAttribute, for the AMI's snapshots",
    "vpc-lattice:CreateServiceNetworkVpcEndpointAssociation": "kiln's VPC endpoint is an S3 gateway endpoint",
    "vpce:AllowMultiRegion": "kiln's VPC endpoints serve their own region only",
    "firehose:TagDeliveryStream": "kiln's log groups deliver to no Firehose stream",
    "s3:REST.PUT.OBJECT": "not an IAM action (an S3 operation name in the log group schema)",
    "s3tables:CreateNamespace": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:CreateTable": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:CreateTableBucket": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:PutTableBucketPolicy": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:PutTableEncryption": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:PutTablePolicy": "S3 Metadata tables; kiln's buckets configure none",
    "s3tables:UpdateTableMetadataLocation": "S3 Metadata tables; kiln's buckets configure none",
    "lambda:PassCapacityProvider": "Lambda managed instances; kiln's functions run on Lambda's own capacity",
    "iam:AttachGroupPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:AttachUserPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:DetachGroupPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:DetachUserPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:PutGroupPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:PutUserPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:DeleteGroupPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:DeleteUserPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:GetGroupPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:GetUserPolicy": "kiln attaches policies to roles only: IAM users and groups stay out of CI's reach",
    "iam:DeleteRolePermissionsBoundary": "every role kiln's stacks make keeps kiln's boundary: CI never removes one",
    "kms:Decrypt": "only for functions' environments or workspaces encrypted with a customer key; kiln's use AWS's",
    "kms:Encrypt": "only for functions' environments encrypted with a customer key; kiln's use AWS's",
    "kms:GenerateDataKey": "only for functions' environments or workspaces encrypted with a customer key; kiln's "
    "use AWS's",
}


@dataclass(frozen=True)
class NamedPolicy:
    """One customer managed policy to create: its name and document."""

    name: str
    document: dict[str, Any]

    @property
    def size(self) -> int:
        """Return the characters IAM counts: the document without white space."""
        return policy_size(self.document)


def policy_size(document: dict[str, Any]) -> int:
    """Return DOCUMENT's length as IAM counts it (white space outside strings does not count)."""
    return len(json.dumps(document, separators=(",", ":")))


def _statement(
    sid: str,
    actions: Sequence[str],
    resources: Sequence[str],
    condition: dict[str, Any] | None = None,
    *,
    effect: str = "Allow",
) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "Sid": sid,
        "Effect": effect,
        "Action": sorted(actions),
        "Resource": list(resources) if len(resources) > 1 else resources[0],
    }
    if condition:
        statement["Condition"] = condition
    return statement


def execution_boundary_arn(boundary: str = BOUNDARY_NAME, *, partition: str = "aws") -> str:
    """Return the ARN the execution policies require as every role's permissions boundary (BOUNDARY: name or ARN)."""
    return boundary_arn(boundary, partition=partition, account=ACCOUNT)


def execution_statements(
    cluster_names: Sequence[str], *, qualifier: str, partition: str = "aws", boundary: str = BOUNDARY_NAME
) -> list[dict[str, Any]]:
    """Return the execution role's statements for the CI environments (<cluster>-<run>) of CLUSTER_NAMES, whose roles
    all carry the permissions boundary BOUNDARY (a policy name in the account, or an ARN)."""
    arn, account = f"arn:{partition}", ACCOUNT
    prefixes = [f"{cluster}-*" for cluster in cluster_names]
    boundary_policy = execution_boundary_arn(boundary, partition=partition)

    def each(template: str) -> list[str]:
        return [template.replace("{env}", env) for env in prefixes]

    def iam(kind: str, names: Sequence[str]) -> list[str]:
        return [f"{arn}:iam::{account}:{kind}/{name}" for name in names]

    roles = iam("role", [*prefixes, *(f"aws-pcs/{env}" for env in prefixes), PCLUSTER_ROLE])
    policies = iam("policy", [*prefixes, *(f"parallelcluster/{env}" for env in prefixes), *PCLUSTER_POLICIES])
    attachable = [f"{arn}:iam::aws:policy/{name}" for name in AWS_MANAGED_POLICIES] + policies
    environments = {"StringLike": {RESOURCE_TAG: prefixes}}
    bounded = {"StringEquals": {PERMISSIONS_BOUNDARY_KEY: boundary_policy}}
    tagged_and_bounded = {"StringEquals": bounded["StringEquals"], "StringLike": {RESOURCE_TAG: prefixes}}
    created_by_environments = {"StringLike": {RESOURCE_TAG: prefixes, STACK_NAME_TAG: prefixes}}
    return [
        _statement("Stacks", STACK_ACTIONS, each(f"{arn}:cloudformation:*:{account}:stack/{{env}}/*")),
        _statement("Transform", TRANSFORM_ACTIONS, [f"{arn}:cloudformation:*:aws:{SERVERLESS_TRANSFORM}"]),
        _statement("RoleReads", ROLE_READS, roles),
        _statement(
            "CreateRoles",
            ROLE_CREATE,
            roles,
            {"StringEquals": bounded["StringEquals"], "StringLike": {REQUEST_TAG: prefixes}},
        ),
        _statement("BoundedRoles", BOUNDED_ROLE_CHANGES, roles, tagged_and_bounded),
        _statement("TaggedRoles", TAGGED_ROLE_CHANGES, roles, environments),
        _statement(
            "PassRoles",
            PASS_ROLE,
            roles,
            {"StringLike": {RESOURCE_TAG: prefixes}, "StringEquals": {"iam:PassedToService": list(PASSED_TO_SERVICES)}},
        ),
        _statement(
            "AttachPolicies", ATTACH_ACTIONS, roles, {**tagged_and_bounded, "ArnLike": {"iam:PolicyARN": attachable}}
        ),
        _statement("Policies", POLICY_ACTIONS, policies),
        _statement(
            "InstanceProfiles",
            INSTANCE_PROFILE_ACTIONS,
            iam("instance-profile", [*prefixes, *(f"aws-pcs/{env}" for env in prefixes)]),
        ),
        _statement("LinkedRoles", LINKED_ROLE_ACTIONS, [f"{arn}:iam::{account}:role/aws-service-role/*"]),
        _statement("FsxLinkedRole", FSX_LINKED_ROLE_ACTIONS, [f"{arn}:iam::{account}:{FSX_S3_LINKED_ROLE}"]),
        _statement("Buckets", BUCKET_ACTIONS, each(f"{arn}:s3:::{{env}}")),
        _statement("Objects", OBJECT_ACTIONS, each(f"{arn}:s3:::{{env}}/*")),
        _statement(
            "Code",
            CODE_READS,
            [f"{arn}:s3:::cdk-{qualifier}-assets-{account}-*/*", f"{arn}:s3:::*-aws-parallelcluster/*"],
        ),
        _statement("Functions", FUNCTION_ACTIONS, each(f"{arn}:lambda:*:{account}:function:{{env}}")),
        _statement(
            "ProviderFunction",
            PCLUSTER_FUNCTION_ACTIONS,
            [f"{arn}:lambda:*:{account}:function:{PCLUSTER_FUNCTION}"],
        ),
        _statement("Layers", LAYER_ACTIONS, [f"{arn}:lambda:*:{account}:layer:*"]),
        _statement(
            "LogGroups",
            LOG_GROUP_ACTIONS,
            [
                *each(f"{arn}:logs:*:{account}:log-group:{{env}}"),
                f"{arn}:logs:*:{account}:log-group:/aws/lambda/{PCLUSTER_FUNCTION}",
            ],
        ),
        _statement("Logs", LOGS_ACCOUNT_ACTIONS, ["*"]),
        _statement("CreateKeys", KEY_CREATE, ["*"]),
        _statement("Keys", KEY_ACTIONS, [f"{arn}:kms:*:{account}:key/*"], environments),
        _statement("Network", EC2_ACTIONS, ["*"]),
        _statement("TagOnCreate", EC2_TAGGING, ["*"], {"Null": {"ec2:CreateAction": "false"}}),
        _statement("TagTagged", EC2_TAGGING, ["*"], environments),
        _statement("Destroy", DESTRUCTIVE_ACTIONS, ["*"], created_by_environments),
        _statement("Reads", UNSCOPED_READS, ["*"]),
        _statement(
            "Eks",
            EKS_ACTIONS,
            [f"{arn}:eks:*:{account}:{kind}/{env}" for env in prefixes for kind in EKS_RESOURCE_KINDS],
        ),
        _statement("CapacityReads", CAPACITY_READS, ["*"]),
        _statement("Pcs", PCS_ACTIONS, [f"{arn}:pcs:*:{account}:cluster/*"]),
        _statement("PcsSecrets", PCS_SECRET_ACTIONS, [f"{arn}:secretsmanager:*:{account}:secret:*"]),
        _statement("HyperPod", HYPERPOD_ACTIONS, [f"{arn}:sagemaker:*:{account}:cluster/*"]),
        _statement("Fsx", FSX_ACTIONS, ["*"]),
        _statement("Prometheus", PROMETHEUS_ACTIONS, [f"{arn}:aps:*:{account}:*"]),
        _statement("Grafana", GRAFANA_ACTIONS, [f"{arn}:grafana:*:{account}:/workspaces/*"]),
        _statement("IdentityCenter", IDENTITY_CENTER_ACTIONS, ["*"]),
        _statement("Parameters", PARAMETER_ACTIONS, [f"{arn}:ssm:*:{account}:parameter/CFN-*"]),
        _statement("SessionDocuments", DOCUMENT_ACTIONS, each(f"{arn}:ssm:*:{account}:document/kiln-{{env}}-session")),
        _statement("Schedules", SCHEDULE_ACTIONS, each(f"{arn}:scheduler:*:{account}:schedule/default/{{env}}")),
        _statement("Topics", TOPIC_ACTIONS, each(f"{arn}:sns:*:{account}:{{env}}")),
        # Whatever the Allows above match, the boundary policy itself stays as its owner made it.
        _statement("KeepBoundary", POLICY_EDITS, [boundary_policy], effect="Deny"),
        _statement("NeverUnbound", BOUNDARY_REMOVAL, ["*"], effect="Deny"),
    ]


def policy_name_base(identity_stack: str) -> str:
    """Return the policies' name stem for the identity stack IDENTITY_STACK: kiln-ci-exec-<repository>."""
    stem = re.sub(r"^kiln-ci-identity-", "kiln-ci-exec-", identity_stack)
    # IAM policy names: 128 characters at most, with room for -<n>.
    return stem[:120].rstrip("-")


class ExecutionPolicyError(Failure):
    """The execution policies cannot be written as IAM takes them (too large, too many, a wildcard unreviewed)."""


def execution_policies(
    cluster_names: Sequence[str],
    *,
    qualifier: str,
    name_base: str,
    partition: str = "aws",
    boundary: str = BOUNDARY_NAME,
) -> list[NamedPolicy]:
    """Return the statements packed, in order, into as few managed policies as IAM's size limit allows.

    Raises ExecutionPolicyError when one statement alone exceeds the limit or more than MAX_POLICIES are needed.
    """
    statements = execution_statements(cluster_names, qualifier=qualifier, partition=partition, boundary=boundary)
    documents: list[list[dict[str, Any]]] = [[]]
    for statement in statements:
        if policy_size(_document([statement])) > MANAGED_POLICY_MAX_CHARS:
            raise ExecutionPolicyError(
                f"statement {statement['Sid']} alone exceeds IAM's {MANAGED_POLICY_MAX_CHARS} characters"
            )
        if policy_size(_document([*documents[-1], statement])) > MANAGED_POLICY_MAX_CHARS:
            documents.append([])
        documents[-1].append(statement)
    if len(documents) > MAX_POLICIES:
        raise ExecutionPolicyError(
            f"the execution policies need {len(documents)} managed policies; a role holds {MAX_POLICIES} by default"
        )
    return [NamedPolicy(f"{name_base}-{n}", _document(found)) for n, found in enumerate(documents, start=1)]


def _document(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


def bootstrap_command(policies: Sequence[NamedPolicy], *, qualifier: str, partition: str = "aws") -> str:
    """Return the `cdk bootstrap` line that hands CloudFormation POLICIES instead of AdministratorAccess."""
    arns = ",".join(f"arn:{partition}:iam::ACCOUNT:policy/{policy.name}" for policy in policies)
    qualified = f" --qualifier {qualifier}" if qualifier != DEFAULT_CDK_QUALIFIER else ""
    return f"npx cdk bootstrap aws://ACCOUNT/REGION{qualified} --cloudformation-execution-policies {arns}"
