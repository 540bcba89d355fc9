"""What `cdk bootstrap` creates, as kiln's CI role, its execution policies and preflight name it: the qualifier, and
the roles cdk-<qualifier>-<kind>-<account>-<region> of CDK's bootstrap template, which aws-cdk-lib's
DefaultStackSynthesizer assumes (its DEFAULT_QUALIFIER and DEFAULT_*_ROLE_ARN,
https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/DefaultStackSynthesizer.html; tests/contracts holds these names
to the installed library's). --qualifier and --cloudformation-execution-policies:
https://docs.aws.amazon.com/cdk/v2/guide/ref-cli-cmd-bootstrap.html."""

from __future__ import annotations

# The qualifier `cdk bootstrap` uses unless given --qualifier.
DEFAULT_CDK_QUALIFIER = "hnb659fds"
# The CloudFormation execution role: the deploy role passes it to CloudFormation, which creates the stacks as it.
CFN_EXECUTION_ROLE = "cfn-exec-role"
# The roles the CDK CLI assumes to deploy, publish assets and look up context.
CDK_BOOTSTRAP_ROLES = ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")


def bootstrap_role_name(kind: str, account: str, region: str, qualifier: str = DEFAULT_CDK_QUALIFIER) -> str:
    """Return the name CDK's bootstrap template gives its KIND role (CFN_EXECUTION_ROLE or one of
    CDK_BOOTSTRAP_ROLES) in ACCOUNT and REGION; REGION may be a wildcard (*) in a policy."""
    if kind != CFN_EXECUTION_ROLE and kind not in CDK_BOOTSTRAP_ROLES:
        raise ValueError(f"kind: got {kind!r}; allowed: {', '.join((CFN_EXECUTION_ROLE, *CDK_BOOTSTRAP_ROLES))}")
    return f"cdk-{qualifier}-{kind}-{account}-{region}"
