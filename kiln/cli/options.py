"""Arguments more than one command takes."""

from __future__ import annotations

import argparse


def accept_unready_flag(parser: argparse.ArgumentParser) -> None:
    from kiln.bootstrap.readiness import ACCEPT_UNREADY

    parser.add_argument(
        ACCEPT_UNREADY,
        action="store_true",
        help="exit 0 even when nodes would not boot (a download without a sha256); the verdict is still printed",
    )


def aws_options(parser: argparse.ArgumentParser, *, spec: bool, about: str = "") -> None:
    """Add --region and --profile, the flags of every command that asks AWS (kiln.aws.session's rule).

    SPEC: the command reads a spec, whose region --region may only repeat. ABOUT: what the region is for, said first.
    """
    said = [about] if about else []
    if spec:
        said.append("for a spec without a region (one that differs from the spec's is refused)")
    said.append("default: AWS_DEFAULT_REGION or the profile's region")
    parser.add_argument("--region", help="; ".join(said))
    parser.add_argument(
        "--profile", help="the AWS config profile to use (default: credentials as boto3 and the AWS CLI find them)"
    )
