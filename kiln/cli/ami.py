"""`kiln ami`: the node images EC2 Image Builder bakes for a spec with compute.image.bake.

  build  run the pipeline of the spec's image stack (<name>-image) once and wait for its AMI
  list   the AMIs kiln baked in a region, newest first, with their pinned versions and the one each cluster uses

The image stack's distribution writes the newest AMI id to the SSM parameter /kiln/<name>/image-id; the compute
stack reads it at each deploy, so a new AMI reaches the nodes at the next deploy of the compute stack.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kiln.cli.options import aws_options
from kiln.contracts.errors import InputError

DEFAULT_TIMEOUT_MIN = 240.0
# A build takes tens of minutes; a look every half minute is plenty and far below GetImage's rate limit.
DEFAULT_POLL_S = 30.0


class AmiInputError(InputError):
    """Input kiln cannot act on (a spec that does not bake); str() is one line."""


def _clock() -> float:
    return time.monotonic()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _reporter(action: str) -> Callable[[str], None]:
    """Return a function that prints one line on stderr, prefixed with the command."""

    def report(message: str) -> None:
        print(f"kiln ami {action}: {message}", file=sys.stderr, flush=True)

    return report


def _baking_spec(path: str) -> Any:
    """Load and validate the spec at PATH; AmiInputError when it does not bake an image."""
    from kiln.spec import load_spec

    spec = load_spec(path)
    if not spec.compute.image.bake:
        raise AmiInputError(
            f"{path}: compute.image.bake is not true, so {spec.name} has no image pipeline to run: "
            "set it (and deploy the image stack) to bake an AMI"
        )
    return spec


def _build(args: argparse.Namespace) -> int:
    from kiln.ami.build import find_pipeline_arn, start_build, wait_for_image
    from kiln.aws.session import aws_session
    from kiln.contracts.environment import stack_name
    from kiln.contracts.image import image_parameter_name

    spec = _baking_spec(args.spec)
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    report = _reporter("build")
    pipeline = find_pipeline_arn(
        session.client("cloudformation"), cluster=spec.name, region=session.region_name, spec_path=args.spec
    )
    imagebuilder = session.client("imagebuilder")
    arn = start_build(imagebuilder, pipeline, client_token=str(uuid.uuid4()))
    report(f"started {arn}")
    if args.no_wait:
        print(json.dumps({"image_build_version_arn": arn}, indent=2) if args.json else arn)
        return 0
    outcome = wait_for_image(
        imagebuilder,
        arn,
        timeout_s=args.timeout * 60,
        poll_s=args.poll_seconds,
        progress=report,
        clock=_clock,
        sleep=_sleep,
    )
    report(outcome.summary())
    if outcome.succeeded:
        report(
            f"{image_parameter_name(spec.name)} names the newest AMI; "
            f"deploy {stack_name(spec.name, 'compute')} for its nodes to boot it"
        )
    if args.json:
        print(json.dumps(outcome.as_json(), indent=2))
    elif outcome.succeeded:
        print(" ".join(ami.image_id for ami in outcome.amis))
    return 0 if outcome.succeeded else 1


def _list(args: argparse.Namespace) -> int:
    from kiln.ami.listing import as_json, find_images, images_in_use, table_lines, unlisted_in_use
    from kiln.aws.session import aws_session
    from kiln.spec import load_spec

    spec = load_spec(args.spec) if args.spec else None
    cluster = spec.name if spec else args.cluster
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    report = _reporter("list")
    images = find_images(session.client("ec2"), cluster)
    clusters = {image.cluster for image in images if image.cluster} | ({cluster} if cluster else set())
    in_use, notes = images_in_use(session.client("ssm"), clusters)
    for note in [*notes, *unlisted_in_use(images, in_use)]:
        report(f"note: {note}")
    if args.json:
        print(json.dumps(as_json(images, in_use), indent=2))
    elif images:
        print("\n".join(table_lines(images, in_use)))
    else:
        report(f"no AMIs kiln baked{f' for {cluster}' if cluster else ''} in {session.region_name}")
    return 0


def _handled(action: str, handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap HANDLER so every expected failure is one line on stderr, never a traceback."""
    from kiln.cli.errors import one_line_failures

    return one_line_failures(f"kiln ami {action}", handler)


def _positive(text: str) -> float:
    """Parse a number greater than zero (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `ami` command group to SUBPARSERS."""
    ami = subparsers.add_parser(
        "ami",
        help="baked node images: run the image pipeline (build), list the AMIs (list)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = ami.add_subparsers(dest="ami_command", required=True, metavar="ACTION")

    build = commands.add_parser("build", help="run the spec's image pipeline once and wait for the AMI")
    build.add_argument("--spec", required=True, help="the cluster spec (with compute.image.bake: true)")
    aws_options(build, spec=True)
    build.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT_MIN,
        metavar="MINUTES",
        help="stop waiting after this long; the build goes on in AWS (default: %(default)g)",
    )
    build.add_argument(
        "--poll-seconds",
        type=_positive,
        default=DEFAULT_POLL_S,
        metavar="N",
        help="seconds between two looks at the build (default: %(default)g)",
    )
    build.add_argument("--no-wait", action="store_true", help="print the image build version ARN and return")
    build.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    build.set_defaults(func=_handled("build", _build))

    listing = commands.add_parser("list", help="the AMIs kiln baked, newest first, with their pinned versions")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("--spec", help="only the AMIs of this spec's cluster")
    which.add_argument("--cluster", metavar="NAME", help="only the AMIs of this cluster (default: every cluster)")
    aws_options(listing, spec=True)
    listing.add_argument("--json", action="store_true", help="a list of objects with every tag")
    listing.set_defaults(func=_handled("list", _list))
