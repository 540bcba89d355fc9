"""GithubDeployIdentity: the IAM role a GitHub Actions workflow assumes (OIDC) to run `kiln ci` environments."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from kiln.catalog.names import CLUSTER_NAME, CLUSTER_NAME_RULE
from kiln.ci.reaper_code.kiln_reaper.contract import (
    BUCKET_PURPOSES,
    MAX_WHOLE_CLUSTER_NAME,
    SCHEDULE_GROUP,
    TAG_ENVIRONMENT,
    invoke_role_name,
    schedule_name,
)
from kiln.constructs import nag_rules
from kiln.constructs._checks import acknowledge_wildcards, require, unresolved
from kiln.preflight.permissions import GLOBAL_INFRASTRUCTURE_PARAMETERS, PARAMETER_READS, UNSCOPED_READS

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_AUDIENCE = "sts.amazonaws.com"
DEFAULT_CDK_QUALIFIER = "hnb659fds"
# The CDK CLI's modern bootstrap roles: cdk-<qualifier>-<kind>-<account>-<region> in CDK's bootstrap template.
CDK_BOOTSTRAP_ROLES = ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
# Read-only calls that IAM cannot scope to a resource: granted on *.
LIST_STACKS = ("cloudformation:ListStacks",)
COMMAND_RESULTS = ("ssm:CancelCommand", "ssm:GetCommandInvocation", "ssm:ListCommandInvocations")
STACK_READS = (
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "cloudformation:ListStackResources",
)
BUCKET_READS = ("s3:GetBucketTagging", "s3:ListBucket", "s3:ListBucketVersions")
OBJECT_DELETES = ("s3:DeleteObject", "s3:DeleteObjectVersion")
SCHEDULE_ACTIONS = ("scheduler:GetSchedule", "scheduler:UpdateSchedule")
PCS_READS = ("pcs:GetCluster", "pcs:ListComputeNodeGroups")
HYPERPOD_READS = ("sagemaker:DescribeCluster", "sagemaker:ListClusterNodes")
EKS_CLUSTER_READS = ("eks:DescribeCluster", "eks:ListNodegroups")
ENVIRONMENT_TAG = TAG_ENVIRONMENT
RUN_SHELL_DOCUMENT = "AWS-RunShellScript"
SESSION_DOCUMENT = "AWS-StartNonInteractiveCommand"
# `kiln ci run` reaches a private EKS API endpoint through a system node with this document (kiln.ci.remote).
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
# Session Manager's own condition key for a target instance's tags, as AWS's sample policies spell it:
# https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html
SESSION_TARGET_TAG = f"ssm:resourceTag/{TAG_ENVIRONMENT}"
# The kiln-owned buckets of an environment: <env>-<kind>-<account>.
ENVIRONMENT_BUCKETS = BUCKET_PURPOSES
# An environment is named <cluster>-<run slug> in at most 31 characters, with a run slug of up to 12: a longer
# cluster name would be cut short in the environment's name, and the role's <cluster>-* scopes would miss it.
MAX_CI_CLUSTER_NAME = MAX_WHOLE_CLUSTER_NAME
# Each cluster name adds about 1,100 characters to the role's policy; IAM holds 10,240 inline per role, beyond
# which CDK would split the policy into managed policies that kiln's wildcard review does not see.
MAX_CI_CLUSTERS = 6

# GitHub: an owner of letters, digits and single inner '-' (39 at most); a repository of letters, digits, . _ -.
REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}/[A-Za-z0-9._-]{1,100}")
REPOSITORY_RULE = (
    "OWNER/NAME as GitHub spells it (letters, digits, '-' in the owner; letters, digits, . _ - in the name)"
)
# Branch patterns: git's ref characters that are plain in IAM, plus IAM's StringLike wildcards * and ?.
BRANCH = re.compile(r"(?!/|-|refs/)(?!.*(?:\.\.|//))[A-Za-z0-9._/+@*?-]{1,255}")
BRANCH_RULE = (
    "a branch name or StringLike pattern without refs/heads/ (letters, digits, . _ / + @ -, and * or ? as wildcards)"
)
ENVIRONMENT = re.compile(r"[A-Za-z0-9._-]{1,255}")
ENVIRONMENT_RULE = "a GitHub environment name of letters, digits, . _ - (no wildcards)"
CDK_QUALIFIER = re.compile(r"[A-Za-z0-9_-]{1,10}")
CDK_QUALIFIER_RULE = "1-10 letters, digits, '_' or '-' (the qualifier `cdk bootstrap` was given)"
ROLE_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,64}")
ROLE_NAME_RULE = "1-64 letters, digits and + = , . @ _ -"
PROVIDER_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/" + re.escape(GITHUB_OIDC_HOST))
PROVIDER_ARN_RULE = f"arn:PARTITION:iam::ACCOUNT:oidc-provider/{GITHUB_OIDC_HOST}"


def _names(name: str, value: object) -> tuple[str, ...]:
    """Return VALUE as a tuple of strings; a bare string (a common slip for a one-item list) is refused."""
    ok = not isinstance(value, str) and isinstance(value, Sequence) and all(isinstance(v, str) for v in value)
    require(ok, name, value, "a list of strings")
    return tuple(dict.fromkeys(value))


@dataclass(frozen=True, kw_only=True)
class GithubDeployIdentityProps:
    """Props for GithubDeployIdentity.

    repository: the GitHub repository whose workflows may assume the role, as OWNER/NAME. IAM matches the
        token's sub claim case-sensitively, so spell it as GitHub does; the repository must use GitHub's default
        sub claim (no customized OIDC subject template).
    cluster_names: the spec names whose CI environments (<cluster>-<run>) the role may manage; required, 1 to 6
        (IAM limits the role's policy size), each a cluster name of at most 18 characters (so environment names
        are never cut short). A name's scopes are <name>-*, so they also cover a cluster whose name starts
        with <name>-.
    branches: branch name patterns (IAM StringLike: * and ? are wildcards) whose workflow runs may assume the role,
        without refs/heads/; default ("main",). A job that names a GitHub environment is not a branch run.
    pull_requests: also trust workflow runs for pull requests (sub repo:OWNER/NAME:pull_request); default False.
        Any pull request that can run workflows with id-token: write in the repository could then assume the role.
    environments: GitHub deployment environments whose jobs may assume the role (sub
        repo:OWNER/NAME:environment:ENV); default none. Their protection rules (reviewers, branches) then gate it.
    existing_provider_arn: the account's IAM OIDC provider for token.actions.githubusercontent.com, to reuse;
        default None: create one. An account holds at most one provider per URL, so pass the existing one's ARN
        when the account already has it (another role or tool made it), or deploying fails.
    cdk_qualifier: the qualifier of the account's CDK bootstrap (its roles are cdk-<qualifier>-...); default
        "hnb659fds", CDK's own default.
    max_session_duration_hours: the longest session the role grants, 1 to 12; default 1. Sessions chained into
        the CDK bootstrap roles last at most 1 hour whatever this says.
    role_name: the role's name; default None: CloudFormation generates one (see the DeployRoleArn output).
    """

    repository: str
    cluster_names: Sequence[str]
    branches: Sequence[str] = ("main",)
    pull_requests: bool = False
    environments: Sequence[str] = ()
    existing_provider_arn: str | None = None
    cdk_qualifier: str = DEFAULT_CDK_QUALIFIER
    max_session_duration_hours: int = 1
    role_name: str | None = None

    def __post_init__(self) -> None:
        require(
            isinstance(self.repository, str)
            and REPOSITORY.fullmatch(self.repository) is not None
            and self.repository.split("/")[1] not in (".", ".."),
            "repository",
            self.repository,
            REPOSITORY_RULE,
        )
        clusters = _names("cluster_names", self.cluster_names)
        require(
            1 <= len(clusters) <= MAX_CI_CLUSTERS,
            "cluster_names",
            list(clusters),
            f"1 to {MAX_CI_CLUSTERS} cluster names (one role per handful of clusters; IAM limits a role's policy size)",
        )
        for name in clusters:
            require(CLUSTER_NAME.fullmatch(name) is not None, "cluster_names", name, CLUSTER_NAME_RULE)
            require(
                len(name) <= MAX_CI_CLUSTER_NAME,
                "cluster_names",
                name,
                f"at most {MAX_CI_CLUSTER_NAME} characters, so that <name>-<run> environment names keep the whole name",
            )
        branches = _names("branches", self.branches)
        for branch in branches:
            require(BRANCH.fullmatch(branch) is not None, "branches", branch, BRANCH_RULE)
        environments = _names("environments", self.environments)
        for environment in environments:
            require(ENVIRONMENT.fullmatch(environment) is not None, "environments", environment, ENVIRONMENT_RULE)
        require(isinstance(self.pull_requests, bool), "pull_requests", self.pull_requests, "True or False")
        require(
            bool(branches or environments or self.pull_requests),
            "branches/pull_requests/environments",
            (list(branches), self.pull_requests, list(environments)),
            "at least one branch, pull_requests=True or one environment",
        )
        arn = self.existing_provider_arn
        if arn is not None and not unresolved(arn):
            require(
                isinstance(arn, str) and PROVIDER_ARN.fullmatch(arn) is not None,
                "existing_provider_arn",
                arn,
                PROVIDER_ARN_RULE,
            )
        require(
            isinstance(self.cdk_qualifier, str) and CDK_QUALIFIER.fullmatch(self.cdk_qualifier) is not None,
            "cdk_qualifier",
            self.cdk_qualifier,
            CDK_QUALIFIER_RULE,
        )
        hours = self.max_session_duration_hours
        require(
            isinstance(hours, int) and not isinstance(hours, bool) and 1 <= hours <= 12,
            "max_session_duration_hours",
            hours,
            "a whole number of hours from 1 to 12",
        )
        if self.role_name is not None and not unresolved(self.role_name):
            require(
                isinstance(self.role_name, str) and ROLE_NAME.fullmatch(self.role_name) is not None,
                "role_name",
                self.role_name,
                ROLE_NAME_RULE,
            )
        # Frozen: store the checked, de-duplicated tuples.
        object.__setattr__(self, "cluster_names", clusters)
        object.__setattr__(self, "branches", branches)
        object.__setattr__(self, "environments", environments)

    @property
    def subjects(self) -> tuple[str, ...]:
        """Return the token sub patterns the role trusts (IAM StringLike), in the order given."""
        repo = f"repo:{self.repository}"
        return (
            *(f"{repo}:ref:refs/heads/{branch}" for branch in self.branches),
            *((f"{repo}:pull_request",) if self.pull_requests else ()),
            *(f"{repo}:environment:{environment}" for environment in self.environments),
        )


class GithubDeployIdentity(Construct):
    """An IAM role GitHub Actions assumes by OIDC to deploy, inspect and delete kiln CI environments, nothing more.

    It trusts only the repository's listed branches, pull requests and environments (token audience
    sts.amazonaws.com). It deploys by assuming CDK's bootstrap roles; otherwise it only reads and deletes the
    <cluster>-<run> stacks, buckets and reaper schedules `kiln ci` names, and runs commands on their nodes (Run
    Command on instances tagged with one of those environments; Session Manager on HyperPod nodes, which IAM
    names only by cluster id, so on any HyperPod cluster of the account) or reaches their private EKS API endpoint
    (Session Manager port forwarding through an instance tagged with one of those environments).
    """

    def __init__(self, scope: Construct, construct_id: str, props: GithubDeployIdentityProps) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        if props.existing_provider_arn is not None:
            self.provider: iam.IOidcProvider = iam.OidcProviderNative.from_oidc_provider_arn(
                self, "Provider", props.existing_provider_arn
            )
        else:
            # IAM trusts GitHub's issuer through its own root CAs; CloudFormation needs no thumbprint for it.
            self.provider = iam.OidcProviderNative(
                self, "Provider", url=f"https://{GITHUB_OIDC_HOST}", client_ids=[GITHUB_OIDC_AUDIENCE]
            )
        self.role = iam.Role(
            self,
            "Role",
            role_name=props.role_name,
            assumed_by=iam.WebIdentityPrincipal(
                self.provider.oidc_provider_arn,
                conditions={
                    "StringEquals": {f"{GITHUB_OIDC_HOST}:aud": GITHUB_OIDC_AUDIENCE},
                    "StringLike": {f"{GITHUB_OIDC_HOST}:sub": list(props.subjects)},
                },
            ),
            max_session_duration=Duration.hours(props.max_session_duration_hours),
            description=f"kiln CI for {props.repository}: deploy, inspect and delete kiln CI environments",
        )
        for statement in self._statements():
            self.role.add_to_policy(statement)
        acknowledge_wildcards(self.role, nag_rules.CI_IDENTITY_GRANTS, qualifier=props.cdk_qualifier)

    @property
    def role_arn(self) -> str:
        return self.role.role_arn

    def _statements(self) -> list[iam.PolicyStatement]:
        """Every permission of the role, each on the narrowest resources IAM lets it name."""
        stack = Stack.of(self)
        partition, account = stack.partition, stack.account
        clusters = self.props.cluster_names
        arn = f"arn:{partition}"
        environments = [f"{cluster}-*" for cluster in clusters]

        def each(arn_of: Callable[[str], str]) -> list[str]:
            # Tokens render as ${Token[...]}: build each ARN by call, never by str.format.
            return [arn_of(env) for env in environments]

        qualifier = self.props.cdk_qualifier
        statements = [
            # `cdk deploy`: the CLI works through the bootstrap roles; the region in their names is the environment's.
            iam.PolicyStatement(
                actions=["sts:AssumeRole"],
                resources=[
                    f"{arn}:iam::{account}:role/cdk-{qualifier}-{kind}-{account}-*" for kind in CDK_BOOTSTRAP_ROLES
                ],
            ),
            # These take no resource scope.
            iam.PolicyStatement(actions=list(LIST_STACKS), resources=["*"]),
            iam.PolicyStatement(actions=list(COMMAND_RESULTS), resources=["*"]),
            # `kiln preflight` (kiln ci up runs it first) and finding an environment's nodes (DescribeInstances).
            iam.PolicyStatement(actions=list(UNSCOPED_READS), resources=["*"]),
            iam.PolicyStatement(
                actions=list(PARAMETER_READS),
                resources=[f"{arn}:ssm:*::{GLOBAL_INFRASTRUCTURE_PARAMETERS}"],
            ),
            iam.PolicyStatement(
                actions=list(STACK_READS), resources=each(lambda env: f"{arn}:cloudformation:*:{account}:stack/{env}/*")
            ),
            iam.PolicyStatement(
                actions=list(BUCKET_READS),
                resources=[
                    f"{arn}:s3:::{env}-{kind}-{account}" for env in environments for kind in ENVIRONMENT_BUCKETS
                ],
            ),
            iam.PolicyStatement(
                actions=list(OBJECT_DELETES),
                resources=[
                    f"{arn}:s3:::{env}-{kind}-{account}/*" for env in environments for kind in ENVIRONMENT_BUCKETS
                ],
            ),
            iam.PolicyStatement(
                actions=list(SCHEDULE_ACTIONS),
                resources=each(
                    lambda env: f"{arn}:scheduler:*:{account}:schedule/{SCHEDULE_GROUP}/{schedule_name(env)}"
                ),
            ),
            # UpdateSchedule hands the schedule its own invoke role again, to EventBridge Scheduler only.
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=each(lambda env: f"{arn}:iam::{account}:role/{invoke_role_name(env)}"),
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            ),
            # Run Command: AWS's shell document, on instances of the role's environments only (their tag).
            iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[f"{arn}:ssm:*::document/{RUN_SHELL_DOCUMENT}"]),
            iam.PolicyStatement(
                actions=["ssm:SendCommand"],
                resources=[f"{arn}:ec2:*:{account}:instance/*"],
                conditions={"StringLike": {f"aws:ResourceTag/{ENVIRONMENT_TAG}": environments}},
            ),
            # HyperPod nodes are session targets named by their cluster's ARN, which holds an id, not the name. IAM
            # checks a session's target and document each on its own, so the two documents share one statement.
            iam.PolicyStatement(
                actions=["ssm:StartSession"],
                resources=[
                    f"{arn}:sagemaker:*:{account}:cluster/*",
                    f"{arn}:ssm:*::document/{SESSION_DOCUMENT}",
                    f"{arn}:ssm:*::document/{PORT_FORWARD_DOCUMENT}",
                ],
            ),
            # A private EKS endpoint: port forwarding through a system node of the role's environments (its tag).
            iam.PolicyStatement(
                actions=["ssm:StartSession"],
                resources=[f"{arn}:ec2:*:{account}:instance/*"],
                conditions={"StringLike": {SESSION_TARGET_TAG: environments}},
            ),
            # Only sessions this role started: Session Manager tags each session with its starter's user id
            # (aws:ssmmessages:session-id). A session's id starts with the role session name, not with an assumed
            # role's aws:userid (AROA...:name), so a session/${aws:userid}-* resource would match none of them.
            # https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html
            # (Example 4, method 2: tags supplied by AWS, on Resource "*" as there).
            iam.PolicyStatement(
                actions=["ssm:TerminateSession"],
                resources=["*"],
                conditions={"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": ["${aws:userid}"]}},
            ),
            iam.PolicyStatement(actions=list(PCS_READS), resources=[f"{arn}:pcs:*:{account}:cluster/*"]),
            iam.PolicyStatement(actions=list(HYPERPOD_READS), resources=[f"{arn}:sagemaker:*:{account}:cluster/*"]),
            iam.PolicyStatement(
                actions=list(EKS_CLUSTER_READS), resources=each(lambda env: f"{arn}:eks:*:{account}:cluster/{env}")
            ),
            iam.PolicyStatement(
                actions=["eks:DescribeNodegroup"],
                resources=each(lambda env: f"{arn}:eks:*:{account}:nodegroup/{env}/*/*"),
            ),
        ]
        # DeleteStack: a stack of the cluster's environments, and only while it is tagged as one of them.
        statements.extend(
            iam.PolicyStatement(
                actions=["cloudformation:DeleteStack"],
                resources=[f"{arn}:cloudformation:*:{account}:stack/{cluster}-*/*"],
                conditions={"StringLike": {f"aws:ResourceTag/{ENVIRONMENT_TAG}": f"{cluster}-*"}},
            )
            for cluster in clusters
        )
        return statements
