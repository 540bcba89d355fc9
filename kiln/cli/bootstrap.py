"""`kiln bootstrap ...`: render what a node of one target runs."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from kiln.bootstrap.config import TARGETS
from kiln.bootstrap.local_target import LocalCluster
from kiln.bootstrap.render import render_bundle
from kiln.cli.errors import one_line_failures
from kiln.contracts.errors import EXIT_INPUT


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bootstrap` command group to SUBPARSERS."""
    bootstrap = subparsers.add_parser("bootstrap", help="node bootstrap bundles")
    commands = bootstrap.add_subparsers(dest="bootstrap_command", required=True)
    render = commands.add_parser("render", help="write exactly what a node of a target would run")
    render.add_argument("--spec", required=True, help="cluster spec (YAML)")
    render.add_argument("--target", required=True, choices=TARGETS)
    render.add_argument("--out", required=True, help="directory to write the bundle to (replaced)")
    render.add_argument(
        "--local-prefix",
        default="/var/lib/kiln-local",
        help="local target: where all cluster state lives (default: %(default)s)",
    )
    render.add_argument("--local-nodes", type=int, default=2, help="local target: node count (default: 2)")
    render.add_argument(
        "--local-subnet",
        default="10.77.0.0/24",
        help="local target: controller gets the first address, nodes the next (default: %(default)s)",
    )
    # A file the bundle cannot be read from or written to is the command's input too: exit 2.
    render.set_defaults(func=one_line_failures("kiln bootstrap render", run_render, os_error_exit=EXIT_INPUT))
    lock = commands.add_parser(
        "lock",
        help="download once the files whose publisher gives no digest and write their sha256 to the spec's lock file",
    )
    lock.add_argument("--spec", required=True, help="cluster spec (YAML) whose software.lock_file to write")
    lock.add_argument(
        "--refresh",
        action="store_true",
        help="download every locked file again and stop if any digest changed (default: keep locked entries)",
    )
    lock.set_defaults(func=one_line_failures("kiln bootstrap lock", run_lock))


def role_summary(bundle_dir: Path) -> list[str]:
    """Describe which steps of the rendered bundle behave differently per node role."""
    from kiln.catalog.envfile import parse_env_file

    steps = sorted(bundle_dir.glob("steps/*.sh"))
    by_role = [p for p in steps if p.stem != "node_context" and "KILN_NODE_ROLE" in p.read_text()]
    env = (bundle_dir / "bundle.env").read_text()
    values = parse_env_file(env, source=str(bundle_dir / "bundle.env"))
    # The user's own steps (bootstrap.steps): each runs on the roles bundle.env lists for it.
    user_steps = [
        f"  user_{path.name}: your step ({values[f'KILN_USER_STEP_{path.name.upper()}_PHASE']}), on "
        f"{values[f'KILN_USER_STEP_{path.name.upper()}_ROLES'].replace(' ', ', ')} nodes: see "
        f"{path.relative_to(bundle_dir)}"
        for path in sorted(bundle_dir.glob("user-steps/*"))
    ]
    if not by_role and not user_steps:
        return ["every node runs the same steps (no role-specific behaviour)"]
    lines = ["steps whose work depends on the node role (controller, login, worker):"]
    lines += [f"  {p.stem}: see {p.relative_to(bundle_dir)}" for p in by_role] + user_steps
    if "KILN_TARGET='hyperpod'" in env:
        groups = dict(line.split("=", 1) for line in env.splitlines() if line.startswith("KILN_HYPERPOD_"))
        lines.append(
            f"roles: instance group {groups['KILN_HYPERPOD_CONTROLLER_GROUP']} -> controller, "
            f"{groups.get('KILN_HYPERPOD_LOGIN_GROUP', 'none')} -> login, any other group -> worker"
        )
    return lines


def run_render(args: argparse.Namespace) -> int:
    """Render the bundle for --target from --spec into --out; return the exit code."""
    from kiln.node_config.judge import lock_remedy
    from kiln.node_config.translate import config_from_spec
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    local = None
    if args.target == "local":
        local = LocalCluster.from_subnet(spec.name, args.local_prefix, args.local_nodes, args.local_subnet)
    bundle = render_bundle(config_from_spec(spec, args.target, local=local), args.out)
    print(f"{bundle.directory}/{bundle.entry_point}")
    for line in role_summary(bundle.directory):
        print(line, file=sys.stderr)
    readiness = dataclasses.replace(bundle.readiness, remedy=lock_remedy(spec, args.spec))
    for reason in readiness.reasons():
        print(f"warning: {reason}", file=sys.stderr)
    return 0


def run_lock(args: argparse.Namespace) -> int:
    """Write the lock file of --spec: 0 written, 1 a download failed or a digest changed, 2 bad spec or lock."""
    from kiln.bootstrap.artifacts import lockable_artifacts
    from kiln.bootstrap.lock import lock_text, plan_lock, read_lock
    from kiln.host.safe_output import write_file_atomically
    from kiln.node_config.judge import lock_remedy
    from kiln.node_config.translate import config_from_spec
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    path = spec.lock_path
    if path is None:
        print(f"{args.spec}: software.lock_file: not set; {lock_remedy(spec, args.spec)}", file=sys.stderr)
        return 2
    existing = read_lock(path) if path.exists() else ()
    needed = lockable_artifacts(config_from_spec(spec))
    plan = plan_lock(needed, existing, refresh=args.refresh)
    write_file_atomically(path, lock_text(plan.entries), what="lock file")
    for note in plan.notes:
        print(note, file=sys.stderr)
    print(path)
    return 0
