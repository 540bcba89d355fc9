"""GithubDeployIdentity: whom the role trusts, exactly what it may do and where, and its cdk-nag review."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from kiln.constructs import GithubDeployIdentityProps, acknowledgements
from kiln.contracts.permissions_boundary import BOUNDARY_NAME
from kiln.stacks.app import new_app
from kiln.stacks.ci_identity import CiIdentityStack, build_identity, identity_execution_policies, identity_stack_name
from kiln.stacks.synth import nag_report
from tests.support.constructs import ENV, logical_id

ACCOUNT = ENV.account
CLUSTERS = ("ci-smoke", "llm")
PROPS = GithubDeployIdentityProps(
    repository="octo-org/kiln",
    cluster_names=CLUSTERS,
    environments=("ci",),
    branch_trust=True,
    branches=("main", "release/*"),
    pull_requests=True,
)
SUB = "token.actions.githubusercontent.com:sub"
AUD = "token.actions.githubusercontent.com:aud"


@dataclass(frozen=True)
class Built:
    stack: CiIdentityStack
    template: Template
    outdir: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """PROPS' identity stack synthesized once, with cdk-nag, as `kiln ci identity` builds it (account pinned)."""
    outdir = tmp_path_factory.mktemp("ci-identity")
    app = new_app(str(outdir))
    stack = build_identity(app, PROPS, env=ENV)
    app.synth()
    template = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return Built(stack=stack, template=Template.from_json(template), outdir=outdir)


def _resources(template: Template, kind: str) -> dict[str, dict]:
    return template.find_resources(kind)


def _policy_grants(template: Template) -> set[tuple[str, str, str | None]]:
    """Every (action, resource, condition) the role's policies allow, one row per pair."""
    rows = set()
    for policy in _resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            assert not {"NotAction", "NotResource", "NotPrincipal"} & statement.keys()
            condition = json.dumps(statement["Condition"], sort_keys=True) if "Condition" in statement else None
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            rows |= {(action, resource, condition) for action in actions for resource in resources}
    return rows


def _tagged(*patterns: str, key: str = "aws:ResourceTag/kiln:environment", **more: dict) -> str:
    value: str | list[str] = list(patterns) if len(patterns) > 1 else patterns[0]
    return json.dumps({"StringLike": {key: value}, **more}, sort_keys=True)


ENVS = ["ci-smoke-*", "llm-*"]
# A stack of one of the role's environments, of one of its clusters exactly.
DELETE_TAGGED = _tagged(*ENVS, StringEquals={"aws:ResourceTag/kiln:cluster": list(CLUSTERS)})
# Run Command on a ParallelCluster head node (the stack named after the environment) or a PCS node (launched by PCS).
SEND_TO_HEAD_NODE = json.dumps(
    {"StringLike": {"aws:ResourceTag/aws:cloudformation:stack-name": ENVS, "aws:ResourceTag/kiln:environment": ENVS}},
    sort_keys=True,
)
# Sessions on HyperPod nodes: their cluster tagged as one of the role's environments.
SESSION_ON_HYPERPOD = _tagged(*ENVS)
SEND_TO_PCS_NODE = _tagged(*ENVS, Null={"aws:ResourceTag/aws:pcs:compute-node-group-id": "false"})
# Port forwarding through an EKS system node: an instance an Auto Scaling group launched.
SESSION_ON_SYSTEM_NODE = _tagged(
    *ENVS, key="ssm:resourceTag/kiln:environment", Null={"ssm:resourceTag/aws:autoscaling:groupName": "false"}
)


def _expected_grants() -> set[tuple[str, str, str | None]]:
    """The contract of `kiln ci`, written out by hand (ARNs as IAM sees them in account 111111111111)."""
    a = ACCOUNT
    rows: set[tuple[str, str, str | None]] = {
        ("sts:AssumeRole", f"arn:aws:iam::{a}:role/cdk-hnb659fds-{kind}-{a}-*", None)
        for kind in ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
    }
    rows |= {
        ("cloudformation:ListStacks", "*", None),
        ("ec2:DescribeInstances", "*", None),
        ("ssm:CancelCommand", "*", None),
        ("ssm:GetCommandInvocation", "*", None),
        ("ssm:ListCommandInvocations", "*", None),
        ("ssm:SendCommand", "arn:aws:ssm:*::document/AWS-RunShellScript", None),
        ("ssm:SendCommand", f"arn:aws:ec2:*:{a}:instance/*", SEND_TO_HEAD_NODE),
        ("ssm:SendCommand", f"arn:aws:ec2:*:{a}:instance/*", SEND_TO_PCS_NODE),
        ("ssm:StartSession", f"arn:aws:sagemaker:*:{a}:cluster/*", SESSION_ON_HYPERPOD),
        ("ssm:StartSession", "arn:aws:ssm:*::document/AWS-StartNonInteractiveCommand", None),
        # A private EKS endpoint: port forwarding through a system node of the role's environments, by Session
        # Manager's own tag key (as AWS's sample policies spell it).
        ("ssm:StartSession", f"arn:aws:ec2:*:{a}:instance/*", SESSION_ON_SYSTEM_NODE),
        ("ssm:StartSession", "arn:aws:ssm:*::document/AWS-StartPortForwardingSessionToRemoteHost", None),
        # Only the role's own sessions, by the tag Session Manager puts on each (an assumed role's session ids
        # do not start with its aws:userid).
        (
            "ssm:TerminateSession",
            "*",
            json.dumps({"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": ["${aws:userid}"]}}),
        ),
        ("sagemaker:DescribeCluster", f"arn:aws:sagemaker:*:{a}:cluster/*", None),
        ("sagemaker:ListClusterNodes", f"arn:aws:sagemaker:*:{a}:cluster/*", None),
        ("pcs:GetCluster", f"arn:aws:pcs:*:{a}:cluster/*", None),
        ("pcs:ListComputeNodeGroups", f"arn:aws:pcs:*:{a}:cluster/*", None),
        # kiln preflight (kiln ci up runs it first): read-only, none of them resource-scoped.
        ("ssm:GetParameters", "arn:aws:ssm:*::parameter/aws/service/global-infrastructure/*", None),
        # ... and whether the bootstrap still hands CloudFormation AdministratorAccess.
        ("iam:ListAttachedRolePolicies", f"arn:aws:iam::{a}:role/cdk-hnb659fds-cfn-exec-role-{a}-*", None),
    }
    rows |= {
        (action, "*", None)
        for action in (
            "ec2:DescribeAddresses",
            "ec2:DescribeAvailabilityZones",
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeImages",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeInternetGateways",
            "ec2:DescribeNatGateways",
            "ec2:DescribeNetworkInterfaces",
            "ec2:DescribeRouteTables",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSubnets",
            "ec2:DescribeVpcEndpoints",
            "ec2:DescribeVpcs",
            "fsx:DescribeFileSystems",
            # ... and its leftovers check (advisory): the tagging API, AMP's listing, and what they found.
            "aps:ListWorkspaces",
            "fsx:DescribeBackups",
            "kms:DescribeKey",
            "s3:GetBucketLogging",
            "tag:GetResources",
            "servicequotas:GetAWSDefaultServiceQuota",
            "servicequotas:GetServiceQuota",
            "servicequotas:ListAWSDefaultServiceQuotas",
            "servicequotas:ListServiceQuotas",
        )
    }
    passed = json.dumps({"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}})
    for c in CLUSTERS:
        stacks = f"arn:aws:cloudformation:*:{a}:stack/{c}-*/*"
        rows |= {
            (action, stacks, None)
            for action in (
                "cloudformation:DescribeStacks",
                "cloudformation:ListStackResources",
                "cloudformation:GetTemplate",
                "cloudformation:DescribeStackEvents",
            )
        }
        rows.add(("cloudformation:DeleteStack", stacks, DELETE_TAGGED))
        for kind in ("data", "lifecycle"):
            bucket = f"arn:aws:s3:::{c}-*-{kind}*-{a}"
            rows |= {
                (action, bucket, None) for action in ("s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketTagging")
            }
        for kind in ("data", "data-logs", "lifecycle", "lifecycle-logs"):
            bucket = f"arn:aws:s3:::{c}-*-{kind}-{a}"
            rows |= {(action, f"{bucket}/*", None) for action in ("s3:DeleteObject", "s3:DeleteObjectVersion")}
        schedule = f"arn:aws:scheduler:*:{a}:schedule/default/{c}-*-reaper"
        rows |= {("scheduler:GetSchedule", schedule, None), ("scheduler:UpdateSchedule", schedule, None)}
        rows.add(("iam:PassRole", f"arn:aws:iam::{a}:role/{c}-*-reaper-invoke", passed))
        rows |= {
            ("eks:DescribeCluster", f"arn:aws:eks:*:{a}:cluster/{c}-*", None),
            ("eks:ListNodegroups", f"arn:aws:eks:*:{a}:cluster/{c}-*", None),
            ("eks:DescribeNodegroup", f"arn:aws:eks:*:{a}:nodegroup/{c}-*/*/*", None),
        }
    return rows


def string_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: * is any run of characters, ? one character, everything else literal and case-sensitive."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _trusted(template: Template, sub: str) -> bool:
    (role,) = _resources(template, "AWS::IAM::Role").values()
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    return any(string_like(pattern, sub) for pattern in statement["Condition"]["StringLike"][SUB])


def test_the_role_trusts_only_the_provider_with_github_audience_and_listed_subjects(built: Built) -> None:
    identity = built.stack.identity
    (role,) = _resources(built.template, "AWS::IAM::Role").values()
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Effect": "Allow",
            "Principal": {"Federated": {"Ref": logical_id(identity.provider.node.default_child)}},
            "Condition": {
                "StringEquals": {AUD: "sts.amazonaws.com"},
                "StringLike": {
                    SUB: [
                        "repo:octo-org/kiln:environment:ci",
                        "repo:octo-org/kiln:ref:refs/heads/main",
                        "repo:octo-org/kiln:ref:refs/heads/release/*",
                        "repo:octo-org/kiln:pull_request",
                    ]
                },
            },
        }
    ]
    assert role["Properties"]["MaxSessionDuration"] == 3600
    built.template.has_resource_properties(
        "AWS::IAM::OIDCProvider",
        {"Url": "https://token.actions.githubusercontent.com", "ClientIdList": ["sts.amazonaws.com"]},
    )


@pytest.mark.parametrize(
    ("sub", "trusted"),
    [
        ("repo:octo-org/kiln:ref:refs/heads/main", True),
        ("repo:octo-org/kiln:ref:refs/heads/release/2.1", True),
        ("repo:octo-org/kiln:pull_request", True),
        ("repo:octo-org/kiln:environment:ci", True),
        ("repo:octo-org/kiln:ref:refs/heads/feature/x", False),
        ("repo:octo-org/kiln:ref:refs/heads/mainline", False),
        ("repo:octo-org/kiln:ref:refs/tags/v1.0", False),
        ("repo:octo-org/kiln:environment:production", False),
        ("repo:octo-org/kiln-fork:ref:refs/heads/main", False),
        ("repo:octo-org/kil:ref:refs/heads/main", False),
        ("repo:evil/kiln:ref:refs/heads/main", False),
        ("repo:Octo-Org/Kiln:ref:refs/heads/main", False),
        ("repo:evil/x:ref:refs/heads/main:repo:octo-org/kiln:pull_request", False),
    ],
)
def test_an_unlisted_repository_branch_or_environment_cannot_match(built: Built, sub: str, trusted: bool) -> None:
    assert _trusted(built.template, sub) is trusted


def test_the_role_may_do_exactly_the_contract_each_on_its_narrowest_scope(built: Built) -> None:
    assert _policy_grants(built.template) == _expected_grants()


def _condition_holds(condition: dict, tags: dict[str, str]) -> bool:
    """IAM's StringLike, StringEquals and Null on a resource's tags (aws:ResourceTag/K and ssm:resourceTag/K alike)."""

    def tag(key: str) -> str | None:
        return tags.get(key.split("/", 1)[1])

    for operator, keys in condition.items():
        for key, wanted in keys.items():
            values = wanted if isinstance(wanted, list) else [wanted]
            found = tag(key)
            if operator == "Null":
                if (found is None) != (values == ["true"]):
                    return False
            elif found is None or not any(
                string_like(v, found) if operator == "StringLike" else v == found for v in values
            ):
                return False
    return True


def allowed(template: Template, action: str, resource: str, tags: dict[str, str]) -> bool:
    """Whether the role's statements allow ACTION on RESOURCE carrying TAGS (Allow only: the role has no Deny)."""
    for policy in _resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if (
                action in actions
                and any(isinstance(r, str) and string_like(r, resource) for r in resources)
                and _condition_holds(statement.get("Condition", {}), tags)
            ):
                return True
    return False


INSTANCE = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0123456789abcdef0"
# What anyone allowed ec2:CreateTags can put on any instance.
FORGED = {"kiln:environment": "llm-4242"}


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (FORGED, False),
        # ParallelCluster's head node: an instance of its cluster stack, named after the environment.
        ({**FORGED, "aws:cloudformation:stack-name": "llm-4242"}, True),
        # A long-lived cluster llm-prod (its stack matches llm-*) carries no kiln:environment.
        ({"aws:cloudformation:stack-name": "llm-prod"}, False),
        ({"aws:cloudformation:stack-name": "llm-4242"}, False),
        # ... but not of another stack.
        ({**FORGED, "aws:cloudformation:stack-name": "prod-db"}, False),
        # A PCS login node: PCS sets its node group's id.
        ({**FORGED, "aws:pcs:compute-node-group-id": "pcs_abc123"}, True),
        ({"aws:pcs:compute-node-group-id": "pcs_abc123"}, False),
        ({**FORGED, "kiln:environment": "prod-4242", "aws:pcs:compute-node-group-id": "pcs_abc123"}, False),
    ],
)
def test_run_command_needs_a_tag_no_tagger_can_forge(built: Built, tags: dict, expected: bool) -> None:
    assert allowed(built.template, "ssm:SendCommand", INSTANCE, tags) is expected


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (FORGED, False),
        ({**FORGED, "aws:autoscaling:groupName": "eks-system-12345678"}, True),
        ({"aws:autoscaling:groupName": "eks-system-12345678"}, False),
    ],
)
def test_sessions_on_instances_need_the_environment_tag_and_an_auto_scaling_launch(
    built: Built, tags: dict, expected: bool
) -> None:
    assert allowed(built.template, "ssm:StartSession", INSTANCE, tags) is expected


HYPERPOD_CLUSTER = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdef012345"


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        ({"kiln:environment": "llm-4242"}, True),
        # Any other HyperPod cluster of the account: untagged, or another cluster's environment.
        ({}, False),
        ({"kiln:environment": "prod-4242"}, False),
        ({"kiln:cluster": "llm"}, False),
    ],
)
def test_sessions_on_hyperpod_nodes_reach_only_the_environments_clusters(
    built: Built, tags: dict, expected: bool
) -> None:
    assert allowed(built.template, "ssm:StartSession", HYPERPOD_CLUSTER, tags) is expected


@pytest.mark.parametrize(
    ("bucket", "expected"),
    [
        ("llm-4242-data", True),
        ("llm-4242-data-logs", True),
        ("llm-4242-lifecycle-logs", True),
        # A long-lived cluster's own bucket, had its spec named it so.
        ("llm-data", False),
        ("llm-4242-data-other-account", False),
        # Any other bucket whose name merely starts like an environment's data bucket.
        ("llm-4242-database-backups", False),
        ("llm-4242-data-exports", False),
    ],
)
def test_emptying_buckets_reaches_the_environments_four_only(built: Built, bucket: str, expected: bool) -> None:
    name = bucket if bucket.endswith("other-account") else f"{bucket}-{ACCOUNT}"
    assert allowed(built.template, "s3:DeleteObject", f"arn:aws:s3:::{name}/checkpoints/step-10.pt", {}) is expected


@pytest.mark.parametrize(
    ("stack", "tags", "expected"),
    [
        ("llm-4242-compute", {"kiln:environment": "llm-4242", "kiln:cluster": "llm"}, True),
        # Another role's cluster llm-x: its environments match llm-*, its kiln:cluster does not.
        ("llm-x-4242-compute", {"kiln:environment": "llm-x-4242", "kiln:cluster": "llm-x"}, False),
        ("llm-4242-compute", {}, False),
        # A long-lived cluster's own stacks carry kiln:cluster, not kiln:environment.
        ("llm-compute", {"kiln:cluster": "llm"}, False),
        ("prod-compute", {"kiln:environment": "llm-4242", "kiln:cluster": "llm"}, False),
    ],
)
def test_deleting_a_stack_needs_its_environment_and_cluster_tags(
    built: Built, stack: str, tags: dict, expected: bool
) -> None:
    arn = f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/{stack}/0a1b2c3d-0000-1111-2222-333344445555"
    assert allowed(built.template, "cloudformation:DeleteStack", arn, tags) is expected


def test_the_stack_is_tagged_and_outputs_the_role_arn(built: Built) -> None:
    identity = built.stack.identity
    assert built.stack.stack_name == "kiln-ci-identity-octo-org-kiln"
    built.template.has_output(
        "DeployRoleArn", {"Value": {"Fn::GetAtt": [logical_id(identity.role.node.default_child), "Arn"]}}
    )
    built.template.has_resource_properties(
        "AWS::IAM::Role", {"Tags": [{"Key": "kiln:ci-identity", "Value": "octo-org/kiln"}]}
    )


def test_cdk_nag_has_no_open_finding_and_every_acknowledgement_is_a_reviewed_grant(built: Built) -> None:
    report = nag_report(built.outdir)
    assert report.violations == []
    reasons = {grant.reason for grant in (*acknowledgements.CI_IDENTITY_GRANTS, *acknowledgements.BOUNDARY_GRANTS)}
    assert report.acknowledged
    for rule, reason in report.acknowledged:
        assert rule.startswith("AwsSolutions::AwsSolutions-IAM5[")
        # A finding shared by several reviewed pairs carries each of their reasons.
        assert reason and all(part in reasons for part in _split_reasons(reason, reasons))


def _split_reasons(text: str, reasons: set[str]) -> list[str]:
    parts, rest = [], text
    while rest:
        found = next((r for r in reasons if rest.startswith(r)), None)
        assert found is not None, f"acknowledged with an unreviewed reason: {rest!r}"
        parts.append(found)
        rest = rest[len(found) :].lstrip()
    return parts


def test_every_ci_grant_has_a_reason_and_exact_actions() -> None:
    grants = acknowledgements.CI_IDENTITY_GRANTS
    assert all(g.reason.strip() and g.actions for g in grants)
    assert not any("*" in action for g in grants for action in g.actions)


def test_a_new_wildcard_on_the_role_fails_synthesis(tmp_path: Path) -> None:
    app = new_app(str(tmp_path))
    stack = build_identity(app, PROPS, env=ENV)
    stack.identity.role.add_to_policy(iam.PolicyStatement(actions=["iam:*"], resources=["*"]))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    open_findings = {v.split(" at ")[0] for v in nag_report(tmp_path).violations}
    assert open_findings == {"AwsSolutions-IAM5[Action::iam:*]", "AwsSolutions-IAM5[Resource::*]"}


def test_an_existing_provider_is_trusted_and_none_is_created() -> None:
    arn = f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com"
    props = GithubDeployIdentityProps(
        repository="octo-org/kiln",
        cluster_names=("ci",),
        existing_provider_arn=arn,
        role_name="kiln-ci",
        cdk_qualifier="abc",
    )
    stack = build_identity(new_app(), props, env=ENV, nag=False)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    (role,) = _resources(template, "AWS::IAM::Role").values()
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Federated": arn}
    # Bound to the kiln-ci environment unless told otherwise.
    assert statement["Condition"]["StringLike"] == {SUB: ["repo:octo-org/kiln:environment:kiln-ci"]}
    assert role["Properties"]["RoleName"] == "kiln-ci"
    assumed = {r for a, r, _ in _policy_grants(template) if a == "sts:AssumeRole"}
    assert f"arn:aws:iam::{ACCOUNT}:role/cdk-abc-deploy-role-{ACCOUNT}-*" in assumed


def test_five_clusters_of_the_longest_name_keep_one_inline_policy() -> None:
    names = tuple(f"cluster-{i}-abcdefgh" for i in range(5))
    assert all(len(name) == 18 for name in names)
    props = GithubDeployIdentityProps(
        repository="o/r", cluster_names=names, branch_trust=True, branches=("main",), pull_requests=True
    )
    stack = build_identity(new_app(), props, env=cdk.Environment(account=ACCOUNT, region="us-gov-west-1"), nag=False)
    template = Template.from_stack(stack)
    # The one managed policy is kiln's permissions boundary: CDK split none of the role's statements out.
    (boundary,) = _resources(template, "AWS::IAM::ManagedPolicy").values()
    assert boundary["Properties"]["ManagedPolicyName"] == BOUNDARY_NAME
    (policy,) = _resources(template, "AWS::IAM::Policy").values()
    assert len(json.dumps(policy["Properties"]["PolicyDocument"], separators=(",", ":"))) < 10_240


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"repository": "octo-org"}, r"repository: got 'octo-org'; allowed: OWNER/NAME"),
        ({"repository": "octo/*"}, r"repository: got 'octo/\*'"),
        ({"repository": "-octo/kiln"}, r"repository: got '-octo/kiln'"),
        ({"repository": "octo/.."}, r"repository: got 'octo/\.\.'"),
        ({"cluster_names": ()}, r"cluster_names: got \[\]; allowed: 1 to 5"),
        ({"cluster_names": "ci"}, r"cluster_names: got 'ci'; allowed: a list of strings"),
        ({"cluster_names": ("Bad_Name",)}, r"cluster_names: got 'Bad_Name'; allowed: a lowercase letter"),
        ({"cluster_names": ("a" * 19,)}, r"allowed: at most 18 characters"),
        ({"cluster_names": tuple(f"c{i}" for i in range(6))}, r"allowed: 1 to 5 cluster names"),
        ({"branches": ("refs/heads/main",)}, r"branches: got 'refs/heads/main'; allowed: a branch name"),
        ({"branches": ("main:evil",)}, r"branches: got 'main:evil'"),
        ({"branches": ("a..b",)}, r"branches: got 'a\.\.b'"),
        ({"environments": ("prod*",)}, r"environments: got 'prod\*'"),
        ({"environments": ()}, r"branches/pull_requests/environments: .*allowed: at least one environment"),
        ({"branches": ("main",)}, r"branches/pull_requests: got \(\['main'\], False\); allowed: branch_trust=True"),
        ({"pull_requests": True}, r"branches/pull_requests: got \(\[\], True\); allowed: branch_trust=True"),
        (
            {"cluster_names": ("qs", "qs-foo")},
            r"cluster_names: got \['qs', 'qs-foo'\]; allowed: names none of which starts with another's name and '-' "
            r"\(qs-foo starts with qs-, so qs-\* grants would reach qs-foo's environments\)$",
        ),
        ({"existing_provider_arn": "arn:aws:iam::111111111111:oidc-provider/example.com"}, r"existing_provider_arn"),
        ({"cdk_qualifier": "much-too-long"}, r"cdk_qualifier: got 'much-too-long'"),
        ({"max_session_duration_hours": 13}, r"max_session_duration_hours: got 13; allowed: a whole number"),
        ({"max_session_duration_hours": True}, r"max_session_duration_hours: got True"),
        ({"role_name": "has space"}, r"role_name: got 'has space'"),
    ],
)
def test_bad_props_are_refused_naming_what_was_received_and_allowed(changes: dict, message: str) -> None:
    given = {"repository": "octo-org/kiln", "cluster_names": ("ci",), **changes}
    with pytest.raises(ValueError, match=message):
        GithubDeployIdentityProps(**given)


def test_stack_names_follow_cloudformation_rules_and_never_collide() -> None:
    assert identity_stack_name("octo-org/kiln") == "kiln-ci-identity-octo-org-kiln"
    # GitHub names are case-insensitive: one repository, one stack.
    assert identity_stack_name("Octo-Org/Kiln") == "kiln-ci-identity-octo-org-kiln"
    dotted = identity_stack_name("octo/my.repo")
    assert dotted.startswith("kiln-ci-identity-octo-my-repo-") and dotted != identity_stack_name("octo/my-repo")
    longest = identity_stack_name("a" * 39 + "/" + "r" * 100)
    for made in (dotted, longest):
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,127}", made)


def test_the_stack_creates_kilns_permissions_boundary_and_the_role_carries_it(built: Built) -> None:
    (boundary_id, boundary), *others = _resources(built.template, "AWS::IAM::ManagedPolicy").items()
    assert others == []
    assert boundary["Properties"]["ManagedPolicyName"] == BOUNDARY_NAME
    denied = {
        action
        for statement in boundary["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny"
        for action in statement["Action"]
    }
    assert {
        "iam:CreateRole",
        "iam:DeleteRolePermissionsBoundary",
        "iam:CreatePolicyVersion",
        "iam:CreateUser",
    } <= denied
    (role,) = _resources(built.template, "AWS::IAM::Role").values()
    assert role["Properties"]["PermissionsBoundary"] == {"Ref": boundary_id}


@pytest.mark.parametrize(
    ("given", "arn"),
    [
        ("org-boundary", f"arn:aws:iam::{ACCOUNT}:policy/org-boundary"),
        ("arn:aws:iam::123456789012:policy/team/b", "arn:aws:iam::123456789012:policy/team/b"),
    ],
)
def test_an_existing_boundary_is_carried_and_required_and_none_is_created(given: str, arn: str) -> None:
    props = GithubDeployIdentityProps(repository="o/r", cluster_names=("llm",), permissions_boundary=given)
    template = Template.from_stack(build_identity(new_app(), props, env=ENV, nag=False))
    template.resource_count_is("AWS::IAM::ManagedPolicy", 0)
    (role,) = _resources(template, "AWS::IAM::Role").values()
    assert json.dumps(role["Properties"]["PermissionsBoundary"]).count(arn.rsplit("/", 1)[-1]) == 1
    text = json.dumps([p.document for p in identity_execution_policies(props)])
    wanted = arn if given.startswith("arn:") else "arn:aws:iam::${aws:PrincipalAccount}:policy/org-boundary"
    assert wanted in text and BOUNDARY_NAME not in text


def test_a_boundary_that_is_no_policy_is_refused_in_one_line() -> None:
    with pytest.raises(
        Exception, match=r"permissions_boundary: got 'arn:aws:iam::aws:policy/AdministratorAccess'"
    ) as e:
        GithubDeployIdentityProps(
            repository="o/r", cluster_names=("llm",), permissions_boundary="arn:aws:iam::aws:policy/AdministratorAccess"
        )
    assert "\n" not in str(e.value)
