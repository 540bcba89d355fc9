"""`kiln ci identity`: synthesize the GitHub Actions deploy role for `kiln ci` into a cloud assembly to deploy once."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.cli.errors import one_line_failures
from kiln.contracts.errors import Failure, InputError

if TYPE_CHECKING:  # CDK loads only when the command runs: `kiln` starts without it.
    from kiln.constructs.ci_identity import GithubDeployIdentityProps

WHAT = "kiln ci identity"
LINT_REGION = "us-east-1"
PARTITIONS = ("aws", "aws-cn", "aws-us-gov")

DESCRIPTION = (
    "Write a cloud assembly holding one IAM role that GitHub Actions assumes through OIDC to run `kiln ci` for the\n"
    "named clusters (and, unless --existing-provider is given, the account's OIDC provider for GitHub), lint it with\n"
    "cfn-lint and cdk-nag, and print the command that deploys it. Deploy it once per repository and account, then\n"
    "give the DeployRoleArn output to aws-actions/configure-aws-credentials as role-to-assume.\n\n"
    "The role trusts only jobs that use the GitHub deployment environments named by --environment (default:\n"
    "kiln-ci), whose protection rules then decide which runs get the role. Trusting branches (--branch) or pull\n"
    "requests (--pull-requests) skips those rules and needs --allow-branch-trust. It deploys through the account's\n"
    "CDK bootstrap roles; otherwise it may only read and delete the stacks, buckets and reaper schedules of\n"
    "<cluster>-<run> environments and run commands on their nodes (HyperPod sessions only on clusters tagged as\n"
    "one of those environments).\n\n"
    "A default `cdk bootstrap` gives CloudFormation AdministratorAccess, so the role could deploy anything. The\n"
    "assembly also holds execution-policies/*.json: customer managed policies covering kiln's stacks only; the\n"
    "command prints how to create them and re-bootstrap with --cloudformation-execution-policies. They let\n"
    "CloudFormation create and change roles only with kiln's permissions boundary (kiln-permissions-boundary, which\n"
    "the stack creates unless --existing-boundary names one), which no role inside it can shed or exceed."
)
BRANCH_TRUST = (
    "--branch and --pull-requests trust runs that pass no GitHub environment's protection rules (anyone who can push "
    "such a branch or open a pull request gets the role); add --allow-branch-trust to mean it, or use --environment"
)


def props_from_args(args: argparse.Namespace) -> GithubDeployIdentityProps:
    """Return the identity's props from the parsed ARGS.

    No --environment trusts the kiln-ci environment, unless --allow-branch-trust names branches or pull requests
    alone. InputError (one line) for --branch or --pull-requests without --allow-branch-trust.
    """
    from kiln.host.node_runtime import require_node

    require_node()  # the constructs load the CDK
    from kiln.constructs.ci_identity import DEFAULT_ENVIRONMENT, GithubDeployIdentityProps
    from kiln.contracts.cdk_bootstrap import DEFAULT_CDK_QUALIFIER

    branch_runs = bool(args.branches or args.pull_requests)
    if branch_runs and not args.allow_branch_trust:
        raise InputError(BRANCH_TRUST)
    default = () if branch_runs else (DEFAULT_ENVIRONMENT,)
    environments = tuple(args.environments) if args.environments else default
    return GithubDeployIdentityProps(
        repository=args.repository,
        cluster_names=tuple(args.clusters),
        environments=environments,
        branch_trust=bool(args.allow_branch_trust),
        branches=tuple(args.branches or ()),
        pull_requests=args.pull_requests,
        existing_provider_arn=args.existing_provider,
        cdk_qualifier=args.cdk_qualifier or DEFAULT_CDK_QUALIFIER,
        permissions_boundary=args.existing_boundary,
    )


def _identity(args: argparse.Namespace) -> int:
    from kiln.host.node_runtime import require_node
    from kiln.host.safe_output import check_replaceable, replaced_directory

    out = Path(os.path.abspath(os.path.expanduser(args.out)))
    # Checked before CDK loads: a refusal costs nothing.
    check_replaceable(out, f"{WHAT} --out")
    require_node()
    props = props_from_args(args)

    from kiln.contracts.execution_policy import bootstrap_command
    from kiln.stacks.ci_identity import (
        EXECUTION_POLICY_DIR,
        identity_execution_policies,
        identity_stack_name,
        synthesize_identity,
        write_execution_policies,
    )
    from kiln.stacks.synth import lint_template, nag_report

    policies = identity_execution_policies(props, partition=args.partition)
    try:
        with replaced_directory(out, what=f"{WHAT} --out") as staging:
            synthesize_identity(props, staging)
            write_execution_policies(policies, staging)
    except RuntimeError as exc:
        # An unacknowledged cdk-nag finding stops synthesis (jsii's own exception); nothing was written.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Failure(f"synthesis failed, nothing written: {first}") from None

    name = identity_stack_name(props.repository)
    errors, warnings = lint_template(out / f"{name}.template.json", LINT_REGION)
    nag = nag_report(out)
    for line in errors + warnings + nag.violations:
        print(f"{WHAT}: {line}", file=sys.stderr)
    policy_dir = out / EXECUTION_POLICY_DIR
    print(
        f"{WHAT}: wrote {out}: stack {name} trusting {', '.join(props.subjects)}; "
        f"cfn-lint {len(errors)} errors, {len(warnings)} warnings; "
        f"cdk-nag {len(nag.violations)} open, {len(nag.acknowledged)} acknowledged with reasons; "
        f"{len(policies)} CloudFormation execution policies in {policy_dir}"
    )
    print(f"npx cdk deploy --app {shlex.quote(str(out))} --require-approval never")
    # Then, with administrator credentials: the policies, and a bootstrap that hands CloudFormation them instead of
    # AdministratorAccess (the role above still assumes the same bootstrap roles).
    for policy in policies:
        document = shlex.quote(f"file://{policy_dir / f'{policy.name}.json'}")
        print(f"aws iam create-policy --policy-name {policy.name} --policy-document {document}")
    print(bootstrap_command(policies, qualifier=props.cdk_qualifier, partition=args.partition))
    return 1 if errors or warnings or nag.violations else 0


def register_identity(commands: argparse._SubParsersAction) -> None:
    """Add the `identity` action to COMMANDS (the subparsers of `kiln ci`)."""
    identity = commands.add_parser(
        "identity",
        help="synthesize the IAM role GitHub Actions assumes (OIDC) to run kiln ci; prints the deploy command",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    identity.add_argument("--repository", required=True, metavar="OWNER/NAME", help="the GitHub repository")
    identity.add_argument(
        "--cluster",
        dest="clusters",
        action="append",
        required=True,
        metavar="NAME",
        help="a cluster (spec) name whose CI environments the role may manage (repeatable)",
    )
    identity.add_argument(
        "--environment",
        dest="environments",
        action="append",
        metavar="ENV",
        help="trust jobs that use this GitHub deployment environment (repeatable; default: kiln-ci)",
    )
    identity.add_argument(
        "--allow-branch-trust",
        action="store_true",
        help="allow --branch and --pull-requests: runs they name pass no environment's protection rules",
    )
    identity.add_argument(
        "--branch",
        dest="branches",
        action="append",
        metavar="PATTERN",
        help="trust runs on branches matching PATTERN (* and ? are wildcards; repeatable; needs --allow-branch-trust)",
    )
    identity.add_argument(
        "--pull-requests", action="store_true", help="trust pull request runs (needs --allow-branch-trust)"
    )
    identity.add_argument(
        "--existing-provider",
        metavar="ARN",
        help="reuse the account's OIDC provider for token.actions.githubusercontent.com (default: create it)",
    )
    identity.add_argument(
        "--existing-boundary",
        metavar="POLICY",
        help="the permissions boundary every CI role carries, a managed policy (name or ARN) that already exists "
        "(default: create kiln-permissions-boundary; one per account, so pass it for a second repository)",
    )
    identity.add_argument(
        "--cdk-qualifier", metavar="Q", help="the qualifier of the account's CDK bootstrap (default: hnb659fds)"
    )
    identity.add_argument(
        "--partition",
        choices=PARTITIONS,
        default="aws",
        help="the AWS partition the execution policies' ARNs name (default: aws)",
    )
    identity.add_argument("--out", required=True, metavar="DIR", help="the directory to write the cloud assembly to")
    identity.set_defaults(func=one_line_failures(WHAT, _identity))
