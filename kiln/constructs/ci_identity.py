"""GithubDeployIdentity: the IAM role a GitHub Actions workflow assumes (OIDC) to run `kiln ci` environments."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from kiln.catalog.names import CLUSTER_NAME, CLUSTER_NAME_RULE
from kiln.constructs._checks import ARN_PARTITION, refuse, require, unresolved
from kiln.constructs.acknowledgements import (
    ASSUME_ROLE,
    BOUNDARY_GRANTS,
    BUCKET_FAMILIES,
    CANCEL_COMMAND,
    CI_IDENTITY_GRANTS,
    COMMAND_RESULTS,
    EKS_CLUSTER_READS,
    HYPERPOD_READS,
    LIST_STACKS,
    NODEGROUP_READS,
    OBJECT_DELETES,
    PASS_ROLE,
    PCS_READS,
    RESCHEDULE_ACTIONS,
    SEND_COMMAND,
    STACK_DELETE,
    START_SESSION,
    TEARDOWN_BUCKET_READS,
    TEARDOWN_STACK_READS,
    TERMINATE_SESSION,
)
from kiln.constructs.review import acknowledge_wildcards
from kiln.contracts.cdk_bootstrap import (
    CDK_BOOTSTRAP_ROLES,
    CFN_EXECUTION_ROLE,
    DEFAULT_CDK_QUALIFIER,
    bootstrap_role_name,
)
from kiln.contracts.environment import (
    BUCKET_PURPOSES,
    MAX_WHOLE_CLUSTER_NAME,
    SCHEDULE_GROUP,
    environment_bucket_name,
    invoke_role_name,
    schedule_name,
)
from kiln.contracts.permissions import (
    BOOTSTRAP_READS,
    GLOBAL_INFRASTRUCTURE_PARAMETERS,
    LEFTOVER_READS,
    PARAMETER_READS,
    UNSCOPED_READS,
)
from kiln.contracts.permissions_boundary import BOUNDARY_NAME, boundary_arn, boundary_document, boundary_problem
from kiln.contracts.ssm_documents import NON_INTERACTIVE_COMMAND_DOCUMENT, PORT_FORWARD_DOCUMENT, RUN_SHELL_DOCUMENT
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_AUDIENCE = "sts.amazonaws.com"
# The GitHub deployment environment the role trusts unless told otherwise. A job that names an environment gets the
# sub claim repo:OWNER/NAME:environment:ENV, whatever branch it runs on, and the environment's protection rules
# (required reviewers, deployment branches) decide which runs get that far
# (https://docs.github.com/en/actions/reference/security/oidc, "Filtering for a specific environment").
DEFAULT_ENVIRONMENT = "kiln-ci"
# Session Manager's own condition key for a target instance's tags, as AWS's sample policies spell it:
# https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html
SESSION_TARGET_TAG = f"ssm:resourceTag/{TAG_ENVIRONMENT}"
# A HyperPod node's session target is its cluster (arn:...:sagemaker:...:cluster/<id>), a SageMaker resource, whose tags
# IAM reads as aws:ResourceTag/<key>: SageMaker's cluster resource lists that key
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsagemaker.html) and so does
# ssm:StartSession (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html).
# Neither page says outright that Session Manager resolves a HyperPod cluster's tags for it: should it not, sessions are
# refused (the safe side) rather than reaching every HyperPod cluster of the account.
HYPERPOD_SESSION_TAG = f"aws:ResourceTag/{TAG_ENVIRONMENT}"
# Tags with the aws: prefix are AWS's: no user can set, change or delete them
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-resource-tags.html), unlike
# kiln:environment, which anyone allowed ec2:CreateTags could put on any instance. So each instance grant also needs
# one that ties the instance to what launched it:
# - CloudFormation tags the instances it creates with aws:cloudformation:stack-name (same page: stack-level tags
#   reach EC2 instances). ParallelCluster's head node is an instance of the cluster's own stack, which ParallelCluster
#   names after the cluster (pcluster.models.cluster.Cluster.stack_name), here the environment.
STACK_NAME_TAG = "aws:cloudformation:stack-name"
# - PCS tags the instances it launches with their node group's id (kiln.aws.remote.nodes finds login nodes by it); the
#   id is PCS's, so this proves "launched by PCS", not "of this environment".
PCS_NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"
# - Auto Scaling tags the instances a group launches with aws:autoscaling:groupName
#   (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-tagging.html); EKS managed node groups are
#   Auto Scaling groups. Again "launched by a group", not "of this environment".
AUTOSCALING_GROUP_TAG = "aws:autoscaling:groupName"
# An environment is named <cluster>-<run slug> in at most 31 characters, with a run slug of up to 12: a longer
# cluster name would be cut short in the environment's name, and the role's <cluster>-* scopes would miss it.
MAX_CI_CLUSTER_NAME = MAX_WHOLE_CLUSTER_NAME
# Each cluster name adds about 1,100 characters to the role's policy; IAM holds 10,240 inline per role, beyond
# which CDK would split the policy into managed policies that kiln's wildcard review does not see. Five: with
# preflight's network quota reads (kiln.contracts.permissions), six names of 18 characters no longer fit.
MAX_CI_CLUSTERS = 5

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
BRANCH_TRUST_RULE = (
    "branch_trust=True to trust branch or pull request runs: they skip every GitHub environment's protection rules "
    "(--allow-branch-trust)"
)
CDK_QUALIFIER = re.compile(r"[A-Za-z0-9_-]{1,10}")
CDK_QUALIFIER_RULE = "1-10 letters, digits, '_' or '-' (the qualifier `cdk bootstrap` was given)"
ROLE_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,64}")
ROLE_NAME_RULE = "1-64 letters, digits and + = , . @ _ -"
PROVIDER_ARN = re.compile(rf"arn:{ARN_PARTITION}:iam::[0-9]{{12}}:oidc-provider/" + re.escape(GITHUB_OIDC_HOST))
PROVIDER_ARN_RULE = f"arn:PARTITION:iam::ACCOUNT:oidc-provider/{GITHUB_OIDC_HOST}"


def _names(owner: object, name: str, value: object) -> tuple[str, ...]:
    """Return OWNER's field NAME, VALUE, as a tuple of strings; a bare string (a common slip for a one-item list) is
    refused."""
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        refuse(owner, name, value, "a list of strings")
    return tuple(dict.fromkeys(value))


@dataclass(frozen=True, kw_only=True)
class GithubDeployIdentityProps:
    """Props for GithubDeployIdentity.

    repository: the GitHub repository whose workflows may assume the role, as OWNER/NAME. IAM matches the
        token's sub claim case-sensitively, so spell it as GitHub does; the repository must use GitHub's default
        sub claim (no customized OIDC subject template).
    cluster_names: the spec names whose CI environments (<cluster>-<run>) the role may manage; required, 1 to 5
        (IAM limits the role's policy size), each a cluster name of at most 18 characters (so environment names
        are never cut short). A name's scopes are <name>-*, which would also cover a cluster whose name starts
        with <name>-: a list holding both is refused.
    environments: GitHub deployment environments whose jobs may assume the role (sub
        repo:OWNER/NAME:environment:ENV); default ("kiln-ci",). Their protection rules (reviewers, deployment
        branches) gate it.
    branch_trust: allow branches and pull_requests below; default False. Such runs pass no environment's protection
        rules: anyone who can push a matching branch (or open a pull request) gets the role.
    branches: branch name patterns (IAM StringLike: * and ? are wildcards) whose workflow runs may assume the role,
        without refs/heads/; default none: no branch run may assume it; needs branch_trust. A job that names a
        GitHub environment is not a branch run.
    pull_requests: also trust workflow runs for pull requests (sub repo:OWNER/NAME:pull_request); default False; needs
        branch_trust. Any pull request that can run workflows with id-token: write could then assume the role.
    existing_provider_arn: the account's IAM OIDC provider for token.actions.githubusercontent.com, to reuse;
        default None: create one. An account holds at most one provider per URL, so pass the existing one's ARN
        when the account already has it (another role or tool made it), or deploying fails.
    cdk_qualifier: the qualifier of the account's CDK bootstrap (its roles are cdk-<qualifier>-...); default
        "hnb659fds", CDK's own default.
    max_session_duration_hours: the longest session the role grants, 1 to 12; default 1. Sessions chained into
        the CDK bootstrap roles last at most 1 hour whatever this says.
    role_name: the role's name; default None: CloudFormation generates one (see the DeployRoleArn output).
    permissions_boundary: the permissions boundary every role of the CI environments (and this role) carries, a
        customer managed policy's name or ARN that already exists; default None: the stack creates kiln's own,
        kiln-permissions-boundary (kiln.contracts.permissions_boundary), once per account.
    """

    repository: str
    cluster_names: Sequence[str]
    environments: Sequence[str] = (DEFAULT_ENVIRONMENT,)
    branch_trust: bool = False
    branches: Sequence[str] = ()
    pull_requests: bool = False
    existing_provider_arn: str | None = None
    cdk_qualifier: str = DEFAULT_CDK_QUALIFIER
    max_session_duration_hours: int = 1
    role_name: str | None = None
    permissions_boundary: str | None = None

    def __post_init__(self) -> None:
        require(
            self,
            isinstance(self.repository, str)
            and REPOSITORY.fullmatch(self.repository) is not None
            and self.repository.split("/")[1] not in (".", ".."),
            "repository",
            self.repository,
            REPOSITORY_RULE,
        )
        clusters = _names(self, "cluster_names", self.cluster_names)
        require(
            self,
            1 <= len(clusters) <= MAX_CI_CLUSTERS,
            "cluster_names",
            list(clusters),
            f"1 to {MAX_CI_CLUSTERS} cluster names (one role per handful of clusters; IAM limits a role's policy size)",
        )
        for name in clusters:
            require(self, CLUSTER_NAME.fullmatch(name) is not None, "cluster_names", name, CLUSTER_NAME_RULE)
            require(
                self,
                len(name) <= MAX_CI_CLUSTER_NAME,
                "cluster_names",
                name,
                f"at most {MAX_CI_CLUSTER_NAME} characters, so that <name>-<run> environment names keep the whole name",
            )
        # Every grant is on <name>-*: a name that starts with another's name and '-' would share its grants.
        overlaps = [(a, b) for a in clusters for b in clusters if b.startswith(f"{a}-")]
        require(
            self,
            not overlaps,
            "cluster_names",
            list(clusters),
            "names none of which starts with another's name and '-' ("
            + "; ".join(f"{b} starts with {a}-, so {a}-* grants would reach {b}'s environments" for a, b in overlaps)
            + ")",
        )
        branches = _names(self, "branches", self.branches)
        for branch in branches:
            require(self, BRANCH.fullmatch(branch) is not None, "branches", branch, BRANCH_RULE)
        environments = _names(self, "environments", self.environments)
        for environment in environments:
            require(self, ENVIRONMENT.fullmatch(environment) is not None, "environments", environment, ENVIRONMENT_RULE)
        require(self, isinstance(self.pull_requests, bool), "pull_requests", self.pull_requests, "True or False")
        require(self, isinstance(self.branch_trust, bool), "branch_trust", self.branch_trust, "True or False")
        require(
            self,
            self.branch_trust or not (branches or self.pull_requests),
            "branches/pull_requests",
            (list(branches), self.pull_requests),
            BRANCH_TRUST_RULE,
        )
        require(
            self,
            bool(branches or environments or self.pull_requests),
            "branches/pull_requests/environments",
            (list(branches), self.pull_requests, list(environments)),
            "at least one environment, or with branch_trust a branch or pull_requests=True",
        )
        arn = self.existing_provider_arn
        if arn is not None and not unresolved(arn):
            require(
                self,
                isinstance(arn, str) and PROVIDER_ARN.fullmatch(arn) is not None,
                "existing_provider_arn",
                arn,
                PROVIDER_ARN_RULE,
            )
        require(
            self,
            isinstance(self.cdk_qualifier, str) and CDK_QUALIFIER.fullmatch(self.cdk_qualifier) is not None,
            "cdk_qualifier",
            self.cdk_qualifier,
            CDK_QUALIFIER_RULE,
        )
        hours = self.max_session_duration_hours
        require(
            self,
            isinstance(hours, int) and not isinstance(hours, bool) and 1 <= hours <= 12,
            "max_session_duration_hours",
            hours,
            "a whole number of hours from 1 to 12",
        )
        if self.role_name is not None and not unresolved(self.role_name):
            require(
                self,
                isinstance(self.role_name, str) and ROLE_NAME.fullmatch(self.role_name) is not None,
                "role_name",
                self.role_name,
                ROLE_NAME_RULE,
            )
        if self.permissions_boundary is not None:
            why = boundary_problem(self.permissions_boundary)
            require(self, why is None, "permissions_boundary", self.permissions_boundary, str(why))
        # Frozen: store the checked, de-duplicated tuples.
        object.__setattr__(self, "cluster_names", clusters)
        object.__setattr__(self, "branches", branches)
        object.__setattr__(self, "environments", environments)

    @property
    def subjects(self) -> tuple[str, ...]:
        """Return the token sub patterns the role trusts (IAM StringLike), in the order given."""
        repo = f"repo:{self.repository}"
        return (
            *(f"{repo}:environment:{environment}" for environment in self.environments),
            *(f"{repo}:ref:refs/heads/{branch}" for branch in self.branches),
            *((f"{repo}:pull_request",) if self.pull_requests else ()),
        )


class GithubDeployIdentity(Construct):
    """An IAM role GitHub Actions assumes by OIDC to deploy, inspect and delete kiln CI environments, nothing more.

    It trusts only the repository's listed GitHub environments (by default kiln-ci) and, when branch_trust says so,
    branches and pull requests (token audience sts.amazonaws.com). It deploys by assuming CDK's bootstrap roles;
    otherwise it only reads and deletes the <cluster>-<run> stacks, buckets and reaper schedules `kiln ci` names, and
    runs commands on their nodes (Run Command on instances tagged with one of those environments that ParallelCluster's
    stack or PCS launched; Session Manager on the nodes of HyperPod clusters tagged with one of those environments)
    or reaches their private EKS API endpoint (Session Manager port forwarding through an
    instance tagged with one of those environments that an Auto Scaling group launched).
    """

    def __init__(self, scope: Construct, construct_id: str, props: GithubDeployIdentityProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
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
        self.boundary = self._boundary()
        iam.PermissionsBoundary.of(self.role).apply(self.boundary)
        for statement in self._statements():
            self.role.add_to_policy(statement)
        acknowledge_wildcards(self.role, CI_IDENTITY_GRANTS, qualifier=props.cdk_qualifier)

    @property
    def role_arn(self) -> str:
        return self.role.role_arn

    def _boundary(self) -> iam.IManagedPolicy:
        """Return the permissions boundary the props name, or create kiln's (named BOUNDARY_NAME, in this account)."""
        given = self._props.permissions_boundary
        if given is not None:
            if given.startswith("arn:"):
                return iam.ManagedPolicy.from_managed_policy_arn(self, "PermissionsBoundary", given)
            return iam.ManagedPolicy.from_managed_policy_name(self, "PermissionsBoundary", given)
        arn = boundary_arn(BOUNDARY_NAME, partition=Aws.PARTITION, account=Aws.ACCOUNT_ID)
        policy = iam.ManagedPolicy(
            self,
            "PermissionsBoundary",
            managed_policy_name=BOUNDARY_NAME,
            description="kiln's permissions boundary: every role of kiln's stacks carries it; no role inside it can "
            "make or change a role without it",
            document=iam.PolicyDocument.from_json(boundary_document(arn)),
        )
        acknowledge_wildcards(policy, BOUNDARY_GRANTS)
        return policy

    def _statements(self) -> list[iam.PolicyStatement]:
        """Every permission of the role, each on the narrowest resources IAM lets it name."""
        stack = Stack.of(self)
        partition, account = stack.partition, stack.account
        clusters = self._props.cluster_names
        arn = f"arn:{partition}"
        environments = [f"{cluster}-*" for cluster in clusters]
        instances = f"{arn}:ec2:*:{account}:instance/*"
        buckets = [
            environment_bucket_name(env, purpose, account) for env in environments for purpose in BUCKET_PURPOSES
        ]
        hyperpod_clusters = f"{arn}:sagemaker:*:{account}:cluster/*"

        def each(arn_of: Callable[[str], str]) -> list[str]:
            # Tokens render as ${Token[...]}: build each ARN by call, never by str.format.
            return [arn_of(env) for env in environments]

        def stacks(env: str) -> str:
            return f"{arn}:cloudformation:*:{account}:stack/{env}/*"

        def document(name: str) -> str:
            return f"{arn}:ssm:*::document/{name}"

        qualifier = self._props.cdk_qualifier
        statements = [
            # `cdk deploy`: the CLI works through the bootstrap roles; the region in their names is the environment's.
            iam.PolicyStatement(
                actions=list(ASSUME_ROLE),
                resources=[
                    f"{arn}:iam::{account}:role/{bootstrap_role_name(kind, account, '*', qualifier)}"
                    for kind in CDK_BOOTSTRAP_ROLES
                ],
            ),
            # These take no resource scope.
            iam.PolicyStatement(actions=list(LIST_STACKS), resources=["*"]),
            iam.PolicyStatement(actions=list(COMMAND_RESULTS), resources=["*"]),
            # No resource type exists for it (CANCEL_COMMAND): "*" is the narrowest IAM allows.
            iam.PolicyStatement(actions=list(CANCEL_COMMAND), resources=["*"]),
            # `kiln preflight` (kiln ci up runs it first) and finding an environment's nodes (DescribeInstances).
            iam.PolicyStatement(actions=list(UNSCOPED_READS), resources=["*"]),
            # Preflight's leftovers check: what an earlier environment of this name kept (advisory).
            iam.PolicyStatement(actions=list(LEFTOVER_READS), resources=["*"]),
            iam.PolicyStatement(
                actions=list(PARAMETER_READS),
                resources=[f"{arn}:ssm:*::{GLOBAL_INFRASTRUCTURE_PARAMETERS}"],
            ),
            # `kiln preflight` warns when the bootstrap still hands CloudFormation AdministratorAccess.
            iam.PolicyStatement(
                actions=list(BOOTSTRAP_READS),
                resources=[
                    f"{arn}:iam::{account}:role/{bootstrap_role_name(CFN_EXECUTION_ROLE, account, '*', qualifier)}"
                ],
            ),
            iam.PolicyStatement(actions=list(TEARDOWN_STACK_READS), resources=each(stacks)),
            # Reading an environment's buckets: one pattern per family (<env>-data*, <env>-lifecycle*) keeps six
            # clusters in one inline policy.
            iam.PolicyStatement(
                actions=list(TEARDOWN_BUCKET_READS),
                resources=[f"{arn}:s3:::{env}-{kind}*-{account}" for env in environments for kind in BUCKET_FAMILIES],
            ),
            # Deleting objects: only in the environment's own four buckets, by the names kiln gives them
            # (environment_bucket_name), each purpose exactly, not any bucket that merely starts with <env>-data.
            iam.PolicyStatement(actions=list(OBJECT_DELETES), resources=[f"{arn}:s3:::{b}/*" for b in buckets]),
            iam.PolicyStatement(
                actions=list(RESCHEDULE_ACTIONS),
                resources=each(
                    lambda env: f"{arn}:scheduler:*:{account}:schedule/{SCHEDULE_GROUP}/{schedule_name(env)}"
                ),
            ),
            # UpdateSchedule hands the schedule its own invoke role again, to EventBridge Scheduler only.
            iam.PolicyStatement(
                actions=list(PASS_ROLE),
                resources=each(lambda env: f"{arn}:iam::{account}:role/{invoke_role_name(env)}"),
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            ),
            # Run Command: AWS's shell document, on instances of the role's environments only: their kiln:environment
            # tag, and a tag of AWS's that no tagger can forge (STACK_NAME_TAG, PCS_NODE_GROUP_TAG).
            iam.PolicyStatement(actions=list(SEND_COMMAND), resources=[document(RUN_SHELL_DOCUMENT)]),
            # A ParallelCluster head node: an instance of the stack named after the environment (a tag of AWS's), and
            # tagged as one of the environments: a long-lived cluster named like <cluster>-* (llm-prod) carries no
            # kiln:environment, whatever its stack is called.
            iam.PolicyStatement(
                actions=list(SEND_COMMAND),
                resources=[instances],
                conditions={
                    "StringLike": {
                        f"aws:ResourceTag/{STACK_NAME_TAG}": environments,
                        f"aws:ResourceTag/{TAG_ENVIRONMENT}": environments,
                    }
                },
            ),
            # A PCS login node: launched by PCS (its node group's id, which only PCS sets).
            iam.PolicyStatement(
                actions=list(SEND_COMMAND),
                resources=[instances],
                conditions={
                    "StringLike": {f"aws:ResourceTag/{TAG_ENVIRONMENT}": environments},
                    "Null": {f"aws:ResourceTag/{PCS_NODE_GROUP_TAG}": "false"},
                },
            ),
            # IAM checks a session's target and its document each on its own: AWS's two documents, on their own.
            iam.PolicyStatement(
                actions=list(START_SESSION),
                resources=[document(NON_INTERACTIVE_COMMAND_DOCUMENT), document(PORT_FORWARD_DOCUMENT)],
            ),
            # HyperPod nodes are session targets named by their cluster's ARN, which holds an id, not the name: only
            # clusters tagged as one of the role's environments (HYPERPOD_SESSION_TAG).
            iam.PolicyStatement(
                actions=list(START_SESSION),
                resources=[hyperpod_clusters],
                conditions={"StringLike": {HYPERPOD_SESSION_TAG: environments}},
            ),
            # A private EKS endpoint: port forwarding through a system node of the role's environments (its tag), which
            # an Auto Scaling group (the managed node group's) launched.
            iam.PolicyStatement(
                actions=list(START_SESSION),
                resources=[instances],
                conditions={
                    "StringLike": {SESSION_TARGET_TAG: environments},
                    "Null": {f"ssm:resourceTag/{AUTOSCALING_GROUP_TAG}": "false"},
                },
            ),
            # Only sessions this role started: Session Manager tags each session with its starter's user id
            # (aws:ssmmessages:session-id). A session's id starts with the role session name, not with an assumed
            # role's aws:userid (AROA...:name), so a session/${aws:userid}-* resource would match none of them.
            # https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html
            # (Example 4, method 2: tags supplied by AWS, on Resource "*" as there).
            iam.PolicyStatement(
                actions=list(TERMINATE_SESSION),
                resources=["*"],
                conditions={"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": ["${aws:userid}"]}},
            ),
            iam.PolicyStatement(actions=list(PCS_READS), resources=[f"{arn}:pcs:*:{account}:cluster/*"]),
            iam.PolicyStatement(actions=list(HYPERPOD_READS), resources=[hyperpod_clusters]),
            iam.PolicyStatement(
                actions=list(EKS_CLUSTER_READS), resources=each(lambda env: f"{arn}:eks:*:{account}:cluster/{env}")
            ),
            iam.PolicyStatement(
                actions=list(NODEGROUP_READS),
                resources=each(lambda env: f"{arn}:eks:*:{account}:nodegroup/{env}/*/*"),
            ),
        ]
        # DeleteStack: a stack of the role's environments, and only while it is tagged as one of them (a long-lived
        # cluster's own <cluster>-compute has no kiln:environment) and as one of the role's clusters: kiln:cluster
        # holds the spec's name exactly, so another role's cluster <cluster>-x is spared.
        statements.append(
            iam.PolicyStatement(
                actions=list(STACK_DELETE),
                resources=each(stacks),
                conditions={
                    "StringLike": {f"aws:ResourceTag/{TAG_ENVIRONMENT}": environments},
                    "StringEquals": {f"aws:ResourceTag/{TAG_CLUSTER}": list(clusters)},
                },
            )
        )
        return statements
