"""kiln's permissions boundary: the managed policy every IAM role kiln's stacks create carries, so that no role made
through kiln (by CloudFormation with kiln's execution policies, or by a role kiln made) can exceed it or mint one that
does. Standard library only: the CI identity stack creates it, the execution policies require it, the stacks apply it.

It follows IAM's delegation pattern (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html,
"Delegating responsibility to others using permissions boundaries"): a boundary grants nothing by itself; it allows
the services kiln's roles use (nodes, Lambda handlers, HyperPod, EKS, PCS and ParallelCluster roles; each role's own
policies grant what it does) and denies every way out: creating or changing a role or user without this same
boundary, removing a boundary, editing the boundary policy itself, minting users, keys or passwords, and rewriting
any role's trust policy. Every other action it allows on "*" is kept off what is not kiln's where that action would
run code as something else (pivot_statements): passing or assuming a role, changing or invoking a function, running
a command or session on an instance, and writing the kiln: tags those rules read.
"""

from __future__ import annotations

import re
from typing import Any

from kiln.contracts.cdk_bootstrap import CDK_BOOTSTRAP_ROLES, bootstrap_role_name
from kiln.contracts.tags import KILN_TAG_PREFIX, TAG_CI_IDENTITY, TAG_ENVIRONMENT

# The policy `kiln ci identity` creates (in the CI identity stack) and CI environments carry unless the spec's
# iam.permissions_boundary names another. One per account: the document names no cluster.
BOUNDARY_NAME = "kiln-permissions-boundary"
# A policy name (IAM: 1-128 of letters, digits and + = , . @ _ -) or a customer managed policy's ARN (with a path).
POLICY_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,128}")
POLICY_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:iam::[0-9]{12}:policy/(?:[A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,128}")
BOUNDARY_RULE = (
    "a customer managed policy's name (1-128 letters, digits and + = , . @ _ -) or ARN "
    "(arn:PARTITION:iam::ACCOUNT:policy/NAME)"
)

# The condition key holding the boundary a request sets or the target role or user carries. IAM's Service
# Authorization Reference lists it for exactly these role and user actions
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsidentityandaccessmanagementiam.html,
# "iam:PermissionsBoundary: filters access if the specified policy is set as permissions boundary on the IAM entity
# (user or role)").
PERMISSIONS_BOUNDARY_KEY = "iam:PermissionsBoundary"
BOUNDED_ROLE_ACTIONS = (
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
)
BOUNDED_USER_ACTIONS = (
    "iam:AttachUserPolicy",
    "iam:CreateUser",
    "iam:DeleteUserPolicy",
    "iam:DetachUserPolicy",
    "iam:PutUserPermissionsBoundary",
    "iam:PutUserPolicy",
)
# What no principal inside the boundary may ever do: take a boundary off, or change the policy that is one.
BOUNDARY_REMOVAL = ("iam:DeleteRolePermissionsBoundary", "iam:DeleteUserPermissionsBoundary")
POLICY_EDITS = (
    "iam:CreatePolicyVersion",
    "iam:DeletePolicy",
    "iam:DeletePolicyVersion",
    "iam:SetDefaultPolicyVersion",
)
# Long-lived credentials and identities outside roles: kiln never makes them. UpdateAssumeRolePolicy takes no
# iam:PermissionsBoundary key (same reference), and a new trust policy on an existing role is a way into whatever that
# role may do: no role kiln makes rewrites one (CloudFormation, outside the boundary, applies kiln's trust policies).
NEVER = (
    "iam:AddUserToGroup",
    "iam:AttachGroupPolicy",
    "iam:CreateAccessKey",
    "iam:CreateGroup",
    "iam:CreateLoginProfile",
    "iam:CreateServiceSpecificCredential",
    "iam:CreateUser",
    "iam:PutGroupPolicy",
    "iam:UpdateAccessKey",
    "iam:UpdateAssumeRolePolicy",
    "iam:UpdateLoginProfile",
    "iam:UploadSSHPublicKey",
    "iam:UploadSigningCertificate",
    "sts:AssumeRoot",
)
# The services kiln's roles use (their identity policies, CDK's handler roles, the AWS managed policies kiln attaches,
# and the roles ParallelCluster's API makes, whose policies aws-parallelcluster's
# cloudformation/policies/parallelcluster-policies.yaml and cluster templates write); a role inside the boundary can do
# nothing in any other service. tests/stacks/test_permissions_boundary.py holds every action of every role policy kiln
# synthesizes to this list; the AWS managed policies' and ParallelCluster's runtime roles' actions are read, not tested.
SERVICES = (
    "aps",
    "autoscaling",
    "cloudformation",
    "cloudwatch",
    "codeartifact",
    "dynamodb",
    "ebs",
    "ec2",
    "ec2messages",
    "ecr",
    "ecr-public",
    "eks",
    "eks-auth",
    "elasticfilesystem",
    "elasticloadbalancing",
    "events",
    "fsx",
    "grafana",
    "iam",
    "imagebuilder",
    "kms",
    "lambda",
    "logs",
    "pcs",
    "resource-groups",
    "route53",
    "s3",
    "sagemaker",
    "scheduler",
    "secretsmanager",
    "servicequotas",
    "sns",
    "sqs",
    "ssm",
    "ssmmessages",
    "sts",
    "tag",
    "xray",
)
# What ParallelCluster's own roles call for a compute resource in a capacity block or reservation: the head node's
# policy (it launches the compute nodes) describes reservations and runs instances into them, or into a reservation
# group, which it lists. Those roles carry this boundary, so it must allow each; CloudFormation's execution role makes
# none of these calls (kiln.contracts.execution_policy.CAPACITY_CALLS). Source: the head node's policy in
# ParallelCluster 3.16.1's templates (read in the installed package).
PCLUSTER_HEAD_NODE_POLICY = (
    "https://github.com/aws/aws-parallelcluster/blob/v3.16.1/cli/src/pcluster/templates/cdk_builder_utils.py"
)
PCLUSTER_CAPACITY_CALLS = {
    "ec2:DescribeCapacityReservations": PCLUSTER_HEAD_NODE_POLICY,
    "ec2:RunInstances": PCLUSTER_HEAD_NODE_POLICY,
    "ec2:CreateFleet": PCLUSTER_HEAD_NODE_POLICY,
    "resource-groups:ListGroupResources": PCLUSTER_HEAD_NODE_POLICY,
}


# ---- Pivots: a role inside the boundary may hold any allowed action on "*" (whoever writes a template writes its
# roles' policies), so the boundary itself keeps that action off what is not kiln's. "Kiln's" is the tag
# kiln:environment (CI environments' stacks put it on every resource and the execution policies require it on every
# role), which no principal inside the boundary may write (TAG_WRITES).
# A role's tags are iam:ResourceTag/<key> on the role resource for iam:PassRole and sts:AssumeRole alike: IAM's
# Service Authorization Reference lists aws:ResourceTag/${TagKey} and iam:ResourceTag/${TagKey} for the role resource
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsidentityandaccessmanagementiam.html;
# https://docs.aws.amazon.com/IAM/latest/UserGuide/access_iam-tags.html), and AWS's own example allows sts:AssumeRole
# by iam:ResourceTag (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_examples_iam-assume-tagged-role.html).
# iam:PassRole takes no iam:PermissionsBoundary key (only iam:PassedToService and iam:AssociatedResourceArn), so a
# role's boundary cannot be asked for: its tag is.
ROLE_TAG_KEY = f"iam:ResourceTag/{TAG_ENVIRONMENT}"
# 1. iam:PassRole: handing a role to a service (Lambda, EC2, CloudFormation, SageMaker, EKS, Scheduler, SSM
# Automation...) runs code as it. Only kiln's roles, and the roles ParallelCluster makes for a CI environment's
# cluster, which carry ParallelCluster's tags, not kiln's. Two of kiln's principals pass those: ParallelCluster's
# provider function (CloudFormation runs the cluster's stack with its credentials, no service role), tagged as its
# environment; and the cluster's head node, which launches compute nodes with their role and carries the stack tag
# parallelcluster:cluster-name. aws-parallelcluster puts a cluster's roles at the path /parallelcluster/<cluster name>/
# (_cluster_scoped_iam_path) and tags its stack with parallelcluster:cluster-name (Cluster._add_tags), and kiln names
# a CI environment's cluster after the environment (kiln.stacks.ci_mode). So each may pass the roles at the path its
# own tag names: a policy variable (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html,
# "Specifying default values") whose default, for a caller without the tag, is no cluster name (those start with a
# letter). CLUSTER_NAME_TAGS keeps anyone inside the boundary from naming another cluster in that tag.
PASS_ROLE = ("iam:PassRole",)
PCLUSTER_NAME_TAG = "parallelcluster:cluster-name"
PRINCIPAL_ENVIRONMENT = "${aws:PrincipalTag/" + TAG_ENVIRONMENT + ", '-'}"
PCLUSTER_OWN_ROLES = (
    f"arn:*:iam::*:role/parallelcluster/{PRINCIPAL_ENVIRONMENT}/*",
    "arn:*:iam::*:role/parallelcluster/${aws:PrincipalTag/" + PCLUSTER_NAME_TAG + ", '-'}/*",
)
# A role or user made or tagged with parallelcluster:cluster-name only with its caller's own environment as the value
# (aws:RequestTag/${TagKey}: CreateRole, TagRole, CreateUser and TagUser, list_awsidentityandaccessmanagementiam.html).
CLUSTER_NAME_TAGS = ("iam:CreateRole", "iam:CreateUser", "iam:TagRole", "iam:TagUser")
# 2. sts:AssumeRole and the calls that go with it (session tags, source identity): only kiln's roles, and the roles
# `cdk bootstrap` makes that the CI role assumes to deploy (kiln.contracts.cdk_bootstrap.CDK_BOOTSTRAP_ROLES, named
# cdk-<qualifier>-<kind>-<account>-<region>). CDK's cfn-exec-role is not among them: only CloudFormation assumes it.
# CDK's roles trust the whole account by default, and its deploy role hands CloudFormation the execution role: only
# the CI role, tagged kiln:ci-identity by its stack (kiln.stacks.ci_identity; a kiln: tag no role inside the boundary
# can set, TAG_WRITES), assumes them. aws:PrincipalTag is a global key: the tags of the role a session is of
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-principaltag).
CI_ROLE_TAG_KEY = f"aws:PrincipalTag/{TAG_CI_IDENTITY}"
# AssumeRoleWithWebIdentity and AssumeRoleWithSAML are called with a token, not AWS credentials: no caller's policy
# or boundary applies to them (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html,
# "Calling AssumeRoleWithWebIdentity does not require the use of AWS security credentials"); each role's trust policy
# (kiln's name their OIDC provider and subject) is what holds them.
ASSUME_ACTIONS = ("sts:AssumeRole", "sts:SetSourceIdentity", "sts:TagSession")
# 3. Tags kiln's IAM and its CI identity rely on: no principal inside the boundary adds, changes or removes a kiln:
# tag on anything (a role, user, function, instance, Auto Scaling group, managed instance, HyperPod cluster or stack
# so tagged would come inside the rules here), nor creates a role or user with one, except an EC2 tag written as the
# resource is created (ec2:CreateAction is present then). The tagging actions take aws:TagKeys, the keys the request
# adds or removes: IAM (list_awsidentityandaccessmanagementiam.html: CreateRole, CreateUser, TagRole, UntagRole,
# TagUser, UntagUser), Lambda (list_awslambda.html: TagResource, UntagResource), EC2 (list_amazonec2.html:
# CreateTags, DeleteTags; ec2:CreateAction on CreateTags,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html), Auto Scaling
# (list_amazonec2autoscaling.html: CreateOrUpdateTags, DeleteTags), Systems Manager (list_awssystemsmanager.html:
# AddTagsToResource, RemoveTagsFromResource), SageMaker (list_amazonsagemaker.html: AddTags, DeleteTags),
# CloudFormation (list_awscloudformation.html: TagResource, UntagResource) and the Resource Groups Tagging API
# (list_awsresourcegroupstaggingapi.html: TagResources, UntagResources). A whole service is named (IAM takes no
# wildcard service prefix): only a request that adds or removes tags carries aws:TagKeys, and ForAnyValue never
# matches a request without it. CloudFormation, as the execution role (which carries no boundary), still tags kiln's
# resources as it creates them.
KILN_TAG_KEYS = f"{KILN_TAG_PREFIX}*"
TAG_WRITES = (
    "autoscaling:*",
    "cloudformation:*",
    "ec2:DeleteTags",
    "iam:*",
    "lambda:*",
    "sagemaker:*",
    "ssm:*",
    "tag:*",
)
EC2_TAG_ON_CREATE = ("ec2:CreateTags",)
# 4. Lambda: new code or configuration (environment, layers, role) for a function runs as that function's role; so
# does invoking a function whose code acts on its input (a custom resource handler does). Only kiln's functions
# (Lambda supports aws:ResourceTag/${TagKey} on the function resource, list_awslambda.html;
# https://docs.aws.amazon.com/lambda/latest/dg/attribute-based-access-control.html). InvokeFunction also reaches the
# functions of the cluster stack ParallelCluster's provider runs as itself (CloudFormation invokes a custom
# resource's function with its caller's credentials): aws-parallelcluster names them pcluster-<Name>-<stack id>.
FUNCTION_TAG_KEY = f"aws:ResourceTag/{TAG_ENVIRONMENT}"
FUNCTIONS = "arn:*:lambda:*:*:function:*"
FUNCTION_CHANGES = (
    "lambda:UpdateFunctionCode",
    "lambda:UpdateFunctionConfiguration",
)
# Invoking, and letting others invoke (a resource policy statement, a function URL, which may take no auth).
FUNCTION_INVOKES = (
    "lambda:AddPermission",
    "lambda:CreateFunctionUrlConfig",
    "lambda:InvokeAsync",
    "lambda:InvokeFunction",
    "lambda:InvokeFunctionUrl",
    "lambda:UpdateFunctionUrlConfig",
)
PCLUSTER_FUNCTIONS = "arn:*:lambda:*:*:function:pcluster-*"
# 5. Code on an instance: Run Command and Session Manager only on kiln's instances and HyperPod clusters, with the key
# each documents and kiln's CI role already uses (kiln.constructs.ci_identity): aws:ResourceTag on an instance for
# SendCommand and on a SageMaker cluster for StartSession, ssm:resourceTag on an instance for StartSession
# (list_awssystemsmanager.html; https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html);
# and no instance attribute change (user data, instance profile's role is PassRole's) on an instance that is not
# kiln's (EC2's instance resource supports aws:ResourceTag/${TagKey}, list_amazonec2.html).
INSTANCES = ("arn:*:ec2:*:*:instance/*", "arn:*:ssm:*:*:managed-instance/*")
HYPERPOD_CLUSTERS = "arn:*:sagemaker:*:*:cluster/*"
INSTANCE_TAG_KEY = f"aws:ResourceTag/{TAG_ENVIRONMENT}"
SESSION_TAG_KEY = f"ssm:resourceTag/{TAG_ENVIRONMENT}"
SEND_COMMAND = ("ssm:SendCommand",)
START_SESSION = ("ssm:StartSession",)
# A HyperPod cluster's instance groups run their lifecycle scripts (an S3 prefix the update names) as root with the
# group's execution role: only kiln's clusters take new ones.
HYPERPOD_CHANGES = ("sagemaker:UpdateCluster", "sagemaker:UpdateClusterSoftware")
INSTANCE_CHANGES = ("ec2:ModifyInstanceAttribute",)
# Systems Manager's ways to run a document on instances chosen by tag or resource group, which IAM does not check
# against each instance's tags, and Automation's runs: no role kiln makes uses them.
UNSCOPED_RUNS = (
    "ssm:CreateAssociation",
    "ssm:CreateAssociationBatch",
    "ssm:RegisterTargetWithMaintenanceWindow",
    "ssm:RegisterTaskWithMaintenanceWindow",
    "ssm:StartAutomationExecution",
    "ssm:UpdateAssociation",
    "ssm:UpdateMaintenanceWindowTask",
)

# 6. CloudFormation runs a stack's updates as the service role the stack already has, whoever asks
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html): every stack CDK
# deployed has its cfn-exec-role. So stacks and stack sets change only when tagged as an environment (CloudFormation's
# stack resource supports aws:ResourceTag/${TagKey}, list_awscloudformation.html), but for the stack of ParallelCluster
# a provider runs as itself, named after its cluster (<cluster>, and <cluster>-* for nested stacks).
# The calls that give a stack (or stack set) a new template; a rollback or deletion runs only what was there.
STACK_CHANGES = (
    "cloudformation:CreateChangeSet",
    "cloudformation:ExecuteChangeSet",
    "cloudformation:UpdateStack",
    "cloudformation:UpdateStackSet",
)
STACK_TAG_KEY = f"aws:ResourceTag/{TAG_ENVIRONMENT}"
PCLUSTER_OWN_STACKS = (
    f"arn:*:cloudformation:*:*:stack/{PRINCIPAL_ENVIRONMENT}/*",
    f"arn:*:cloudformation:*:*:stack/{PRINCIPAL_ENVIRONMENT}-*/*",
)
# EKS access entries map an IAM principal to Kubernetes groups and access policies (cluster admin, then the pods'
# roles): CloudFormation, outside the boundary, makes kiln's; no role kiln makes calls them
# (https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html). Pod Identity associations hand a pod a role
# and need iam:PassRole, which PassOnlyKilnRoles covers.
CLUSTER_ACCESS = ("eks:AssociateAccessPolicy", "eks:CreateAccessEntry", "eks:UpdateAccessEntry")


def cdk_bootstrap_role_patterns() -> list[str]:
    """Return ARN patterns of the roles `cdk bootstrap` makes for its CLI (any qualifier, account and region)."""
    return [f"arn:*:iam::*:role/{bootstrap_role_name(kind, '*', '*', '*')}" for kind in CDK_BOOTSTRAP_ROLES]


def pivot_statements() -> list[dict[str, Any]]:
    """Return the boundary's Deny statements that keep an allowed action off what is not kiln's (see above)."""
    untagged_role = {"Null": {ROLE_TAG_KEY: "true"}}
    kiln_keys = {"ForAnyValue:StringLike": {"aws:TagKeys": [KILN_TAG_KEYS]}}
    return [
        {
            "Sid": "PassOnlyKilnRoles",
            "Effect": "Deny",
            "Action": list(PASS_ROLE),
            "NotResource": list(PCLUSTER_OWN_ROLES),
            "Condition": untagged_role,
        },
        {
            "Sid": "OwnClusterNameOnly",
            "Effect": "Deny",
            "Action": list(CLUSTER_NAME_TAGS),
            "Resource": "*",
            "Condition": {
                "Null": {f"aws:RequestTag/{PCLUSTER_NAME_TAG}": "false"},
                "StringNotEquals": {f"aws:RequestTag/{PCLUSTER_NAME_TAG}": PRINCIPAL_ENVIRONMENT},
            },
        },
        {
            "Sid": "AssumeOnlyKilnRoles",
            "Effect": "Deny",
            "Action": list(ASSUME_ACTIONS),
            "NotResource": cdk_bootstrap_role_patterns(),
            "Condition": untagged_role,
        },
        {
            "Sid": "CdkRolesOnlyForTheCiRole",
            "Effect": "Deny",
            "Action": list(ASSUME_ACTIONS),
            "Resource": cdk_bootstrap_role_patterns(),
            "Condition": {"Null": {CI_ROLE_TAG_KEY: "true"}},
        },
        {
            "Sid": "ChangeOnlyKilnStacks",
            "Effect": "Deny",
            "Action": list(STACK_CHANGES),
            "NotResource": list(PCLUSTER_OWN_STACKS),
            "Condition": {"Null": {STACK_TAG_KEY: "true"}},
        },
        {
            "Sid": "NoKilnTagWrites",
            "Effect": "Deny",
            "Action": list(TAG_WRITES),
            "Resource": "*",
            "Condition": kiln_keys,
        },
        {
            "Sid": "KilnEc2TagsOnlyAtCreation",
            "Effect": "Deny",
            "Action": list(EC2_TAG_ON_CREATE),
            "Resource": "*",
            "Condition": {**kiln_keys, "Null": {"ec2:CreateAction": "true"}},
        },
        {
            "Sid": "ChangeOnlyKilnFunctions",
            "Effect": "Deny",
            "Action": list(FUNCTION_CHANGES),
            "Resource": FUNCTIONS,
            "Condition": {"Null": {FUNCTION_TAG_KEY: "true"}},
        },
        {
            "Sid": "InvokeOnlyKilnFunctions",
            "Effect": "Deny",
            "Action": list(FUNCTION_INVOKES),
            "NotResource": [PCLUSTER_FUNCTIONS],
            "Condition": {"Null": {FUNCTION_TAG_KEY: "true"}},
        },
        {
            "Sid": "CommandsOnlyOnKilnInstances",
            "Effect": "Deny",
            "Action": [*SEND_COMMAND, *INSTANCE_CHANGES],
            "Resource": list(INSTANCES),
            "Condition": {"Null": {INSTANCE_TAG_KEY: "true"}},
        },
        {
            "Sid": "SessionsOnlyOnKilnInstances",
            "Effect": "Deny",
            "Action": list(START_SESSION),
            "Resource": list(INSTANCES),
            "Condition": {"Null": {SESSION_TAG_KEY: "true"}},
        },
        {
            "Sid": "SessionsOnlyOnKilnClusters",
            "Effect": "Deny",
            "Action": [*START_SESSION, *HYPERPOD_CHANGES],
            "Resource": HYPERPOD_CLUSTERS,
            "Condition": {"Null": {INSTANCE_TAG_KEY: "true"}},
        },
        {"Sid": "NoUnscopedRuns", "Effect": "Deny", "Action": list(UNSCOPED_RUNS), "Resource": "*"},
        {"Sid": "NoClusterAccessGrants", "Effect": "Deny", "Action": list(CLUSTER_ACCESS), "Resource": "*"},
    ]


def boundary_arn(name_or_arn: str, *, partition: str, account: str) -> str:
    """Return the ARN of the boundary NAME_OR_ARN (a name is a customer managed policy of ACCOUNT, at the root path)."""
    if name_or_arn.startswith("arn:"):
        return name_or_arn
    return f"arn:{partition}:iam::{account}:policy/{name_or_arn}"


def boundary_problem(value: object) -> str | None:
    """Return why VALUE cannot name a permissions boundary, or None when it can."""
    if not isinstance(value, str) or not (POLICY_NAME.fullmatch(value) or POLICY_ARN.fullmatch(value)):
        return f"got {value!r}; expected {BOUNDARY_RULE}"
    return None


def boundary_document(arn: str) -> dict[str, Any]:
    """Return the boundary policy whose own ARN is ARN (it names itself: only this boundary may be set)."""
    not_this = {"StringNotEquals": {PERMISSIONS_BOUNDARY_KEY: arn}}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "KilnServices",
                "Effect": "Allow",
                "Action": [f"{service}:*" for service in SERVICES],
                "Resource": "*",
            },
            {
                "Sid": "RolesOnlyWithThisBoundary",
                "Effect": "Deny",
                "Action": sorted((*BOUNDED_ROLE_ACTIONS, *BOUNDED_USER_ACTIONS)),
                "Resource": "*",
                "Condition": not_this,
            },
            {"Sid": "NoBoundaryRemoval", "Effect": "Deny", "Action": list(BOUNDARY_REMOVAL), "Resource": "*"},
            {"Sid": "NoBoundaryEdits", "Effect": "Deny", "Action": list(POLICY_EDITS), "Resource": arn},
            {"Sid": "NoOtherIdentities", "Effect": "Deny", "Action": sorted(NEVER), "Resource": "*"},
            *pivot_statements(),
        ],
    }
