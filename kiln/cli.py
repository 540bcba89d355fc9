"""The `kiln` command: validate specs, print the schema, inspect the catalog, render and report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kiln.bootstrap import cli as bootstrap_cli
from kiln.local import cli as local_cli
from kiln.spec import SpecError, load_spec


def _validate(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            failed = True
            for line in exc.lines_out():
                print(line, file=sys.stderr)
            continue
        groups = ", ".join(f"{g.name}={g.instance_type}x{g.max_count}" for g in spec.compute.groups)
        print(f"{path}: ok ({spec.compute.backend}; {groups})")
    return 2 if failed else 0


def _schema(args: argparse.Namespace) -> int:
    from kiln.spec.schema import schema_text

    text = schema_text()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _catalog_list(args: argparse.Namespace) -> int:
    from kiln.catalog import instance_type, known_instance_types

    rows = [("type", "accelerators", "net cards", "EFA", "efa-only", "NVLink")]
    for name in known_instance_types():
        it = instance_type(name)
        acc = f"{it.accelerator.count}x {it.accelerator.name}" if it.accelerator else "-"
        nvlink = f"gen {it.nvlink_generation}" if it.nvlink_generation else "-"
        rows.append(
            (
                name,
                acc,
                str(it.network_cards),
                str(it.efa_interface_count),
                "yes" if it.efa_only_interfaces else "no",
                nvlink,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _catalog_show(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from kiln.catalog import UnknownInstanceType, instance_type

    try:
        facts = instance_type(args.instance_type)
    except UnknownInstanceType as exc:
        print(f"kiln catalog show: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(facts), indent=2))
    return 0


def _catalog_refresh(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from kiln.catalog.refresh import refresh

    try:
        facts = refresh(args.region)
    except (BotoCoreError, ClientError, LookupError) as exc:
        print(f"kiln catalog refresh: {exc}", file=sys.stderr)
        return 1
    print(f"described {len(facts)} instance types in {args.region}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from kiln.report import run_report

    return run_report(args.files, lint=not args.no_lint)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every kiln subcommand."""
    parser = argparse.ArgumentParser(prog="kiln", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check spec files; one line per problem, exit 2 on any")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(func=_validate)

    schema = commands.add_parser("schema", help="print the spec's JSON Schema (for editor completion)")
    schema.add_argument("--out", help="write to this file instead of standard output")
    schema.set_defaults(func=_schema)

    catalog = commands.add_parser("catalog", help="instance facts kiln knows")
    catalog_commands = catalog.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    catalog_commands.add_parser("list", help="one line per instance type").set_defaults(func=_catalog_list)
    show = catalog_commands.add_parser("show", help="every fact about one instance type")
    show.add_argument("instance_type")
    show.set_defaults(func=_catalog_show)
    refresh = catalog_commands.add_parser("refresh", help="regenerate the facts from EC2 DescribeInstanceTypes")
    refresh.add_argument("--region", default="us-east-1")
    refresh.set_defaults(func=_catalog_refresh)

    report = commands.add_parser("report", help="validate, synthesize and lint specs; print a summary table")
    report.add_argument("files", nargs="+", metavar="FILE")
    report.add_argument("--no-lint", action="store_true", help="skip cfn-lint (cdk-nag always runs)")
    report.set_defaults(func=_report)

    bootstrap_cli.register(commands)
    local_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the kiln command line and return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SpecError as exc:
        for line in exc.lines_out():
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
