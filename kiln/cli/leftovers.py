"""`kiln leftovers --spec FILE`: what an earlier deploy of this cluster kept after `cdk destroy`, and how to remove it.

Prints each leftover (found by kiln's tags, outside the cluster's live stacks) with what a deploy of the spec does
with it, the spec lines that attach it, and the `aws` commands that delete it, then every delete command in the
order they can run. Deletes nothing.
"""

from __future__ import annotations

import argparse
import json

from kiln.cli.errors import one_line_failures
from kiln.cli.options import aws_options

DESCRIPTION = __doc__.split("\n", 2)[2].strip()


def _leftovers(args: argparse.Namespace) -> int:
    from botocore.exceptions import ClientError

    from kiln.aws.errors import aws_call, raise_if_no_credentials
    from kiln.aws.session import aws_session
    from kiln.contracts.errors import Failure
    from kiln.preflight.aws import AWS_ERRORS, AwsClients, unchecked
    from kiln.preflight.checks.leftovers import CHECK, find_leftovers
    from kiln.preflight.plan import plan_for
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    region = session.region_name
    with aws_call("sts:GetCallerIdentity"):
        aws = AwsClients.from_session(session, region)
    plan = plan_for(spec, spec_path=args.spec, region=region)
    try:
        found = find_leftovers(plan, aws)
    except AWS_ERRORS as error:
        raise_if_no_credentials(error)
        operation = error.operation_name if isinstance(error, ClientError) else ""
        action = aws.iam_action(operation) if operation else CHECK.about
        refused = unchecked("leftovers", CHECK.about, error, action=action, skip_hint="look in the console")
        raise Failure(f"{refused.message}; {refused.remedy}") from None
    if args.json:
        listed = [
            {
                "subject": item.subject,
                "kind": item.kind,
                "id": item.ident,
                "about": item.about,
                "redeploy": item.redeploy,
                "attached": item.attached,
                "attach": item.attach,
                "delete": list(item.delete),
            }
            for item in found
        ]
        print(json.dumps({"cluster": plan.name, "region": region, "leftovers": listed}, indent=2))
        return 0
    used = sum(item.attached for item in found)
    if not found:
        print(f"kiln leftovers: {plan.name} in {region}: nothing kept by an earlier deploy")
        return 0
    print(f"kiln leftovers: {plan.name} in {region}: {len(found)} kept by an earlier deploy ({used} used by this spec)")
    for item in found:
        print(f"{item.subject}: {item.about}; {item.redeploy}")
        if item.attach and not item.attached:
            print(f"  attach: {item.attach}")
        if not item.attached:
            for command in item.delete:
                print(f"  delete: {command}")
    unused = [command for item in found if not item.attached for command in item.delete]
    if unused:
        print("To delete them (kiln deletes nothing), in this order:")
        for command in unused:
            print(f"  {command}")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln leftovers` to the kiln command line."""
    parser = commands.add_parser(
        "leftovers",
        help="list what an earlier deploy kept after cdk destroy, with the commands to attach or delete it",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, metavar="FILE", help="the cluster spec")
    parser.add_argument("--json", action="store_true", help="print the list as JSON instead of lines")
    aws_options(parser, spec=True)
    # A bad spec or argument exits 2; no credentials, or AWS refusing the listing, exit 1.
    parser.set_defaults(func=one_line_failures("kiln leftovers", _leftovers))
