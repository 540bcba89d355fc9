"""`kiln ci`: short-lived environments for pipelines.

  up      preflight, synthesize, deploy stack by stack (reaper first when a TTL is set), wait until ready
  run     run a command on the cluster's login/head node (Session Manager) and return its exit code
  down    delete the environment's stacks in order, emptying non-retained buckets; safe to repeat
  sweep   delete every environment whose TTL has passed (the safety net for a runner that died)
  extend  move the reaper's deletion time
  identity  the GitHub OIDC deploy role, as a stack to deploy once per repository

An environment is named from the spec's name and the pipeline's run id (GITHUB_RUN_ID, CI_PIPELINE_ID,
BUILDKITE_BUILD_ID, or --run-id), so every step of one run finds the same one.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.ci.environment import CiInputError, environment_name, parse_hours, resolve_run_id
from kiln.cli.options import aws_options

if TYPE_CHECKING:
    from kiln.aws.session import Session
    from kiln.ci.reaper_code.kiln_reaper.teardown import Clients

DEFAULT_READY_TIMEOUT = "45m"
DEFAULT_RUN_TIMEOUT = "1h"
DEFAULT_DOWN_TIMEOUT = "3h"
DEFAULT_SWEEP_AGE = "6h"


class Progress:
    """One line per event on stderr, with the seconds since the command started."""

    def __init__(self, action: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.action, self.clock, self.started = action, clock, clock()

    def __call__(self, message: str) -> None:
        print(f"kiln ci {self.action}: [{self.clock() - self.started:6.0f} s] {message}", file=sys.stderr, flush=True)


class _Target:
    """The environment a command acts on, its region and a boto3 session there (kiln.aws.session's rule)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kiln.aws.session import aws_session

        self.spec = None
        if getattr(args, "environment", None):
            self.name = args.environment
        else:
            from kiln.spec import load_spec

            self.spec = load_spec(args.spec)
            self.name = environment_name(self.spec.name, resolve_run_id(args.run_id, os.environ))
        self.session = aws_session(region=args.region, profile=args.profile, spec=self.spec)
        self.region = self.session.region_name


def _teardown_clients(session: Session) -> Clients:
    from kiln.ci.reaper_code.kiln_reaper.teardown import Clients

    return Clients(cloudformation=session.client("cloudformation"), s3=session.client("s3"))


def _caller_role_arn(session: Session, progress: Progress) -> str | None:
    """Return the IAM role behind this session's credentials (EKS admits it), or None for a user."""
    arn = session.client("sts").get_caller_identity()["Arn"]
    parts = arn.split(":")
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{parts[5].split('/')[1]}"
    progress(f"credentials are not a role ({arn}): the EKS cluster gets no admin entry for them")
    return None


def _first_deployed(target: _Target, progress: Progress) -> datetime | None:
    """Return when an existing environment of this name was created, so a second `up` keeps its deadline."""
    from kiln.ci.reaper_code.kiln_reaper.teardown import environment_stacks

    stacks = environment_stacks(target.session.client("cloudformation"), target.name)
    if not stacks:
        return None
    created = min(stack["CreationTime"] for stack in stacks).astimezone(timezone.utc).replace(microsecond=0)
    progress(f"{target.name} exists since {created:%Y-%m-%d %H:%M} UTC: updating it; its TTL counts from then")
    return created


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _up(args: argparse.Namespace) -> int:
    from kiln.aws.remote.processes import cli_environment
    from kiln.bootstrap.readiness import ACCEPT_UNREADY
    from kiln.catalog.limits import ttl_problem
    from kiln.ci.deploy import cdk_command, check_cdk_version, deploy_stacks, github_output_lines, write_github_output
    from kiln.host.node_runtime import require_node
    from kiln.host.safe_output import claim_directory, write_file_atomically
    from kiln.node_config.judge import load_and_judge
    from kiln.spec.rules.image import NO_BAKE_IN_CI

    progress = Progress("up")
    given_ttl = parse_hours(args.ttl) if args.ttl else None
    if given_ttl is not None and (why := ttl_problem(given_ttl)):
        raise CiInputError(f"--ttl {args.ttl}: {why}")
    ready_timeout_h = parse_hours(args.ready_timeout)
    spec, readiness = load_and_judge(args.spec)
    if spec.compute.image.bake:
        raise CiInputError(f"{args.spec}: compute.image.bake {NO_BAKE_IN_CI}")
    if not readiness.ready:
        for reason in readiness.reasons():
            print(f"{args.spec}: {reason}", file=sys.stderr)
        if not args.accept_unready:
            print(
                f"kiln ci up: {args.spec}: nodes are not boot-ready; fix the above or pass {ACCEPT_UNREADY}",
                file=sys.stderr,
            )
            return 1
    # The Node.js that synthesis (jsii) and the CDK CLI run on, decided before either starts and before AWS is asked.
    require_node()
    from kiln.stacks.ci_mode import ci_environment
    from kiln.stacks.synth import synthesize
    from kiln.stacks.zones import zone_choice

    target = _Target(args)
    if args.skip_preflight:
        progress("preflight skipped (--skip-preflight)")
    elif not _preflight_passes(args.spec, spec, target, progress):
        return 1
    ttl = given_ttl if given_ttl is not None else spec.ci.ttl_hours
    cdk = cdk_command(os.environ, Path.cwd())
    # The CDK CLI asks AWS as the session does: its region, and its profile (--profile) when it names one.
    cdk_env = dict(cli_environment(target.session), AWS_REGION=target.region, AWS_DEFAULT_REGION=target.region)
    check_cdk_version(cdk, cdk_env)
    kubernetes = spec.platform.uses_kubernetes
    admin = _caller_role_arn(target.session, progress) if kubernetes else None
    created_at = _first_deployed(target, progress)
    ci = ci_environment(spec, name=target.name, created_at=created_at, ttl_hours=ttl, admin_role_arn=admin)
    if spec.storage.bucket.name:
        progress(
            f"storage.bucket.name {spec.storage.bucket.name} is global: this environment uses {target.name}-data-*"
        )
    workdir = claim_directory(args.workdir or tempfile.mkdtemp(prefix=f"kiln-ci-{target.name}-"), what="kiln ci up")
    ttl_text = f", deleted by its reaper at {ci.delete_at:%Y-%m-%d %H:%M} UTC" if ci.delete_at else ", no TTL"
    progress(f"environment {target.name} in {target.region}{ttl_text}; synthesizing into {workdir}")
    # The CDK CLI deploys the assembly as it is, so the AZs come from ./cdk.context.json's lookup here.
    zones = zone_choice(spec)
    for line in zones.lines:
        progress(line)
    synthesize(spec, workdir / "assembly", ci=ci, context=zones.context)
    deployment = deploy_stacks(workdir / "assembly", cdk=cdk, workdir=workdir, progress=progress, environ=cdk_env)
    result = {
        "environment": target.name,
        "region": target.region,
        "delete_at": ci.delete_at.isoformat() if ci.delete_at else None,
        "deploy_seconds": {name: round(s, 1) for name, s in deployment.seconds.items()},
        "outputs": deployment.outputs,
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.outputs:
        write_file_atomically(args.outputs, text, what="kiln ci up --outputs")
    if write_github_output(github_output_lines(target.name, target.region, deployment.outputs), os.environ):
        progress("outputs written to $GITHUB_OUTPUT")
    if not args.no_wait:
        _wait_ready(target, spec, ready_timeout_h, progress)
    sys.stdout.write(text)
    return 0


def _preflight_passes(spec_path: str, spec: Any, target: _Target, progress: Progress) -> bool:
    """Run `kiln preflight` for the environment; print what is not OK; return whether it may deploy."""
    from kiln.preflight.run import NoAccount, preflight

    progress(f"preflight of {target.name} in {target.region}")
    try:
        report = preflight(
            spec, spec_path=spec_path, session=target.session, region=target.region, environment=target.name
        )
    except NoAccount as exc:
        print(f"kiln ci up: preflight: {exc}", file=sys.stderr)
        return False
    for finding in report.ordered():
        if finding.status != "ok":
            print(f"kiln ci up: preflight: {finding.line()}", file=sys.stderr)
    progress(report.summary().removeprefix("kiln preflight: "))
    if not report.ready:
        print(
            "kiln ci up: not deploying: fix the FAIL and UNCHECKED lines above, or pass --skip-preflight",
            file=sys.stderr,
        )
    return report.ready


def _wait_ready(target: _Target, spec: Any, timeout_h: float, progress: Progress) -> None:
    from kiln.aws.remote.cluster import ClusterHandle
    from kiln.ci.ready import wait_until_ready

    cluster = ClusterHandle.from_stack(target.session, target.name, target.region)
    expected = {group.name: group.min_count for group in spec.compute.groups}
    wait_until_ready(target.session, cluster, expected_nodes=expected, timeout_s=timeout_h * 3600, progress=progress)
    progress("cluster ready")


def _run(args: argparse.Namespace) -> int:
    from kiln.aws.remote.cluster import ClusterHandle
    from kiln.aws.remote.nodes import find_head
    from kiln.aws.remote.transport import run_command

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise CiInputError("no command: kiln ci run --spec FILE -- CMD [ARGS...]")
    target = _Target(args)
    progress = Progress("run")
    cluster = ClusterHandle.from_stack(target.session, target.name, target.region)
    head = find_head(target.session, cluster)
    progress(f"running on {head.label}: {shlex.join(command)}")
    code = run_command(target.session, head, shlex.join(command), timeout_s=parse_hours(args.timeout) * 3600)
    progress(f"exit {code}")
    return code


def _down(args: argparse.Namespace) -> int:
    from kiln.ci.reaper_code.kiln_reaper.teardown import TeardownFailed, environment_stacks, teardown
    from kiln.contracts.errors import Failure

    target = _Target(args)
    progress = Progress("down")
    clients = _teardown_clients(target.session)
    if not environment_stacks(clients.cloudformation, target.name, progress):
        progress(f"{target.name}: nothing to delete in {target.region}")
        return 0
    try:
        done = teardown(clients, target.name, progress=progress, budget_s=parse_hours(args.timeout) * 3600)
    except TeardownFailed as exc:
        # The reaper's Lambda code has its own exception (it imports nothing of kiln): said as kiln's failure.
        raise Failure(str(exc)) from None
    if done is None:
        progress(f"{target.name}: still deleting after {args.timeout}; run `kiln ci down` again to go on waiting")
        return 1
    progress(f"{target.name}: deleted {len(done.deleted)} stacks")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from kiln.aws.session import aws_session
    from kiln.ci.reaper_code.kiln_reaper.teardown import TeardownFailed, teardown
    from kiln.ci.sweep import find_environments

    session = aws_session(region=args.region, profile=args.profile)
    progress = Progress("sweep")
    now = _now()
    found = find_environments(
        session.client("cloudformation"),
        session.client("scheduler"),
        older_than=timedelta(hours=parse_hours(args.older_than)),
    )
    failed = 0
    for env in found:
        due = f"due {env.due_at:%Y-%m-%d %H:%M} UTC" if env.due_at else "no due time"
        if not env.expired(now):
            progress(f"{env.name}: kept ({due}, {env.due_because})")
            continue
        if args.dry_run:
            progress(f"{env.name}: would delete ({due}, {env.due_because}): {', '.join(env.stacks)}")
            continue
        progress(f"{env.name}: deleting ({due}, {env.due_because})")
        try:
            teardown(_teardown_clients(session), env.name, progress=progress)
        except TeardownFailed as exc:
            progress(str(exc))
            failed += 1
    progress(f"{len(found)} environments in {session.region_name}, {failed} failed")
    return 1 if failed else 0


def _extend(args: argparse.Namespace) -> int:
    from botocore.exceptions import ClientError

    from kiln.aws.errors import error_code
    from kiln.catalog.limits import ttl_problem
    from kiln.ci.reaper_code.kiln_reaper.teardown import reschedule
    from kiln.contracts.environment import schedule_name

    hours = parse_hours(args.ttl)
    if why := ttl_problem(hours):
        raise CiInputError(f"--ttl {args.ttl}: {why}")
    target = _Target(args)
    when = (_now() + timedelta(hours=hours)).replace(microsecond=0)
    try:
        reschedule(target.session.client("scheduler"), schedule_name(target.name), when)
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        raise CiInputError(f"{target.name}: no reaper schedule in {target.region} (deployed without a TTL?)") from None
    Progress("extend")(f"{target.name}: now deleted at {when:%Y-%m-%d %H:%M:%S} UTC")
    return 0


def _handled(action: str, handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap HANDLER so every expected failure is one line on stderr, never a traceback."""
    from kiln.cli.errors import one_line_failures

    return one_line_failures(f"kiln ci {action}", handler)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `ci` command group to SUBPARSERS."""
    from kiln.cli.ci_identity import register_identity

    ci = subparsers.add_parser(
        "ci",
        help="short-lived environments for pipelines (up, run, down, sweep, extend, identity)",
        description=__doc__,
    )
    ci.formatter_class = argparse.RawDescriptionHelpFormatter
    commands = ci.add_subparsers(dest="ci_command", required=True, metavar="ACTION")

    def which(required_spec: bool = True) -> argparse.ArgumentParser:
        parent = argparse.ArgumentParser(add_help=False)
        chosen = parent.add_mutually_exclusive_group(required=required_spec)
        chosen.add_argument("--spec", help="the cluster spec the environment is made from")
        chosen.add_argument("--environment", help="an environment by name (as `kiln ci sweep --dry-run` lists them)")
        parent.add_argument("--run-id", help="the pipeline run (default: $GITHUB_RUN_ID, $CI_PIPELINE_ID, ...)")
        aws_options(parent, spec=True)
        return parent

    up = commands.add_parser("up", help="deploy an environment and wait until it is ready")
    up.add_argument("--spec", required=True, help="the cluster spec")
    up.add_argument("--run-id", help="the pipeline run (default: $GITHUB_RUN_ID, $CI_PIPELINE_ID, ...)")
    aws_options(up, spec=True)
    up.add_argument("--ttl", help="delete it this long after deploy, e.g. 2h (default: the spec's ci.ttl_hours)")
    up.add_argument("--outputs", help="also write the outputs JSON to this file")
    up.add_argument("--workdir", help="where the cloud assembly goes (default: a new temp directory)")
    up.add_argument("--no-wait", action="store_true", help="return after deploy, without waiting for readiness")
    up.add_argument("--ready-timeout", default=DEFAULT_READY_TIMEOUT, help="(default: %(default)s)")
    up.add_argument("--accept-unready", action="store_true", help="deploy nodes whose downloads are not all verifiable")
    up.add_argument(
        "--skip-preflight",
        action="store_true",
        help="deploy without `kiln preflight` first (it runs by default and stops on any FAIL or UNCHECKED line)",
    )
    up.set_defaults(func=_handled("up", _up))

    run = commands.add_parser("run", parents=[which()], help="run a command on the login/head node: run -- CMD...")
    run.add_argument("--timeout", default=DEFAULT_RUN_TIMEOUT, help="cancel it after this long (default: %(default)s)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="the command, after --")
    run.set_defaults(func=_handled("run", _run))

    down = commands.add_parser("down", parents=[which()], help="delete the environment; safe to repeat")
    down.add_argument(
        "--timeout", default=DEFAULT_DOWN_TIMEOUT, help="stop waiting after this long (default: %(default)s)"
    )
    down.set_defaults(func=_handled("down", _down))

    sweep = commands.add_parser("sweep", help="delete every environment past its TTL in a region")
    sweep.add_argument(
        "--older-than",
        default=DEFAULT_SWEEP_AGE,
        help="age at which an environment without a TTL goes (default: %(default)s)",
    )
    aws_options(sweep, spec=False)
    sweep.add_argument("--dry-run", action="store_true", help="list what would go, delete nothing")
    sweep.set_defaults(func=_handled("sweep", _sweep))

    extend = commands.add_parser("extend", parents=[which()], help="move the reaper's deletion time")
    extend.add_argument("--ttl", required=True, help="delete it this long from now, e.g. 4h")
    extend.set_defaults(func=_handled("extend", _extend))

    register_identity(commands)
