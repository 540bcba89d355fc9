"""`kiln hyperpod update-software --spec FILE`: rerun changed lifecycle scripts on the nodes that predate them."""

from __future__ import annotations

import argparse
from typing import Any

from kiln.cli.options import aws_options
from kiln.contracts.errors import InputError

COMMAND = "kiln hyperpod update-software"

DESCRIPTION = """\
HyperPod runs an instance group's lifecycle scripts when it provisions a node (a new group, more nodes, a node
it replaces); a deploy that changes kiln's scripts rewrites them in S3 and leaves running nodes as they are.
This command lists, per instance group, the nodes that launched (or were last updated) before the scripts in S3
were last written, and with --yes calls UpdateClusterSoftware on those groups: it reruns the scripts on every
node of each group, keeping the image the group runs.

UpdateClusterSoftware replaces each node's root volume (what is on it is lost; /fsx and S3 are not touched) and
does not drain the jobs running on the nodes: stop or requeue them first. The cluster's Slurm configuration stays
HyperPod's. Exit 0: every node is current, or the update started; 1: nodes are older and --yes was not given, or
AWS refused; 2: bad spec or arguments. Needs sagemaker:DescribeCluster, sagemaker:ListClusterNodes,
s3:ListBucket on the lifecycle bucket and, with --yes, sagemaker:UpdateClusterSoftware."""


class HyperPodInputError(InputError):
    """A spec or argument this command cannot act on; str() is one line."""


def report_lines(plan: Any) -> list[str]:
    """Return one line for the cluster and one per instance group of PLAN."""
    lines = [f"cluster {plan.cluster} ({plan.status})"]
    for group in plan.groups:
        written = group.written.strftime("%Y-%m-%dT%H:%M:%SZ")
        if group.current:
            lines.append(f"  {group.name}: current ({group.nodes} nodes; scripts {group.scripts} written {written})")
        else:
            shown = ", ".join(group.older[:5]) + (f" and {len(group.older) - 5} more" if len(group.older) > 5 else "")
            lines.append(
                f"  {group.name}: {len(group.older)} of {group.nodes} nodes booted before the scripts in "
                f"{group.scripts} were written ({written}): {shown}"
            )
    return lines


def _update_software(args: argparse.Namespace) -> int:
    from kiln.aws.session import aws_session
    from kiln.catalog.platforms import service_fact
    from kiln.hyperpod.software import plan_update, start_update, update_request
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    if spec.compute.backend != "hyperpod":
        raise HyperPodInputError(f"the spec's backend is {spec.compute.backend}: this command is for hyperpod")
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    region = session.region_name
    sagemaker = session.client("sagemaker", region_name=region)
    s3 = session.client("s3", region_name=region)
    plan = plan_update(sagemaker, s3, spec.name, region, only=tuple(args.group))
    for line in report_lines(plan):
        print(line)
    if not plan.to_update:
        print(f"{COMMAND}: every node runs the lifecycle scripts in S3: nothing to do")
        return 0
    request = update_request(plan)
    names = ", ".join(g["InstanceGroupName"] for g in request["InstanceGroups"])
    image = request.get("ImageId", "HyperPod's newest image")
    source = service_fact("hyperpod", "update_software").source
    if not args.yes:
        print(
            f"{COMMAND}: UpdateClusterSoftware would rerun the scripts on every node of {names} (image {image}); "
            f"it replaces each node's root volume and does not drain running jobs ({source}): stop or requeue them, "
            "then run again with --yes"
        )
        return 1
    arn = start_update(sagemaker, plan)
    print(
        f"{COMMAND}: started UpdateClusterSoftware on {names} of {arn} (image {image}); follow it with `aws "
        f"sagemaker describe-cluster --cluster-name {spec.name} --region {region} --query "
        "'InstanceGroups[].[InstanceGroupName,SoftwareUpdateStatus]'`"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    """Run the command with every expected failure as one line on stderr, never a traceback."""
    from kiln.cli.errors import one_line_failures

    return one_line_failures(COMMAND, _update_software)(args)


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln hyperpod` to the kiln command line."""
    hyperpod = commands.add_parser("hyperpod", help="day-two operations on a deployed SageMaker HyperPod cluster")
    actions = hyperpod.add_subparsers(dest="hyperpod_command", required=True, metavar="ACTION")
    update = actions.add_parser(
        "update-software",
        help="list nodes older than the lifecycle scripts in S3; with --yes rerun them (UpdateClusterSoftware)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    update.add_argument("--spec", required=True, metavar="FILE", help="the cluster's spec")
    aws_options(update, spec=True)
    update.add_argument(
        "--group", action="append", default=[], metavar="NAME", help="only this instance group (repeatable)"
    )
    update.add_argument("--yes", action="store_true", help="start UpdateClusterSoftware on the groups listed")
    update.set_defaults(func=_run)
