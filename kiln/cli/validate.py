"""`kiln validate`: check spec files, one line per problem, and whether their nodes would boot."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kiln.cli.options import accept_unready_flag
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
        # What keeps training going here: the checks, what replaces a node, how jobs resume (kiln.catalog.resilience).
        details = (*zones.lines, _resilience_line(spec), *readiness.nodes, *readiness.budget)
        for warning in (*readiness.tight_budget, *readiness.beta):
            print(f"{path}: {warning}", file=sys.stderr)
        if readiness.ready:
            print(f"{path}: ok ({summary}); boot-ready")
            _print_nodes(details)
            continue
        for reason in readiness.reasons():
            print(f"{path}: {reason}", file=sys.stderr)
        verdict = f"{path}: valid ({summary}) but NOT boot-ready: {_not_ready(readiness)}"
        if args.accept_unready:
            print(f"{verdict}, accepted by {ACCEPT_UNREADY}")
        else:
            print(verdict)
            worst = max(worst, 1)
        _print_nodes(details)
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


def _resilience_line(spec: ClusterSpec) -> str:
    """Return, in one line, which checks run on SPEC's nodes, what replaces a node and how its jobs resume."""
    from kiln.catalog.resilience import resilience_summary

    return f"resilience: {resilience_summary(spec.platform.name, spec.resilience).line()}"


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


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln validate` to COMMANDS."""
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
    accept_unready_flag(validate)
    validate.set_defaults(func=_validate)
