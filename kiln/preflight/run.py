"""Run every preflight check at once and gather their findings into one report."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from kiln.aws.errors import aws_call, one_line
from kiln.contracts.errors import Failure, InputError
from kiln.preflight.aws import AWS_ERRORS, AwsClients, unchecked
from kiln.preflight.check import Check
from kiln.preflight.checks import (
    bootstrap,
    bucket,
    egress,
    image,
    kept_vpc,
    leftovers,
    lustre,
    network_quotas,
    offerings,
    quotas,
    reservations,
    services,
    subnet,
    zones,
)
from kiln.preflight.findings import Finding, Report
from kiln.preflight.plan import Plan, plan_for
from kiln.spec import ClusterSpec

if TYPE_CHECKING:
    from kiln.aws.session import Session


def all_checks() -> tuple[Check, ...]:
    """Return every check in the order `kiln preflight --help` lists them."""
    return (
        services.CHECK,
        offerings.CHECK,
        quotas.CHECK,
        network_quotas.CHECK,
        reservations.CHECK,
        subnet.CHECK,
        zones.CHECK,
        egress.CHECK,
        kept_vpc.CHECK,
        image.CHECK,
        lustre.CHECK,
        bucket.CHECK,
        leftovers.CHECK,
        bootstrap.CHECK,
    )


def check_names() -> tuple[str, ...]:
    return tuple(check.name for check in all_checks())


def run_check(check: Check, plan: Plan, aws: AwsClients) -> list[Finding]:
    """Run CHECK; an AWS refusal becomes one unchecked line naming the call and the IAM action."""
    try:
        return check.run(plan, aws)
    except AWS_ERRORS as error:
        operation = error.operation_name if isinstance(error, ClientError) else ""
        action = aws.iam_action(operation) if operation else check.about
        return [unchecked(check.name, check.about, error, action=action, skip_hint=f"pass --skip {check.name}")]
    except Exception as error:  # noqa: BLE001 - one check's surprise (an answer of a shape kiln did not expect)
        # must not hide what the other checks found, nor end the run in a traceback.
        return [
            Finding(
                check=check.name,
                status="unchecked",
                subject=check.about,
                message=f"the check stopped: {type(error).__name__}: {one_line(str(error))}",
                remedy=f"report it to kiln with this line, or pass --skip {check.name}",
            )
        ]


def run_preflight(
    plan: Plan,
    aws: AwsClients,
    *,
    skip: Iterable[str] = (),
    workers: int = 8,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Run every check not in SKIP concurrently and return their findings."""
    started = clock()
    skipped = set(skip)
    checks = [check for check in all_checks() if check.name not in skipped]
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="preflight") as pool:
        results = list(pool.map(lambda check: run_check(check, plan, aws), checks))
    findings = tuple(finding for found in results for finding in found) + tuple(
        Finding(
            check=check.name,
            status="warn",
            subject=check.about,
            message="skipped (--skip)",
            remedy="run without --skip to prove it",
        )
        for check in all_checks()
        if check.name in skipped
    )
    return Report(spec=plan.spec_path, region=plan.region, findings=findings, seconds=clock() - started)


class NoAccount(Failure):
    """Preflight cannot ask AWS anything: no credentials, or they are refused. str() is one line."""


def preflight(
    spec: ClusterSpec,
    *,
    spec_path: str,
    session: Session,
    region: str,
    skip: Iterable[str] = (),
    environment: str | None = None,
) -> Report:
    """Check SPEC against the account SESSION reaches, in REGION; NoAccount when no call can be made.

    Without credentials AWS takes, NoCredentials (kiln.aws.errors): the command says so in its one wording.

    ENVIRONMENT: check a short-lived environment of that name (`kiln ci up`) rather than the spec's own cluster.
    """
    unknown = sorted(set(skip) - set(check_names()))
    if unknown:
        raise InputError(f"--skip {', '.join(unknown)}: no such check; the checks are {', '.join(check_names())}")
    with aws_call("sts:GetCallerIdentity", NoAccount):
        aws = AwsClients.from_session(session, region)
    plan = plan_for(spec, spec_path=spec_path, region=region, environment=environment, account=aws.account)
    return run_preflight(plan, aws, skip=skip)
