"""The `kiln` command: validate specs, print the schema, inspect the catalog, render and report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kiln import bootstrap_cli, diff_cli
from kiln.ami import cli as ami_cli
from kiln.ci import cli as ci_cli
from kiln.command_errors import one_line_failures
from kiln.connect import cli as connect_cli
from kiln.contracts.errors import InputError
from kiln.hyperpod import cli as hyperpod_cli
from kiln.jobs import cli as job_cli
from kiln.local import cli as local_cli
from kiln.preflight import cli as preflight_cli
from kiln.preflight import leftovers_cli
from kiln.spec import SpecError

if TYPE_CHECKING:
    from kiln.bootstrap.readiness import BootReadiness
    from kiln.spec.models import ClusterSpec, ComputeGroup


def _validate(args: argparse.Namespace) -> int:
    from kiln.bootstrap.readiness import ACCEPT_UNREADY
    from kiln.node_config.judge import load_and_judge
    from kiln.spec.problems import printable
    from kiln.stacks.zones import zone_choice

    deployed = None
    if args.before is not None:
        from kiln.spec import load_spec

        try:
            deployed = load_spec(args.before, deployed=True)
        except SpecError as exc:
            for line in exc.lines_out():
                print(line, file=sys.stderr)
            return 2
    worst = 0
    for given in args.files:
        try:
            spec, readiness = load_and_judge(given)
            # The AZs a deploy takes: the spec's, or CDK's lookup as ./cdk.context.json records it; where the spec
            # needs the lookup and none is recorded, one line naming network.second_availability_zone, as synth says.
            zones = zone_choice(spec)
        except SpecError as exc:
            worst = 2
            for line in exc.lines_out():
                print(line, file=sys.stderr)
            continue
        # Echoed as the problem lines echo it: a file name's control characters never reach the terminal.
        path = printable(given)
        if deployed is not None and _refuse_one_way_changes(path, deployed, spec):
            worst = 2
            continue
        summary = "; ".join([spec.compute.backend, *map(_group_summary, spec.compute.groups)])
        for warning in (*readiness.tight_budget, *readiness.beta):
            print(f"{path}: {warning}", file=sys.stderr)
        if readiness.ready:
            print(f"{path}: ok ({summary}); boot-ready")
            _print_nodes(zones.lines + readiness.nodes + readiness.budget)
            continue
        for reason in readiness.reasons():
            print(f"{path}: {reason}", file=sys.stderr)
        verdict = f"{path}: valid ({summary}) but NOT boot-ready: {_not_ready(readiness)}"
        if args.accept_unready:
            print(f"{verdict}, accepted by {ACCEPT_UNREADY}")
        else:
            print(verdict)
            worst = max(worst, 1)
        _print_nodes(zones.lines + readiness.nodes + readiness.budget)
    return worst


def _refuse_one_way_changes(path: str, deployed: ClusterSpec, spec: ClusterSpec) -> bool:
    """Print one line per change from DEPLOYED (the spec the cluster was made from) to SPEC that its service refuses
    (kiln.changes.directions, the rules `kiln diff` judges templates by); return whether there was one."""
    from kiln.changes import spec_one_way_changes

    lines = spec_one_way_changes(deployed, spec)
    for line in lines:
        print(f"{path}: {line}", file=sys.stderr)
    return bool(lines)


def _group_summary(group: ComputeGroup) -> str:
    """Return GROUP as validate names it: its own name, its size, and its accelerators by the catalog's kind."""
    from kiln.catalog import instance_type

    accelerator = instance_type(group.instance_type).accelerator
    if accelerator is None:
        each = "without accelerators"
    else:
        kind = "GPU" if accelerator.kind == "gpu" else "Neuron device"
        each = f"with {accelerator.count} {accelerator.name} {kind}{'s' * (accelerator.count != 1)} each"
        if accelerator.fraction < 1:
            each += f" ({accelerator.fraction:g} of one)"
    return f"group {group.name}: up to {group.max_count}x {group.instance_type} {each}"


def _not_ready(readiness: BootReadiness) -> str:
    """Return what keeps READINESS's nodes from booting, counted: unverifiable downloads, nodes over budget."""
    parts = []
    if readiness.unverifiable:
        count = len(readiness.unverifiable)
        parts.append(f"{count} unverifiable {'download' if count == 1 else 'downloads'}")
    if readiness.over_budget:
        count = len(readiness.over_budget)
        parts.append(f"{count} {'kind' if count == 1 else 'kinds'} of node past their platform's deadline")
    return ", ".join(parts)


def _print_nodes(lines: tuple[str, ...]) -> None:
    """Print what each kind of node adopts from its image and what kiln installs, indented under the verdict."""
    for line in lines:
        print(f"  {line}")


def _schema(args: argparse.Namespace) -> int:
    from kiln.safe_output import write_file_atomically
    from kiln.spec.schema import schema_text

    text = schema_text()
    if args.out:
        write_file_atomically(args.out, text, what="kiln schema --out")
    else:
        sys.stdout.write(text)
    return 0


def _catalog_list(args: argparse.Namespace) -> int:
    from kiln.catalog import InstanceType, instance_type, known_instance_types

    def wanted(it: InstanceType) -> bool:
        if args.accelerator == "any" and it.accelerator is None:
            return False
        if args.accelerator == "none" and it.accelerator is not None:
            return False
        if args.accelerator in ("gpu", "neuron") and it.accelerator_kind != args.accelerator:
            return False
        if args.efa and not it.efa_supported:
            return False
        if args.hyperpod and not it.hyperpod:
            return False
        return not args.family or it.family in args.family

    types = [it for it in map(instance_type, known_instance_types()) if wanted(it)]
    # Family, then size, reads better than the name's string order (c5.12xlarge before c5.2xlarge).
    types.sort(key=lambda it: (it.family, it.vcpus, it.name))
    rows = [("type", "accelerators", "net cards", "EFA", "efa-only", "NVLink")]
    for it in types:
        acc = f"{it.accelerator.count}x {it.accelerator.name}" if it.accelerator else "-"
        if it.accelerator and it.accelerator.fraction < 1:
            acc += f" ({it.accelerator.fraction:g} of one)"
        nvlink = f"gen {it.nvlink_generation}" if it.nvlink_generation else "-"
        if it.nvswitch:
            nvlink += " + NVSwitch"
        rows.append(
            (
                it.name,
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
    if not types:
        print("kiln catalog list: no instance type matches these filters", file=sys.stderr)
    return 0


def _catalog_show(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from kiln.catalog import UnknownInstanceType, instance_type

    try:
        facts = instance_type(args.instance_type)
    except UnknownInstanceType as exc:
        # The catalog is node-side too, with exceptions of its own: the command's input, said as kiln says it.
        raise InputError(str(exc)) from None
    print(json.dumps(asdict(facts), indent=2))
    return 0


def _catalog_neuron(args: argparse.Namespace) -> int:
    from kiln.catalog import UnknownInstanceType, instance_type
    from kiln.catalog.neuron import default_neuron_release, known_neuron_releases, release_summary

    names = args.instance_type or []
    for name in names:
        try:
            instance_type(name)
        except UnknownInstanceType as exc:
            raise InputError(str(exc)) from None
    for version in known_neuron_releases():
        print(release_summary(version))
    for name in names:
        print(f"default for {name}: {default_neuron_release([name]) or 'none (no Neuron devices)'}")
    return 0


def _catalog_refresh(args: argparse.Namespace) -> int:
    from kiln.catalog.facts import GENERATED_PATH
    from kiln.catalog.refresh import RefreshError, refresh
    from kiln.safe_output import UnsafeOutput

    if args.source == "moto" and (args.region or args.keep_missing):
        raise InputError("--region and --keep-missing apply to --source ec2 only")
    out = args.out or GENERATED_PATH
    try:
        result = refresh(source=args.source, region=args.region, out=out, keep_missing=args.keep_missing)
    except UnsafeOutput as exc:
        # A refresh that writes nothing exits 1, a refused --out included.
        raise RefreshError(str(exc)) from None
    except OSError as exc:
        raise RefreshError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(result.summary())
    for note in result.notes:
        print(f"kiln catalog refresh: note: {note}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from kiln.node_runtime import require_node

    require_node()
    from kiln.report import run_report

    return run_report(args.files, lint=not args.no_lint, accept_unready=args.accept_unready, verbose=args.verbose)


def _accept_unready_flag(parser: argparse.ArgumentParser) -> None:
    from kiln.bootstrap.readiness import ACCEPT_UNREADY

    parser.add_argument(
        ACCEPT_UNREADY,
        action="store_true",
        help="exit 0 even when nodes would not boot (a download without a sha256); the verdict is still printed",
    )


class _CommandIndex(argparse.HelpFormatter):
    """`kiln --help`'s formatter: one line per command, its name and its help, never wrapped onto a second line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures a command's name at its section's indent but prints it one step further in, so the
        # longest names (bootstrap, preflight) would start their help on a line of its own.
        for command in self._iter_indented_subactions(action):
            width = len(self._format_action_invocation(command)) + self._current_indent
            self._action_max_length = max(self._action_max_length, width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return [" ".join(text.split())]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every kiln subcommand."""
    parser = argparse.ArgumentParser(
        prog="kiln",
        description="kiln: GPU training clusters on AWS from one typed cluster spec. Each command has its own --help.",
        formatter_class=_CommandIndex,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check spec files: one line per problem (exit 2), and whether the nodes would boot (exit 1 if not)",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument(
        "--before",
        metavar="OLD",
        help="the spec the deployed cluster was made from: also refuse, one line each (exit 2), the changes from it "
        "that a service refuses in that direction (a smaller storage.lustre.storage_gib, an older software.slurm or "
        "compute.kubernetes_version), by the rules kiln diff judges templates with",
    )
    _accept_unready_flag(validate)
    validate.set_defaults(func=_validate)

    schema = commands.add_parser("schema", help="print the spec's JSON Schema (for editor completion)")
    schema.add_argument("--out", help="write to this file instead of standard output")
    schema.set_defaults(func=_schema)

    catalog = commands.add_parser("catalog", help="instance facts kiln knows")
    catalog_commands = catalog.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    listing = catalog_commands.add_parser("list", help="one line per instance type (filters combine)")
    listing.add_argument(
        "--accelerator",
        choices=("gpu", "neuron", "any", "none"),
        help="only types with GPUs, Neuron devices, either, or none",
    )
    listing.add_argument("--efa", action="store_true", help="only types that support EFA")
    listing.add_argument("--hyperpod", action="store_true", help="only types SageMaker HyperPod offers")
    listing.add_argument(
        "--family", action="append", metavar="FAMILY", help="only this family, e.g. p5 or g6e (repeatable)"
    )
    listing.set_defaults(func=_catalog_list)
    show = catalog_commands.add_parser("show", help="every fact about one instance type")
    show.add_argument("instance_type")
    show.set_defaults(func=one_line_failures("kiln catalog show", _catalog_show))
    neuron = catalog_commands.add_parser(
        "neuron", help="the Neuron SDK releases kiln knows, and the default one for instance types"
    )
    neuron.add_argument("instance_type", nargs="*", help="print the release kiln picks for each, unpinned")
    neuron.set_defaults(func=one_line_failures("kiln catalog neuron", _catalog_neuron))
    refresh = catalog_commands.add_parser(
        "refresh",
        help="regenerate the instance facts from EC2 DescribeInstanceTypes (a live account or moto's copy)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Describe instance types, keep the ones kiln uses (every current type with a GPU, Neuron devices or\n"
            "EFA, plus every size of the head/login node families; see `selection` in curated.json), and write\n"
            "them to --out, replacing it atomically.\n\n"
            "--source ec2 (default) calls EC2 DescribeInstanceTypes, every page, in one region. It needs:\n"
            "  - AWS credentials (environment, profile, SSO or instance role, as boto3 finds them);\n"
            "  - a region (--region, or AWS_REGION / the profile's region); EC2 describes only the types\n"
            "    offered there, so pick a region that offers the types you use, or add --keep-missing;\n"
            "  - the IAM permission ec2:DescribeInstanceTypes (read-only; no resource is created).\n\n"
            "--source moto reads the DescribeInstanceTypes copy that the moto package bundles; it needs moto\n"
            "installed and nothing else (no credentials, no network). The committed catalog is produced this\n"
            "way: `kiln catalog refresh --source moto`.\n\n"
            "Any failure is one line on stderr and a non-zero exit status; nothing is written."
        ),
    )
    refresh.add_argument(
        "--source", choices=("ec2", "moto"), default="ec2", help="where the data comes from (default: ec2)"
    )
    refresh.add_argument("--region", help="the region to describe (--source ec2; default: boto3's region)")
    refresh.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep the types already in --out that the region does not describe (--source ec2)",
    )
    refresh.add_argument("--out", help="the file to write (default: kiln/catalog/data/instance_types.json)")
    refresh.set_defaults(
        func=one_line_failures("kiln catalog refresh", _catalog_refresh, otherwise="use --source moto, offline")
    )

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
    _accept_unready_flag(report)
    report.set_defaults(func=_report)

    bootstrap_cli.register(commands)
    local_cli.register(commands)
    ci_cli.register(commands)
    job_cli.register(commands)
    ami_cli.register(commands)
    preflight_cli.register(commands)
    leftovers_cli.register(commands)
    diff_cli.register(commands)
    hyperpod_cli.register(commands)
    connect_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the kiln command line and return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        # Each command group maps its errors under its own name; this names the command for any that escape.
        return int(one_line_failures(f"kiln {args.command}", args.func)(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
