"""`kiln catalog`: the instance facts kiln knows, and their refresh from EC2."""

from __future__ import annotations

import argparse
import json
import sys

from kiln.cli.errors import one_line_failures
from kiln.cli.options import aws_options
from kiln.contracts.errors import InputError


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
    from kiln.host.safe_output import UnsafeOutput

    if args.source == "moto" and (args.region or args.profile or args.keep_missing):
        raise InputError("--region, --profile and --keep-missing apply to --source ec2 only")
    out = args.out or GENERATED_PATH
    try:
        result = refresh(
            source=args.source, region=args.region, profile=args.profile, out=out, keep_missing=args.keep_missing
        )
    except UnsafeOutput as exc:
        # A refresh that writes nothing exits 1, a refused --out included.
        raise RefreshError(str(exc)) from None
    except OSError as exc:
        raise RefreshError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(result.summary())
    for note in result.notes:
        print(f"kiln catalog refresh: note: {note}", file=sys.stderr)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln catalog` and its actions to COMMANDS."""
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
            "  - a region (--region, or AWS_DEFAULT_REGION / the profile's region); EC2 describes only the types\n"
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
    aws_options(refresh, spec=False, about="the region to describe (--source ec2)")
    refresh.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep the types already in --out that the region does not describe (--source ec2)",
    )
    refresh.add_argument("--out", help="the file to write (default: kiln/catalog/data/instance_types.json)")
    refresh.set_defaults(
        func=one_line_failures("kiln catalog refresh", _catalog_refresh, otherwise="use --source moto, offline")
    )
