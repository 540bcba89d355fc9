"""kiln's own Lambda functions (the CI reaper, Grafana's dashboard provisioner): one runtime and one way to package
and size them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_14
MEMORY_MB = 256


def kiln_function(
    scope: Construct,
    construct_id: str,
    *,
    code_dir: Path,
    handler: str,
    role: iam.IRole,
    timeout: Duration,
    log_group: logs.ILogGroup,
    description: str,
    environment: Mapping[str, str] | None = None,
) -> lambda_.Function:
    """Return a function running HANDLER from CODE_DIR (without bytecode caches) as ROLE, logging to LOG_GROUP.

    No reserved concurrency: Lambda lets an account reserve only what leaves 100 unreserved
    (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html), and new accounts often have a
    quota of 10 to 100, where reserving even 1 fails the deploy. Two invocations side by side do no harm: the reaper's
    deletions and reschedules are idempotent, and CloudFormation sends the provisioner one event at a time.
    """
    return lambda_.Function(
        scope,
        construct_id,
        runtime=RUNTIME,
        handler=handler,
        code=lambda_.Code.from_asset(str(code_dir), exclude=["__pycache__", "*.pyc"]),
        role=role,
        timeout=timeout,
        memory_size=MEMORY_MB,
        log_group=log_group,
        description=description,
        environment=dict(environment) if environment else None,
    )
