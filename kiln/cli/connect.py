"""`kiln connect --spec FILE [--vscode]`: a shell on the cluster's login node, or code-server on this machine."""

from __future__ import annotations

import argparse
import sys

from kiln.cli.options import aws_options

COMMAND = "kiln connect"

DESCRIPTION = """\
Without --vscode: a Session Manager shell on the node you log in to, on this terminal (`aws ssm start-session`):
  PCS                 a login node
  ParallelCluster     a login node, or the head node when the spec has no login nodes
  HyperPod (Slurm)    a node of the login instance group, or the controller when the spec has no login nodes
  EKS, HyperPod (EKS) none: use kubectl
With --vscode: code-server (the spec's code_server section) on that node, forwarded to http://127.0.0.1:N/ here
(--local-port N, default 8080) until Ctrl-C; on EKS `kubectl port-forward` to its pod. kiln prints the URL and
where code-server's password is. Nothing listens beyond 127.0.0.1 and no security group opens a port.

The cluster is the spec's deployed one: its stack <name>-compute in the spec's region. --node picks a node by its
instance id (EC2's, or HyperPod's) among the running ones; default: the oldest.

Needs the AWS CLI v2 and the Session Manager plugin on PATH (kubectl too on EKS), and the IAM permissions in the
README's "Develop interactively". Exit: the shell's own code; 0 after Ctrl-C ends a forward; 1 when AWS refused,
the cluster is not there or not running yet, or a program is missing; 2 for a bad spec or argument."""


def _port(text: str) -> int:
    """Return TEXT as a TCP port number, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port number is 1-65535, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port number is 1-65535, got {port}")
    return port


def _connect(args: argparse.Namespace) -> int:
    from kiln.aws.session import aws_session
    from kiln.catalog.code_server import CODE_SERVER_PORT
    from kiln.connect.run import ConnectInputError, Request, connect, prepare
    from kiln.spec import load_spec

    if args.local_port is not None and not args.vscode:
        raise ConnectInputError("--local-port: only --vscode forwards a port; leave it out for a shell")
    spec = load_spec(args.spec)
    request = Request(
        spec_path=args.spec,
        vscode=args.vscode,
        node=args.node,
        region=args.region,
        profile=args.profile,
        local_port=args.local_port or CODE_SERVER_PORT,
    )
    place = prepare(spec, request)
    session = aws_session(region=args.region, profile=args.profile, spec=spec)
    return connect(spec, request, place, session, out=sys.stdout, err=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    """Run kiln connect with every expected failure as one line on stderr, never a traceback."""
    from kiln.cli.errors import one_line_failures

    return one_line_failures(COMMAND, _connect)(args)


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln connect` to the kiln command line."""
    parser = commands.add_parser(
        "connect",
        help="a shell on the cluster's login node, or code-server here with --vscode (Session Manager)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, metavar="FILE", help="the cluster's spec")
    parser.add_argument(
        "--vscode", action="store_true", help="forward code-server to this machine instead of opening a shell"
    )
    parser.add_argument(
        "--node", metavar="ID", help="this node (its EC2 or HyperPod instance id) of the running ones; default: oldest"
    )
    aws_options(parser, spec=True)
    parser.add_argument(
        "--local-port", type=_port, metavar="N", help="--vscode: the port on 127.0.0.1 here (default: 8080)"
    )
    parser.set_defaults(func=_run)
