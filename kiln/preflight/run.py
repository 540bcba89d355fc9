"""Run every preflight check at once and gather their findings into one report."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from botocore.exceptions import ClientError

from kiln.preflight.aws import AWS_ERRORS, AwsClients, unchecked
from kiln.preflight.findings import Finding, Report
from kiln.preflight.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Check:
    """One preflight check: its name (for --skip), what it proves, and the function that asks AWS."""

    name: str
    about: str
    run: Callable[[Plan, AwsClients], list[Finding]]


def all_checks() -> tuple[Check, ...]:
    """Return every check in the order `kiln preflight --help` lists them."""
    from kiln.preflight.checks import bucket, image, lustre, offerings, quotas, reservations, services, subnet

    return (
        services.CHECK,
        offerings.CHECK,
        quotas.CHECK,
        reservations.CHECK,
        subnet.CHECK,
        image.CHECK,
        lustre.CHECK,
        bucket.CHECK,
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
