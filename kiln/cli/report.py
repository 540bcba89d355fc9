"""`kiln report`: validate, synthesize, lint and scan specs, and print one table (the review is kiln.review.report)."""

from __future__ import annotations

import argparse

from kiln.cli.options import accept_unready_flag


def _report(args: argparse.Namespace) -> int:
    from kiln.host.node_runtime import require_node

    require_node()
    from kiln.review.report import run_report

    return run_report(args.files, lint=not args.no_lint, accept_unready=args.accept_unready, verbose=args.verbose)


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln report` to COMMANDS."""
    report = commands.add_parser("report", help="validate, synthesize, lint and scan specs; print a summary table")
    report.add_argument("files", nargs="+", metavar="FILE")
    report.add_argument(
        "--no-lint",
        action="store_true",
        help="skip cfn-lint and checkov (cdk-nag and the IAM wildcard review always run)",
    )
    report.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list what passed with a reason (cdk-nag acknowledgements, checkov skips, reviewed IAM wildcards) "
        "and each kind of node's software and boot budget; the summary counts them either way",
    )
    accept_unready_flag(report)
    report.set_defaults(func=_report)
