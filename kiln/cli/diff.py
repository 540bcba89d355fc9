"""`kiln diff --spec NEW`: what deploying a spec does to the cluster already there, before anything is deployed."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.cli.errors import one_line_failures
from kiln.cli.options import aws_options
from kiln.contracts.errors import Failure, InputError

if TYPE_CHECKING:
    from kiln.aws.session import Session

EXIT_CLEAN, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2

DESCRIPTION = """\
Synthesize the spec and compare each stack's template with what it replaces:
  (default)              the deployed stacks (CloudFormation GetTemplate, in the spec's region)
  --before OLD.yaml      the templates of another spec (offline)
  --stack-templates DIR  the templates in DIR, <stack>.template.json (a cloud assembly, such as cdk.out)
The spec is synthesized as the CDK CLI synthesizes it: for the account it deploys to (the credentials', or the
assembly's), with the AZs its lookup recorded in ./cdk.context.json (run kiln diff where you run npx cdk).

One line per change that CloudFormation refuses (an export another stack imports would change or go; a resource
with a custom name would be replaced) or that the service refuses during the update (a property it changes one way
only: FSx storage grows, Slurm and Kubernetes versions move up; a new data repository link where the old one still
holds the path). Then one per file system, bucket, cluster, workspace, key or log group that the deploy replaces
(the new one starts empty) or drops; one per EKS node group whose size changes or that is replaced or removed (EKS
terminates nodes past their pods' disruption budgets); one per PCS node group replaced or removed (PCS deletes it
with its nodes). A resource is replaced when a create-only property of its CloudFormation resource schema changes
(the schemas come with cfn-lint). Then, for reading only, one per EKS node group whose update replaces every node
(within its pods' disruption budgets).

Exit 0 when there is no line of the first kinds, 1 when there is one, 2 for a bad spec or a comparison that could
not be made.
Nothing is created or changed."""


# What kiln diff compares without AWS, for the line that says it has no credentials.
OFFLINE = "compare offline with --before OLD.yaml or --stack-templates DIR"


class DiffError(Failure):
    """The comparison could not be made: str() is one line."""


def synthesized(
    path: str, outdir: Path, account: str | None = None, *, deployed: bool = False
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Synthesize the spec at PATH as app.py builds it into OUTDIR, for ACCOUNT as the CDK CLI would (its account,
    and the AZs its lookup recorded in ./cdk.context.json); return its templates and its region. DEPLOYED: the spec
    describes the cluster already there (`--before`), read despite what only binds a new cluster.

    A bad spec raises SpecError (its own lines); a spec the constructs refuse raises DiffError with one line.
    """
    from kiln.aws.errors import one_line
    from kiln.changes import assembly_templates
    from kiln.host.node_runtime import require_node
    from kiln.spec import SpecError, load_spec
    from kiln.spec.problems import printable

    require_node()  # before the CDK loads: jsii starts Node.js then
    from kiln.stacks.ci_mode import ci_environment
    from kiln.stacks.synth import synthesize
    from kiln.stacks.zones import zone_choice

    spec = load_spec(path, deployed=deployed)
    # The AZs the CDK CLI takes from ./cdk.context.json, or one line where it would synthesize placeholders.
    zones = zone_choice(spec, account=account)
    for line in zones.lines:
        print(f"kiln diff: {printable(path)}: {line}", file=sys.stderr)
    try:
        # cdk-nag writes metadata only: the templates' resources are the same without it.
        synthesize(spec, outdir, nag=False, ci=ci_environment(spec), context=zones.context, account=account)
    except SpecError:
        raise
    except Exception as exc:  # jsii and the constructs refuse with their own exception types
        raise DiffError(f"{path}: synthesis failed: {one_line(str(exc))}") from None
    return assembly_templates(outdir), spec.region


def assembly_account(directory: Path) -> str | None:
    """Return the one account the stacks of the cloud assembly in DIRECTORY were synthesized for (its manifest's
    aws://ACCOUNT/REGION environments), or None (no manifest, account-agnostic stacks, or several accounts)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    artifacts = manifest.get("artifacts") if isinstance(manifest, dict) else None
    accounts = {
        str(artifact.get("environment", "")).removeprefix("aws://").split("/")[0]
        for artifact in (artifacts or {}).values()
        if isinstance(artifact, dict) and artifact.get("type") == "aws:cloudformation:stack"
    }
    concrete = {account for account in accounts if account.isdigit()}
    return concrete.pop() if len(concrete) == 1 else None


def caller_account(session: Session) -> str:
    """Return the account of SESSION's credentials (STS GetCallerIdentity): the one the CDK CLI synthesizes and
    deploys for. Raise NoCredentials without credentials AWS takes, DiffError (one line) when STS refuses."""
    from botocore.exceptions import BotoCoreError, ClientError

    from kiln.aws.errors import explain, one_line, raise_if_no_credentials

    try:
        return str(session.client("sts").get_caller_identity()["Account"])
    except ClientError as exc:
        raise_if_no_credentials(exc)
        raise DiffError(explain("sts:GetCallerIdentity", exc)) from None
    except BotoCoreError as exc:
        raise_if_no_credentials(exc)
        raise DiffError(f"sts:GetCallerIdentity failed: {one_line(str(exc))}") from None


def deploying_account(args: argparse.Namespace, session: Session | None) -> str | None:
    """Return the account to synthesize for, as the CDK CLI did or will: SESSION's credentials' when comparing with
    the deployed stacks, the assembly's with --stack-templates, CDK_DEFAULT_ACCOUNT's (if set) with --before, where
    both sides are synthesized alike. Account-literal ARNs and asset buckets then match what CloudFormation holds."""
    if args.before:
        return None
    if args.stack_templates:
        return assembly_account(Path(args.stack_templates))
    return caller_account(session)


def templates_in(directory: Path, names: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the templates of the stacks NAMES that DIRECTORY holds as <stack>.template.json."""
    found = {}
    for name in names:
        path = directory / f"{name}.template.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    return found


def deployed_templates(names: Mapping[str, Any], session: Session) -> dict[str, dict[str, Any]]:
    """Return the deployed templates of the stacks NAMES that exist in SESSION's region (GetTemplate, the template
    as submitted).

    Raise DiffError with one line when AWS cannot be asked, NoCredentials without credentials AWS takes.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from kiln.aws.errors import error_message, explain, one_line, raise_if_no_credentials

    client = session.client("cloudformation")
    found = {}
    for name in names:
        try:
            body = client.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        except ClientError as exc:
            raise_if_no_credentials(exc)
            if "does not exist" in error_message(exc):
                continue
            raise DiffError(explain(f"cloudformation:GetTemplate of {name}", exc)) from None
        except BotoCoreError as exc:
            raise_if_no_credentials(exc)
            raise DiffError(f"cloudformation:GetTemplate of {name} failed: {one_line(str(exc))}") from None
        try:
            found[name] = body if isinstance(body, dict) else json.loads(body)
        except json.JSONDecodeError:
            raise DiffError(f"{name}: the deployed template is not JSON (kiln deploys JSON): cannot compare") from None
    return found


def backend_refusals(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Return one line per change a backend's own update check refuses though CloudFormation would take it: a
    ParallelCluster configuration change its update policy forbids on a cluster in use (the custom resource then
    fails the update, and CloudFormation rolls it back)."""
    from kiln.changes.parallelcluster import cluster_configuration, cluster_name_of, update_refusals

    lines = []
    for stack, template in after.items():
        old, new = cluster_configuration(before.get(stack, {})), cluster_configuration(template)
        if old is not None and new is not None:
            lines += [f"{stack}: {line}" for line in update_refusals(old, new, cluster_name_of(template))]
    return lines


def run_diff(args: argparse.Namespace) -> int:
    """Compare the spec's templates with the deployed ones (or --before's, or --stack-templates'); print findings."""
    from kiln.aws.session import aws_session, chosen_region
    from kiln.changes import DEFAULT_REGION, plan
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    asks_aws = not (args.before or args.stack_templates)
    if args.profile and not asks_aws:
        raise InputError("--profile: --before and --stack-templates compare offline, without AWS credentials")
    # The deployed stacks are asked for in the session's region; the offline comparisons hold --region to the rule.
    session = aws_session(region=args.region, profile=args.profile, spec=spec) if asks_aws else None
    region = session.region_name if session else chosen_region(args.region, spec)
    with tempfile.TemporaryDirectory(prefix="kiln-diff-") as tmp:
        account = deploying_account(args, session)
        after, _ = synthesized(args.spec, Path(tmp) / "after", account)
        if args.before:
            before, _ = synthesized(args.before, Path(tmp) / "before", account, deployed=True)
            against = args.before
        elif args.stack_templates:
            directory = Path(args.stack_templates)
            if not directory.is_dir():
                raise DiffError(f"--stack-templates {args.stack_templates}: not a directory")
            before, against = templates_in(directory, after), args.stack_templates
        else:
            before, against = deployed_templates(after, session), "the deployed stacks"
        changes = plan(before, after, region=region or DEFAULT_REGION)
    refusals = backend_refusals(before, after)
    findings = refusals + changes.findings()
    for line in findings:
        print(line)
    # Lines to read that stop nothing: node groups rolled within their pods' disruption budgets.
    notes = changes.notes()
    for line in notes:
        print(line)
    compared = [name for name in after if name in before]
    new = [name for name in after if name not in before]
    summary = f"{len(compared)} stack{'' if len(compared) == 1 else 's'} compared with {against}" + (
        f"; new: {', '.join(new)}" if new else ""
    )
    if findings:
        verdict = "refused by CloudFormation" if changes.refused or refusals else "deploys, but look at the lines above"
        print(f"kiln diff: {summary}; {verdict}")
        return EXIT_REFUSED
    rolled = f"; {len(notes)} node group{'' if len(notes) == 1 else 's'} roll (above)" if notes else ""
    print(f"kiln diff: {summary}; nothing is refused, and no stateful resource is replaced or dropped{rolled}")
    return EXIT_CLEAN


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln diff` to the kiln command line."""
    parser = commands.add_parser(
        "diff",
        help="what deploying a spec does: changes CloudFormation refuses, stateful resources replaced or dropped",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, metavar="FILE", help="the spec to deploy")
    against = parser.add_mutually_exclusive_group()
    against.add_argument("--before", metavar="FILE", help="compare with this spec's templates instead (offline)")
    against.add_argument(
        "--stack-templates", metavar="DIR", help="compare with the <stack>.template.json files in DIR instead"
    )
    aws_options(parser, spec=True, about="where the deployed stacks are")
    # Exit 1 is a refused change: a comparison that could not be made, credentials included, exits 2.
    parser.set_defaults(func=one_line_failures("kiln diff", run_diff, otherwise=OFFLINE, failed_exit=EXIT_ERROR))
