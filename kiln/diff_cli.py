"""`kiln diff --spec NEW`: what deploying a spec does to the cluster already there, before anything is deployed."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kiln.command_errors import one_line_failures
from kiln.contracts.errors import Failure

EXIT_CLEAN, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2

DESCRIPTION = """\
Synthesize the spec and compare each stack's template with what it replaces:
  (default)              the deployed stacks (CloudFormation GetTemplate, in the spec's region)
  --before OLD.yaml      the templates of another spec (offline)
  --stack-templates DIR  the templates in DIR, <stack>.template.json (a cloud assembly, such as cdk.out)

One line per change that CloudFormation refuses (an export another stack imports would change or go; a resource
with a custom name would be replaced), then one per file system, bucket, cluster, workspace, key or log group
that the deploy replaces (the new one starts empty) or drops. A resource is replaced when a create-only property
of its CloudFormation resource schema changes (the schemas come with cfn-lint).

Exit 0 when there is no such line, 1 when there is one, 2 for a bad spec or a comparison that could not be made.
Nothing is created or changed."""


# What kiln diff compares without AWS, for the line that says it has no credentials.
OFFLINE = "compare offline with --before OLD.yaml or --stack-templates DIR"


class DiffError(Failure):
    """The comparison could not be made: str() is one line."""


def synthesized(path: str, outdir: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Synthesize the spec at PATH as app.py builds it into OUTDIR; return its templates and its region.

    A bad spec raises SpecError (its own lines); a spec the constructs refuse raises DiffError with one line.
    """
    from kiln.aws_errors import one_line
    from kiln.changes import assembly_templates
    from kiln.node_runtime import require_node
    from kiln.spec import SpecError, load_spec

    require_node()  # before the CDK loads: jsii starts Node.js then
    from kiln.stacks.ci_mode import ci_environment
    from kiln.synth import synthesize

    spec = load_spec(path)
    try:
        # cdk-nag writes metadata only: the templates' resources are the same without it.
        synthesize(spec, outdir, nag=False, ci=ci_environment(spec))
    except SpecError:
        raise
    except Exception as exc:  # jsii and the constructs refuse with their own exception types
        raise DiffError(f"{path}: synthesis failed: {one_line(str(exc))}") from None
    return assembly_templates(outdir), spec.region


def templates_in(directory: Path, names: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the templates of the stacks NAMES that DIRECTORY holds as <stack>.template.json."""
    found = {}
    for name in names:
        path = directory / f"{name}.template.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    return found


def deployed_templates(names: Mapping[str, Any], region: str | None) -> dict[str, dict[str, Any]]:
    """Return the deployed templates of the stacks NAMES that exist (GetTemplate, the template as submitted).

    Raise DiffError with one line when AWS cannot be asked, NoCredentials without credentials AWS takes.
    """
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

    from kiln.aws_errors import error_message, explain, one_line, raise_if_no_credentials

    try:
        # A session of its own: boto3's default one keeps whatever credentials it found first in this process.
        session = boto3.session.Session()
        client = session.client("cloudformation", region_name=region) if region else session.client("cloudformation")
    except NoRegionError:
        raise DiffError(
            "no region: set `region` in the spec, pass --region, or set AWS_DEFAULT_REGION (boto3 does not read "
            "AWS_REGION)"
        ) from None
    except BotoCoreError as exc:  # a profile that is not there
        raise_if_no_credentials(exc)
        raise DiffError(f"cloudformation: {one_line(str(exc))}") from None
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
    from kiln.node_runtime import require_node

    require_node()  # the constructs load the CDK
    from kiln.constructs.parallelcluster import cluster_configuration, cluster_name_of, update_refusals

    lines = []
    for stack, template in after.items():
        old, new = cluster_configuration(before.get(stack, {})), cluster_configuration(template)
        if old is not None and new is not None:
            lines += [f"{stack}: {line}" for line in update_refusals(old, new, cluster_name_of(template))]
    return lines


def run_diff(args: argparse.Namespace) -> int:
    """Compare the spec's templates with the deployed ones (or --before's, or --stack-templates'); print findings."""
    from kiln.changes import DEFAULT_REGION, plan

    with tempfile.TemporaryDirectory(prefix="kiln-diff-") as tmp:
        after, region = synthesized(args.spec, Path(tmp) / "after")
        if args.region and region and args.region != region:
            raise DiffError(f"--region {args.region}: the spec deploys to {region}")
        region = args.region or region
        if args.before:
            before, _ = synthesized(args.before, Path(tmp) / "before")
            against = args.before
        elif args.stack_templates:
            directory = Path(args.stack_templates)
            if not directory.is_dir():
                raise DiffError(f"--stack-templates {args.stack_templates}: not a directory")
            before, against = templates_in(directory, after), args.stack_templates
        else:
            before, against = deployed_templates(after, region), "the deployed stacks"
        changes = plan(before, after, region=region or DEFAULT_REGION)
    refusals = backend_refusals(before, after)
    findings = refusals + changes.findings()
    for line in findings:
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
    print(f"kiln diff: {summary}; nothing is refused, and no stateful resource is replaced or dropped")
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
    parser.add_argument("--region", help="where the deployed stacks are (default: the spec's region)")
    # Exit 1 is a refused change: a comparison that could not be made, credentials included, exits 2.
    parser.set_defaults(func=one_line_failures("kiln diff", run_diff, otherwise=OFFLINE, failed_exit=EXIT_ERROR))
