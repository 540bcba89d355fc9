"""No sequence of what the CloudFormation execution policies allow makes or changes a role without kiln's permissions
boundary, and the boundary itself denies every way out of it. IAM's evaluation is modelled in tests/support/iam_eval:
each role-mutating action is tried against every kind of role (kiln's names and others, tagged or not, carrying kiln's
boundary, another or none)."""

from __future__ import annotations

import itertools
import json

import pytest

from kiln.contracts import execution_policy
from kiln.contracts.cdk_bootstrap import CDK_BOOTSTRAP_ROLES, CFN_EXECUTION_ROLE, bootstrap_role_name
from kiln.contracts.execution_policy import (
    PASSED_TO_SERVICES,
    execution_boundary_arn,
    execution_policies,
    execution_statements,
)
from kiln.contracts.permissions_boundary import (
    BOUNDARY_NAME,
    SERVICES,
    boundary_arn,
    boundary_document,
    boundary_problem,
)
from tests.support.iam_eval import decision

ACCOUNT = "111122223333"
VARIABLES = {"aws:PrincipalAccount": ACCOUNT}
KILN_BOUNDARY = f"arn:aws:iam::{ACCOUNT}:policy/{BOUNDARY_NAME}"
OTHER_BOUNDARY = f"arn:aws:iam::{ACCOUNT}:policy/PowerUser"
# "kiln" makes kiln's own grants (policy/kiln-*) match the boundary's name: the case a Deny must hold.
CLUSTERS = ("llm", "kiln")
ENVIRONMENT = "llm-pr7"
# Every role a statement could name: the environments', PCS's path, ParallelCluster's provider role, and others'.
ROLES = [
    f"arn:aws:iam::{ACCOUNT}:role/{name}"
    for name in (
        f"{ENVIRONMENT}-NodeRole-ABC",
        f"aws-pcs/{ENVIRONMENT}-Node",
        "ParallelClusterLambdaRole-1a2b3c4d",
        "llm-prod-Admin",
        "kiln-admin",
        "OrganizationAccountAccessRole",
    )
]
BOUNDARIES = (None, OTHER_BOUNDARY, KILN_BOUNDARY)
TAGS = (None, ENVIRONMENT, "prod")
# The actions that create a role or change what it may do, whose statements must require kiln's boundary (IAM's
# iam:PermissionsBoundary key: the request's boundary for CreateRole and PutRolePermissionsBoundary, the role's own
# for the policy changes).
BOUNDED = (
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
)
# Actions on a role that take no boundary key: only on roles tagged as one of the environments.
TAGGED = (
    "iam:DeleteRole",
    "iam:PassRole",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:UpdateAssumeRolePolicy",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
)
NEVER = (
    "iam:AddUserToGroup",
    "iam:AttachUserPolicy",
    "iam:CreateAccessKey",
    "iam:CreateLoginProfile",
    "iam:CreateUser",
    "iam:DeleteRolePermissionsBoundary",
    "iam:DeleteUserPermissionsBoundary",
    "iam:PutUserPolicy",
    "iam:UpdateLoginProfile",
)


def _statements() -> list[dict]:
    return execution_statements(CLUSTERS, qualifier="hnb659fds")


def _context(action: str, boundary: str | None, tag: str | None) -> dict[str, str]:
    context: dict[str, str] = {
        "iam:PolicyARN": "arn:aws:iam::aws:policy/AdministratorAccess",
        "iam:PassedToService": "lambda.amazonaws.com",
    }
    if boundary is not None:
        context["iam:PermissionsBoundary"] = boundary
    if tag is not None:
        # CreateRole's tags are the request's; every other call sees the role's own.
        context[
            "aws:RequestTag/kiln:environment" if action == "iam:CreateRole" else "aws:ResourceTag/kiln:environment"
        ] = tag
    return context


def test_the_boundary_the_policies_require_is_kilns_in_the_callers_account() -> None:
    assert execution_boundary_arn() == "arn:aws:iam::${aws:PrincipalAccount}:policy/kiln-permissions-boundary"
    assert execution_boundary_arn("arn:aws:iam::123456789012:policy/mine") == "arn:aws:iam::123456789012:policy/mine"


@pytest.mark.parametrize("action", BOUNDED)
def test_no_role_is_made_or_changed_without_kilns_boundary_and_an_environments_tag(action: str) -> None:
    statements = _statements()
    allowed = [
        (role, boundary, tag)
        for role, boundary, tag in itertools.product(ROLES, BOUNDARIES, TAGS)
        if decision(statements, action, role, _context(action, boundary, tag), VARIABLES) == "Allow"
    ]
    # Attaching AdministratorAccess is never allowed (iam:PolicyARN), so try an AWS managed policy kiln attaches.
    if action == "iam:AttachRolePolicy":
        assert allowed == []
        allowed = [
            (role, boundary, tag)
            for role, boundary, tag in itertools.product(ROLES, BOUNDARIES, TAGS)
            if decision(
                statements,
                action,
                role,
                {
                    **_context(action, boundary, tag),
                    "iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
                },
                VARIABLES,
            )
            == "Allow"
        ]
    assert allowed, f"{action} is never allowed: CloudFormation could not make kiln's roles"
    assert {(boundary, tag) for _, boundary, tag in allowed} == {(KILN_BOUNDARY, ENVIRONMENT)}


@pytest.mark.parametrize("action", TAGGED)
def test_trust_tags_deletion_and_passing_reach_only_roles_tagged_as_an_environment(action: str) -> None:
    statements = _statements()
    allowed = {
        tag
        for role, boundary, tag in itertools.product(ROLES, BOUNDARIES, TAGS)
        if decision(statements, action, role, _context(action, boundary, tag), VARIABLES) == "Allow"
    }
    assert allowed == {ENVIRONMENT}


def test_a_role_is_passed_only_to_the_services_kilns_stacks_hand_roles_to() -> None:
    statements = _statements()
    role = ROLES[0]
    tagged = {"aws:ResourceTag/kiln:environment": ENVIRONMENT}
    for service in PASSED_TO_SERVICES:
        context = {**tagged, "iam:PassedToService": service}
        assert decision(statements, "iam:PassRole", role, context, VARIABLES) == "Allow", service
    for service in ("cloudformation.amazonaws.com", "codebuild.amazonaws.com", "ecs-tasks.amazonaws.com"):
        context = {**tagged, "iam:PassedToService": service}
        assert decision(statements, "iam:PassRole", role, context, VARIABLES) == "None", service


@pytest.mark.parametrize("action", NEVER)
def test_no_user_key_password_or_boundary_removal_is_ever_allowed(action: str) -> None:
    statements = _statements()
    targets = [*ROLES, f"arn:aws:iam::{ACCOUNT}:user/llm-ci", f"arn:aws:iam::{ACCOUNT}:user/admin", "*"]
    for target, boundary, tag in itertools.product(targets, BOUNDARIES, TAGS):
        assert decision(statements, action, target, _context(action, boundary, tag), VARIABLES) != "Allow"


@pytest.mark.parametrize(
    "action",
    ["iam:CreatePolicyVersion", "iam:DeletePolicy", "iam:DeletePolicyVersion", "iam:SetDefaultPolicyVersion"],
)
def test_the_boundary_policy_itself_cannot_be_edited_even_where_a_clusters_name_covers_it(action: str) -> None:
    statements = _statements()
    # The cluster named kiln makes policy/kiln-* kiln's own, which covers the boundary's name...
    ours = decision(statements, action, f"arn:aws:iam::{ACCOUNT}:policy/kiln-pr7-Policy", {}, VARIABLES)
    assert ours == ("Allow" if action in execution_policy.POLICY_ACTIONS else "None")
    # ...and a Deny keeps the boundary out of it.
    assert decision(statements, action, KILN_BOUNDARY, {}, VARIABLES) == "Deny"


def test_a_role_made_with_the_boundary_cannot_shed_it_through_a_second_call() -> None:
    """The sequence CreateRole (bounded) -> DeleteRolePermissionsBoundary or PutRolePermissionsBoundary(other) ->
    PutRolePolicy(admin) fails at its second step, whatever the role's tags."""
    statements = _statements()
    role = ROLES[0]
    created = {"aws:RequestTag/kiln:environment": ENVIRONMENT, "iam:PermissionsBoundary": KILN_BOUNDARY}
    assert decision(statements, "iam:CreateRole", role, created, VARIABLES) == "Allow"
    tagged = {"aws:ResourceTag/kiln:environment": ENVIRONMENT}
    assert decision(statements, "iam:DeleteRolePermissionsBoundary", role, tagged, VARIABLES) == "Deny"
    replaced = {**tagged, "iam:PermissionsBoundary": OTHER_BOUNDARY}
    assert decision(statements, "iam:PutRolePermissionsBoundary", role, replaced, VARIABLES) == "None"


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("ec2:TerminateInstances", f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0123456789abcdef0"),
        ("fsx:DeleteFileSystem", f"arn:aws:fsx:us-east-1:{ACCOUNT}:file-system/fs-0123456789abcdef0"),
        ("sagemaker:DeleteCluster", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdef012345"),
        ("sagemaker:BatchDeleteClusterNodes", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdef012345"),
    ],
)
def test_destruction_reaches_only_what_the_environments_stacks_created(action: str, resource: str) -> None:
    statements = _statements()
    ours = {
        "aws:ResourceTag/kiln:environment": ENVIRONMENT,
        "aws:ResourceTag/aws:cloudformation:stack-name": f"{ENVIRONMENT}-storage",
    }
    assert decision(statements, action, resource, ours, VARIABLES) == "Allow"
    # Untagged, another owner's stack, or a kiln:environment tag someone put on a resource no stack of ours made.
    forged = {"aws:ResourceTag/kiln:environment": ENVIRONMENT}
    elsewhere = {**ours, "aws:ResourceTag/aws:cloudformation:stack-name": "prod-storage"}
    for context in ({}, forged, elsewhere):
        assert decision(statements, action, resource, context, VARIABLES) == "None", context


def test_ec2_tags_only_at_creation_or_on_resources_already_an_environments() -> None:
    statements = _statements()
    instance = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0123456789abcdef0"
    assert decision(statements, "ec2:CreateTags", instance, {"ec2:CreateAction": "RunInstances"}, VARIABLES) == "Allow"
    tagged = {"aws:ResourceTag/kiln:environment": ENVIRONMENT}
    assert decision(statements, "ec2:CreateTags", instance, tagged, VARIABLES) == "Allow"
    assert decision(statements, "ec2:CreateTags", instance, {}, VARIABLES) == "None"


def test_parallelclusters_provider_function_keeps_the_code_and_configuration_its_template_gave_it() -> None:
    statements = _statements()
    function = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:pcluster-cfn-1a2b3c4d"
    for action in ("lambda:UpdateFunctionCode", "lambda:UpdateFunctionConfiguration"):
        assert decision(statements, action, function, {}, VARIABLES) == "None", action
    assert decision(statements, "lambda:InvokeFunction", function, {}, VARIABLES) == "Allow"


def test_the_policies_name_a_given_boundary_and_still_fit_iams_limits() -> None:
    given = "arn:aws-us-gov:iam::123456789012:policy/org/ci-boundary"
    policies = execution_policies(
        tuple(f"cluster-{i}-abcdefgh" for i in range(6)),
        qualifier="hnb659fds",
        name_base="kiln-ci-exec-o-r",
        partition="aws-us-gov",
        boundary=given,
    )
    text = "".join(str(p.document) for p in policies)
    assert given in text and BOUNDARY_NAME not in text
    assert all(p.size <= execution_policy.MANAGED_POLICY_MAX_CHARS for p in policies)
    assert len(policies) <= execution_policy.MAX_POLICIES


# ---- The boundary itself: a role that carries it cannot step outside it. ----

BOUNDARY = boundary_document(KILN_BOUNDARY)["Statement"]


@pytest.mark.parametrize(
    ("action", "resource", "context"),
    [
        ("iam:CreateRole", "*", {}),
        ("iam:CreateRole", "*", {"iam:PermissionsBoundary": OTHER_BOUNDARY}),
        ("iam:PutRolePolicy", ROLES[3], {}),
        ("iam:AttachRolePolicy", ROLES[3], {"iam:PermissionsBoundary": OTHER_BOUNDARY}),
        ("iam:PutRolePermissionsBoundary", ROLES[0], {"iam:PermissionsBoundary": OTHER_BOUNDARY}),
        ("iam:DeleteRolePermissionsBoundary", ROLES[0], {"iam:PermissionsBoundary": KILN_BOUNDARY}),
        ("iam:CreatePolicyVersion", KILN_BOUNDARY, {}),
        ("iam:SetDefaultPolicyVersion", KILN_BOUNDARY, {}),
        ("iam:DeletePolicy", KILN_BOUNDARY, {}),
        ("iam:CreateUser", "*", {"iam:PermissionsBoundary": KILN_BOUNDARY}),
        ("iam:CreateAccessKey", "*", {}),
        ("iam:CreateLoginProfile", "*", {}),
        ("iam:UpdateAssumeRolePolicy", ROLES[5], {}),
        ("sts:AssumeRoot", "*", {}),
    ],
)
def test_the_boundary_denies_every_way_out(action: str, resource: str, context: dict) -> None:
    assert decision(BOUNDARY, action, resource, context) == "Deny"


@pytest.mark.parametrize(
    ("action", "resource", "context"),
    [
        ("iam:CreateRole", "*", {"iam:PermissionsBoundary": KILN_BOUNDARY}),
        ("iam:PutRolePolicy", ROLES[0], {"iam:PermissionsBoundary": KILN_BOUNDARY}),
        ("ec2:RunInstances", "*", {}),
        ("s3:GetObject", "arn:aws:s3:::b/k", {}),
        ("ssmmessages:OpenDataChannel", "*", {}),
    ],
)
def test_the_boundary_leaves_what_kilns_roles_do(action: str, resource: str, context: dict) -> None:
    assert decision(BOUNDARY, action, resource, context) == "Allow"


def test_the_boundary_caps_roles_at_the_services_kiln_uses() -> None:
    for action in ("organizations:LeaveOrganization", "account:CloseAccount", "billing:ModifyBillingPreferences"):
        assert decision(BOUNDARY, action, "*") == "None", action
    assert len(set(SERVICES)) == len(SERVICES) == len(sorted(SERVICES))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("kiln-permissions-boundary", False),
        ("arn:aws:iam::123456789012:policy/org/ci-boundary", False),
        ("arn:aws-cn:iam::123456789012:policy/b", False),
        ("", True),
        ("has space", True),
        ("arn:aws:iam::aws:policy/AdministratorAccess", True),
        ("arn:aws:iam::123456789012:role/r", True),
        (7, True),
    ],
)
def test_a_boundary_is_a_customer_managed_policys_name_or_arn(value: object, problem: bool) -> None:
    assert (boundary_problem(value) is not None) is problem


def test_a_name_becomes_a_policy_of_the_account_and_an_arn_stays() -> None:
    assert boundary_arn("b", partition="aws-cn", account="1") == "arn:aws-cn:iam::1:policy/b"
    assert boundary_arn("arn:aws:iam::2:policy/p/b", partition="aws", account="1") == "arn:aws:iam::2:policy/p/b"


# ---- Pivots: a role inside the boundary whose own policy allows "*" on "*" (whoever writes a template writes its
# roles' policies) still reaches only kiln's roles, functions and instances through actions that run code as another.

EVERYTHING = [{"Effect": "Allow", "Action": "*", "Resource": "*"}]
ENVIRONMENT_TAGS = {
    "iam:ResourceTag/kiln:environment": ENVIRONMENT,
    "aws:ResourceTag/kiln:environment": ENVIRONMENT,
    "ssm:resourceTag/kiln:environment": ENVIRONMENT,
}
PRINCIPAL = {"aws:PrincipalTag/kiln:environment": ENVIRONMENT}
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole"
FUNCTION = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:"
INSTANCE = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0123456789abcdef0"


def bounded(action: str, resource: str, context: dict | None = None, variables: dict | None = None) -> bool:
    """Whether a principal whose identity policy allows everything, inside kiln's boundary, may do ACTION on RESOURCE:
    both policies must allow it and neither deny it
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html)."""
    variables = PRINCIPAL if variables is None else variables
    # A policy variable is a key of the request's context: the caller's tags are both.
    context = {**variables, **(context or {})}
    return all(decision(p, action, resource, context, variables) == "Allow" for p in (EVERYTHING, BOUNDARY))


@pytest.mark.parametrize("service", ["lambda.amazonaws.com", "ec2.amazonaws.com", "cloudformation.amazonaws.com"])
def test_a_bounded_role_passes_only_kilns_roles(service: str) -> None:
    passed = {"iam:PassedToService": service}
    assert not bounded("iam:PassRole", ADMIN_ROLE, passed)
    assert not bounded("iam:PassRole", ADMIN_ROLE, {**passed, "aws:ResourceTag/kiln:environment": ENVIRONMENT})
    assert bounded("iam:PassRole", ROLES[0], {**passed, **ENVIRONMENT_TAGS})


PCLUSTER_ROLES = f"arn:aws:iam::{ACCOUNT}:role/parallelcluster/"
HEAD_NODE = {"aws:PrincipalTag/parallelcluster:cluster-name": ENVIRONMENT}


@pytest.mark.parametrize("caller", [PRINCIPAL, HEAD_NODE], ids=["provider", "head-node"])
def test_parallelclusters_roles_are_passed_only_by_their_own_clusters_provider_and_head_node(caller: dict) -> None:
    """ParallelCluster's cluster roles (path /parallelcluster/<cluster>/) carry no kiln tag. Its provider function
    carries its environment's kiln tag, the head node its cluster's parallelcluster:cluster-name: in CI, both name the
    environment, which is the cluster's name."""
    ours = f"{PCLUSTER_ROLES}{ENVIRONMENT}/{ENVIRONMENT}-RoleHeadNode-ABC"
    assert bounded("iam:PassRole", ours, variables=caller)
    for other in (
        f"{PCLUSTER_ROLES}llm-prod/llm-prod-RoleHeadNode-ABC",
        f"{PCLUSTER_ROLES}ParallelClusterLambdaRole-1a2b",
        f"{PCLUSTER_ROLES}{ENVIRONMENT}x/{ENVIRONMENT}x-RoleHeadNode-ABC",
    ):
        assert not bounded("iam:PassRole", other, variables=caller), other
    # A caller with neither tag gets the variables' default, which names no cluster.
    assert not bounded("iam:PassRole", ours, variables={})


@pytest.mark.parametrize("action", ["iam:CreateRole", "iam:TagRole", "iam:CreateUser", "iam:TagUser"])
def test_no_bounded_role_names_another_cluster_in_parallelclusters_tag(action: str) -> None:
    """Else a role inside the boundary could tag itself parallelcluster:cluster-name=llm-prod and pass that cluster's
    roles. ParallelCluster's provider still tags its own cluster's roles with its environment's name."""
    context = {"iam:PermissionsBoundary": KILN_BOUNDARY}
    forged = {**context, "aws:RequestTag/parallelcluster:cluster-name": "llm-prod"}
    own = {**context, "aws:RequestTag/parallelcluster:cluster-name": ENVIRONMENT}
    assert not bounded(action, ROLES[0], forged)
    assert not bounded(action, ROLES[0], own, variables={})
    if action != "iam:CreateUser":
        assert bounded(action, ROLES[0], own)
        assert bounded(action, ROLES[0], context)


CI_ROLE = {"aws:PrincipalTag/kiln:ci-identity": "owner/repo"}


def test_a_bounded_role_assumes_only_kilns_roles() -> None:
    for action in ("sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"):
        for caller in (PRINCIPAL, CI_ROLE):
            assert not bounded(action, ADMIN_ROLE, variables=caller), action
            assert bounded(action, ROLES[0], ENVIRONMENT_TAGS, variables=caller), action


@pytest.mark.parametrize("kind", CDK_BOOTSTRAP_ROLES)
def test_only_the_ci_role_assumes_cdks_bootstrap_roles(kind: str) -> None:
    """CDK's roles trust the account, and its deploy role hands CloudFormation the execution role: only the CI role
    (tagged kiln:ci-identity, a tag no bounded role can set) assumes them."""
    for qualifier in ("hnb659fds", "kiln0ci"):
        role = f"arn:aws:iam::{ACCOUNT}:role/{bootstrap_role_name(kind, ACCOUNT, 'us-east-1', qualifier)}"
        assert bounded("sts:AssumeRole", role, variables=CI_ROLE), role
        assert not bounded("sts:AssumeRole", role, variables=PRINCIPAL), role
        assert not bounded("sts:AssumeRole", role, variables={}), role
    assert not bounded("iam:TagRole", ROLES[0], {"aws:TagKeys": ["kiln:ci-identity"]})
    assert not bounded("iam:CreateRole", ROLES[0], {"aws:TagKeys": ["kiln:ci-identity"]})
    # CloudFormation's execution role is no deploy role: only CloudFormation assumes it.
    execution = f"arn:aws:iam::{ACCOUNT}:role/{bootstrap_role_name(CFN_EXECUTION_ROLE, ACCOUNT, 'us-east-1')}"
    assert not bounded("sts:AssumeRole", execution, variables=CI_ROLE)


@pytest.mark.parametrize("action", ["cloudformation:UpdateStack", "cloudformation:CreateChangeSet"])
def test_a_bounded_role_gives_new_templates_only_to_kilns_stacks_and_its_own_parallelcluster_stack(
    action: str,
) -> None:
    """A stack's updates run as the service role it already has (CDK's cfn-exec-role), whoever asks."""
    stack = f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/"
    assert not bounded(action, f"{stack}CDKToolkit/1a2b")
    assert not bounded(action, f"{stack}llm-prod-compute/1a2b")
    assert bounded(action, f"{stack}{ENVIRONMENT}-compute/1a2b", ENVIRONMENT_TAGS)
    # ParallelCluster's provider runs its cluster's stack (named after the cluster: the environment) as itself.
    assert bounded(action, f"{stack}{ENVIRONMENT}/1a2b")
    assert bounded(action, f"{stack}{ENVIRONMENT}-ComputeFleet-ABC/1a2b")
    assert not bounded(action, f"{stack}{ENVIRONMENT}/1a2b", variables={})
    assert not bounded("cloudformation:UpdateStackSet", f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stackset/s:1")


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("iam:TagRole", ADMIN_ROLE),
        ("iam:UntagRole", ROLES[0]),
        ("iam:TagUser", f"arn:aws:iam::{ACCOUNT}:user/admin"),
        ("lambda:TagResource", f"{FUNCTION}admin-tool"),
        ("ec2:CreateTags", INSTANCE),
        ("ec2:DeleteTags", INSTANCE),
        ("autoscaling:CreateOrUpdateTags", f"arn:aws:autoscaling:us-east-1:{ACCOUNT}:autoScalingGroup:a:b/c"),
        ("sagemaker:AddTags", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdef012345"),
        ("ssm:AddTagsToResource", f"arn:aws:ssm:us-east-1:{ACCOUNT}:managed-instance/mi-0123456789abcdef0"),
        ("tag:TagResources", "*"),
        ("cloudformation:TagResource", f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/prod/1a2b"),
        ("iam:CreateRole", ROLES[0]),
    ],
)
def test_a_bounded_role_writes_no_kiln_tag(action: str, resource: str) -> None:
    """A kiln:environment tag on an admin role, function or instance would bring it under the rules above."""
    bounded_role = {"iam:PermissionsBoundary": KILN_BOUNDARY}
    for keys in (["kiln:environment"], ["Name", "kiln:cluster"]):
        assert not bounded(action, resource, {**bounded_role, "aws:TagKeys": keys}), keys
    assert bounded(action, resource, {**bounded_role, "aws:TagKeys": ["Name"]})


def test_ec2_takes_kiln_tags_only_as_the_instance_is_created() -> None:
    created = {"aws:TagKeys": ["kiln:environment"], "ec2:CreateAction": "RunInstances"}
    assert bounded("ec2:CreateTags", INSTANCE, created)


@pytest.mark.parametrize("action", ["lambda:UpdateFunctionCode", "lambda:UpdateFunctionConfiguration"])
def test_a_bounded_role_changes_only_kilns_functions(action: str) -> None:
    for name in ("admin-tool", "pcluster-cfn-1a2b3c4d", "pcluster-CleanupResources-1a2b"):
        assert not bounded(action, f"{FUNCTION}{name}"), name
    assert bounded(action, f"{FUNCTION}{ENVIRONMENT}-handler", ENVIRONMENT_TAGS)


def test_a_bounded_role_invokes_only_kilns_functions_and_parallelclusters() -> None:
    assert not bounded("lambda:InvokeFunction", f"{FUNCTION}admin-tool")
    for action in ("lambda:InvokeFunctionUrl", "lambda:AddPermission", "lambda:CreateFunctionUrlConfig"):
        assert not bounded(action, f"{FUNCTION}admin-tool"), action
    assert bounded("lambda:InvokeFunction", f"{FUNCTION}{ENVIRONMENT}-handler", ENVIRONMENT_TAGS)
    # The cluster stack ParallelCluster's provider runs as itself invokes its own custom resources' functions.
    assert bounded("lambda:InvokeFunction", f"{FUNCTION}pcluster-CleanupResources-1a2b")


def test_a_bounded_role_runs_commands_and_sessions_only_on_kilns_instances() -> None:
    managed = f"arn:aws:ssm:us-east-1:{ACCOUNT}:managed-instance/mi-0123456789abcdef0"
    hyperpod = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdef012345"
    for action, resource in [
        ("ssm:SendCommand", INSTANCE),
        ("ssm:SendCommand", managed),
        ("ssm:StartSession", INSTANCE),
        ("ssm:StartSession", hyperpod),
        ("ec2:ModifyInstanceAttribute", INSTANCE),
        ("sagemaker:UpdateCluster", hyperpod),
        ("sagemaker:UpdateClusterSoftware", hyperpod),
    ]:
        assert not bounded(action, resource), (action, resource)
        assert bounded(action, resource, ENVIRONMENT_TAGS), (action, resource)
    # Session Manager reads an instance's tags as ssm:resourceTag: the other key alone does not make it kiln's.
    assert not bounded("ssm:StartSession", INSTANCE, {"aws:ResourceTag/kiln:environment": ENVIRONMENT})
    # The document a command or session names is no instance: AWS's shell document stays usable.
    assert bounded("ssm:SendCommand", "arn:aws:ssm:us-east-1::document/AWS-RunShellScript")


@pytest.mark.parametrize(
    "action",
    [
        "ssm:CreateAssociation",
        "ssm:StartAutomationExecution",
        "ssm:RegisterTaskWithMaintenanceWindow",
        "eks:CreateAccessEntry",
        "eks:AssociateAccessPolicy",
    ],
)
def test_no_bounded_role_runs_documents_on_instances_or_grants_itself_a_kubernetes_cluster(action: str) -> None:
    assert not bounded(action, "*")


def test_the_boundary_fits_a_managed_policy() -> None:
    text = json.dumps(boundary_document(KILN_BOUNDARY), separators=(",", ":"))
    assert len(text) <= execution_policy.MANAGED_POLICY_MAX_CHARS
