"""CiIdentityStack: the GitHub Actions deploy role for `kiln ci`, in a stack of its own, one per repository."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from kiln.constructs import acknowledgements
from kiln.constructs.ci_identity import GithubDeployIdentity, GithubDeployIdentityProps
from kiln.constructs.review import review_wildcards
from kiln.contracts.execution_policy import ExecutionPolicyError, NamedPolicy, execution_policies, policy_name_base
from kiln.contracts.iam_wildcards import wildcard_pairs
from kiln.contracts.permissions_boundary import BOUNDARY_NAME
from kiln.contracts.tags import TAG_CI_IDENTITY
from kiln.host.safe_output import check_replaceable
from kiln.stacks.app import new_app
from kiln.stacks.tidy import add_template_aspects

STACK_PREFIX = "kiln-ci-identity-"
# Where `kiln ci identity` writes the CloudFormation execution policies, inside its output directory.
EXECUTION_POLICY_DIR = "execution-policies"
# CloudFormation: a letter, then letters, digits and '-', 128 characters at most.
_MAX_STACK_NAME = 128
_NOT_IN_STACK_NAME = re.compile(r"[^A-Za-z0-9-]+")


def identity_stack_name(repository: str) -> str:
    """Return the stack name for REPOSITORY's identity: kiln-ci-identity-<owner>-<name>, lowercased.

    GitHub names are case-insensitive, so one repository gets one stack however it is spelled. Characters
    CloudFormation refuses (. and _) become '-'; when that or the length limit changed the name, a short digest of
    the repository keeps two repositories from sharing a stack.
    """
    wanted = repository.lower()
    readable = _NOT_IN_STACK_NAME.sub("-", wanted.replace("/", "-")).strip("-")
    name = STACK_PREFIX + readable
    if readable == wanted.replace("/", "-") and len(name) <= _MAX_STACK_NAME:
        return name
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:8]
    return f"{name[: _MAX_STACK_NAME - len(digest) - 1].rstrip('-')}-{digest}"


class CiIdentityStack(cdk.Stack):
    """The OIDC provider (unless reused) and the deploy role of one repository, with its ARN as DeployRoleArn."""

    def __init__(self, scope: Construct, construct_id: str, *, props: GithubDeployIdentityProps, **kwargs: Any) -> None:
        kwargs.setdefault("description", f"kiln CI identity: the GitHub Actions deploy role of {props.repository}")
        super().__init__(scope, construct_id, **kwargs)
        self.identity = GithubDeployIdentity(self, "Identity", props)
        cdk.Tags.of(self).add(TAG_CI_IDENTITY, props.repository)
        add_template_aspects(self)
        cdk.CfnOutput(
            self,
            "DeployRoleArn",
            value=self.identity.role_arn,
            description="role-to-assume for aws-actions/configure-aws-credentials",
        )


def build_identity(
    app: cdk.App, props: GithubDeployIdentityProps, *, env: cdk.Environment | None = None, nag: bool = True
) -> CiIdentityStack:
    """Add PROPS' identity stack to APP (with the cdk-nag AwsSolutions pack unless NAG is False) and return it."""
    name = identity_stack_name(props.repository)
    stack = CiIdentityStack(app, name, props=props, stack_name=name, env=env)
    if nag:
        cdk.Validations.of(app).add_plugins(
            AwsSolutionsChecks(app, verbose=True, write_suppressions_to_cloud_formation=True)
        )
    return stack


def synthesize_identity(props: GithubDeployIdentityProps, outdir: Path) -> Path:
    """Synthesize PROPS' identity stack (env-agnostic, cdk-nag on) into OUTDIR and return the assembly directory.

    OUTDIR must be missing, empty or kiln's own (UnsafeOutput otherwise). An unacknowledged cdk-nag finding
    raises RuntimeError.
    """
    check_replaceable(Path(outdir), "kiln ci identity")
    app = new_app(str(outdir))
    build_identity(app, props)
    app.synth()
    return Path(outdir)


def identity_execution_policies(props: GithubDeployIdentityProps, *, partition: str = "aws") -> list[NamedPolicy]:
    """Return the CloudFormation execution policies for PROPS' clusters, every wildcard pair reviewed.

    Raises ExecutionPolicyError naming a wildcard (action, resource) pair that no
    acknowledgements.CI_EXECUTION_GRANTS entry covers, or when IAM's size limits cannot hold them.
    """
    policies = execution_policies(
        props.cluster_names,
        qualifier=props.cdk_qualifier,
        name_base=policy_name_base(identity_stack_name(props.repository)),
        partition=partition,
        boundary=props.permissions_boundary or BOUNDARY_NAME,
    )
    pairs = [pair for policy in policies for pair in wildcard_pairs(policy.document)]
    review = review_wildcards(pairs, acknowledgements.CI_EXECUTION_GRANTS, {"qualifier": props.cdk_qualifier})
    if review.unreviewed:
        action, resource = review.unreviewed[0]
        raise ExecutionPolicyError(
            f"unreviewed IAM wildcard in the execution policies: {action} on {resource}; add a WildcardGrant with its "
            "reason to acknowledgements.CI_EXECUTION_GRANTS, or narrow the grant"
        )
    return policies


def write_execution_policies(policies: list[NamedPolicy], outdir: Path) -> Path:
    """Write each of POLICIES as <name>.json under OUTDIR/execution-policies (a directory being built) and return it."""
    directory = Path(outdir) / EXECUTION_POLICY_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for policy in policies:
        (directory / f"{policy.name}.json").write_text(json.dumps(policy.document, indent=2) + "\n")
    return directory
