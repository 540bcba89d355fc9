"""`kiln preflight --spec FILE`: is this AWS account ready for this cluster? One line per finding."""

from __future__ import annotations

import argparse
import json

from kiln.cli.errors import one_line_failures
from kiln.cli.options import aws_options

DESCRIPTION = """\
Read-only checks of the account your AWS credentials reach, in the spec's region, all at once:
  services      every service the cluster uses is offered in the region (PCS, SageMaker, EKS, FSx, ...)
  offerings     EC2 offers each instance type in the spec's availability zone
  quotas        Service Quotas: EC2 On-Demand and Spot vCPUs per instance class, HyperPod's per-type quotas
  reservations  capacity reservations and blocks: state, AZ, type, count, start and end
  subnet        free addresses in the compute subnet against nodes x interfaces
  image         compute.image.ami_id exists, fits the instance architecture and the root volume
  lustre        FSx for Lustre storage quota for the deployment type, against what is in use; an attached
                file system (file_system_id) exists, is Lustre, in the VPC, and admits security_group_id
  bucket        what a deploy does with storage.bucket.name: creates, updates or attaches it (or fails: it exists);
                the data repository bucket exists
  leftovers     what an earlier deploy kept after `cdk destroy` (by kiln's tags), what a deploy does with each,
                and the commands that attach or delete it (`kiln leftovers` lists the same)

Each finding is one line: OK, WARN (deploys, but look), FAIL (the deploy would fail) or UNCHECKED (AWS refused
the question: the line names the IAM action to allow). Exit 0 ready (no FAIL or UNCHECKED), 1 not ready,
2 bad spec or arguments. Nothing is created or changed."""


def _preflight(args: argparse.Namespace) -> int:
    from kiln.aws.session import aws_session
    from kiln.preflight.run import preflight
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    report = preflight(spec, spec_path=args.spec, session=session, region=session.region_name, skip=args.skip)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        for finding in report.ordered():
            print(finding.line())
        print(report.summary())
    return report.exit_code


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln preflight` to the kiln command line."""
    parser = commands.add_parser(
        "preflight",
        help="check the AWS account before deploy: quotas, offerings, reservations, subnet, AMI, FSx, buckets",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, metavar="FILE", help="the cluster spec")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of lines")
    aws_options(parser, spec=True)
    parser.add_argument(
        "--skip", action="append", default=[], metavar="CHECK", help="leave out this check (repeatable)"
    )
    # A bad spec or argument exits 2; no credentials, or an account that answers nothing, exit 1 (not ready).
    parser.set_defaults(func=one_line_failures("kiln preflight", _preflight))
