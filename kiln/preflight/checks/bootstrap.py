"""Does the CDK bootstrap hand CloudFormation AdministratorAccess? Then whoever may deploy may create anything.

`cdk deploy` works through the bootstrap's deploy role, which passes CloudFormation the bootstrap's execution role,
cdk-<qualifier>-cfn-exec-role-<account>-<region>; a default `cdk bootstrap` attaches AdministratorAccess to it
unless --cloudformation-execution-policies names others (https://docs.aws.amazon.com/cdk/v2/guide/ref-cli-cmd-bootstrap.html).
A warning, never a failure: the deploy works either way.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import ACCESS_DENIED, error_code, one_line
from kiln.contracts.cdk_bootstrap import CFN_EXECUTION_ROLE, DEFAULT_CDK_QUALIFIER, bootstrap_role_name
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "bootstrap"
ADMIN_POLICY = "AdministratorAccess"
ALLOW = "allow iam:ListAttachedRolePolicies on it (kiln ci identity's role has it) to check"
SCOPE = (
    "re-bootstrap with the scoped policies `kiln ci identity` writes (cdk bootstrap aws://ACCOUNT/REGION "
    "--cloudformation-execution-policies <their ARNs>)"
)


def _is_admin(policy: dict) -> bool:
    """AWS's own AdministratorAccess (arn:PARTITION:iam::aws:policy/AdministratorAccess), not a namesake."""
    return policy.get("PolicyArn", "").endswith(f":iam::aws:policy/{ADMIN_POLICY}")


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    role = bootstrap_role_name(CFN_EXECUTION_ROLE, aws.account, aws.region)
    subject = f"CDK bootstrap execution role {role}"
    try:
        pages = aws.iam.get_paginator("list_attached_role_policies").paginate(RoleName=role)
        attached = [policy for page in pages for policy in page["AttachedPolicies"]]
    except ClientError as error:
        code = error_code(error)
        if code == "NoSuchEntity":
            return [
                Finding(
                    check=NAME,
                    status="warn",
                    subject=subject,
                    message=f"not found: {aws.region} is not bootstrapped with CDK's default qualifier "
                    f"{DEFAULT_CDK_QUALIFIER}, so its execution policies are not known",
                    remedy=f"bootstrap it before deploying and {SCOPE}; ignore this when you bootstrapped with "
                    "another qualifier",
                )
            ]
        what = "was denied" if code in ACCESS_DENIED else "failed"
        return [_unread(subject, f"iam:ListAttachedRolePolicies {what} ({code or 'no code'})")]
    except BotoCoreError as error:
        return [_unread(subject, f"iam:ListAttachedRolePolicies: {one_line(str(error))}")]
    if any(_is_admin(policy) for policy in attached):
        return [
            Finding(
                check=NAME,
                status="warn",
                subject=subject,
                message=f"has {ADMIN_POLICY}: whoever may deploy through this bootstrap (the CI role too) can create "
                "or change anything in the account",
                remedy=SCOPE,
            )
        ]
    names = ", ".join(sorted(policy.get("PolicyName", "?") for policy in attached)) or "none"
    return [Finding(check=NAME, status="ok", subject=subject, message=f"no {ADMIN_POLICY} (managed policies: {names})")]


def _unread(subject: str, message: str) -> Finding:
    # Advisory: an unanswered question here must not stop a deploy, as an unchecked finding would.
    return Finding(check=NAME, status="warn", subject=subject, message=f"not checked: {message}", remedy=ALLOW)


CHECK = Check(name=NAME, about="CDK bootstrap execution policies", run=check)
