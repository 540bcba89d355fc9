"""``kiln-launch health``: is this node fit to train? Fast, for Slurm's HealthCheckProgram and by hand.

    kiln-launch health [--json] [--drain] [--node NAME] [--timeout S] [--root DIR] [--min-free-gib G]

Node health
-----------
One line per check on stdout, in a stable format::

    <STATUS> <check>: <detail>

STATUS is ``ok``, ``FAIL`` or ``n/a`` (nothing to check here: the node's instance type has no such hardware, the
type is unknown to the catalog, or the node is a local cluster's). A check on a machine without the hardware is n/a,
never ok. The checks, in this order:

- ``gpus``: the GPUs ``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader`` lists against the catalog's
  count for the instance type (never counted through torch: this program imports no torch).
- ``gpu-errors``: per GPU, uncorrectable ECC errors since the driver loaded (volatile), a page pending retirement
  (``nvidia-smi --query-gpu``), a failed row remapping (``nvidia-smi --query-remapped-rows``; GPUs older than Ampere
  report none, which is said, not failed); the lifetime (aggregate) count is shown, not judged, as a reset remaps the
  rows it counts. A pending row remapping is not judged either: NVIDIA lets work go on until the next reset.
- ``gpu-xid``: no fatal Xid in the kernel log since boot (``/dev/kmsg``), fatal as NVIDIA's Xid catalog's immediate
  action says (platforms.json ``services.nvidia.fatal_xids``, with its source); reading it needs root (n/a for
  another user; slurmd and kiln's timer run it as root).
- ``neuron``: the Neuron devices ``neuron-ls --json-output`` lists against the catalog's count.
- ``efa``: the EFA devices in /sys/class/infiniband against the catalog's EFA interface count, and libfabric's efa
  provider listed by ``fi_info -p efa`` (kiln.launcher.efa).
- ``nccl-plugin``: the aws-ofi-nccl plugin where a GPU node reaches EFA through NCCL (n/a on Neuron and CPU types).
- ``shared-fs``: where the bootstrap mounted FSx for Lustre (KILN_LUSTRE_MOUNT in launcher.env), that mount point is
  a lustre mount (/proc/self/mounts) and answers; the checkpoint root (--checkpoint-dir, KILN_CHECKPOINT_DIR, else
  /fsx/checkpoints) answers a stat and a directory read (before the first checkpoint: its parent directory).
- ``container-space``: free space where containers go (the image cache configure_container_storage records in
  /etc/kiln/container-cache, on the NVMe enroot's storage is on; else /var/lib/containerd or /var/lib/docker; on a
  local cluster's node its /scratch) against --min-free-gib (default 20 GiB, room to import one more training image;
  1 GiB on a local cluster's node). The line names the path and the floor.

Time: Slurm kills a HealthCheckProgram after 60 s (platforms.json ``services.slurm.health_check_program``). Every
tool and every look at a file system runs in a child with a deadline (--timeout S each, default 5) that holds even
when the child is stuck in the kernel (kiln.launcher.bounded), and all of them together stop at a budget that leaves
room for scontrol, so the program ends well within Slurm's limit; a check that did not answer is a FAIL naming what
did not answer. A tool that did not answer once (nvidia-smi) is not asked again in the same run.

Configuration: slurmd runs the program as root with an almost empty environment, so it finds the node's settings
itself under the node's root (--root DIR, else $KILN_ROOT, else /): the variables of ``/etc/kiln/launcher.env``
(KILN_CHECKPOINT_DIR, KILN_LUSTRE_MOUNT) where the environment lacks them, and the instance type from
KILN_INSTANCE_TYPE, ``/etc/kiln/instance-type``, else IMDSv2.

``--json`` prints one JSON object instead: ``checks`` (a list of {check, status, detail}), ``healthy``, ``node``,
``instance_type``, ``elapsed_s``, and ``slurm`` (what --drain did: {action, ok, detail}, or null).

``--drain`` (a Slurm node): when a check FAILs, set this node DRAIN with the first FAIL line as the reason,
``kiln-health: <check>: <detail>`` (one line, at most 200 characters, passed to scontrol as an argument, never
through a shell), unless someone else already drained it (their reason is kept); when every check passes and the
node is drained with a reason kiln-launch health set, resume it, and never a drain a person or another tool set.
The node is --node NAME, else $SLURMD_NODENAME, else the short host name; scontrol honours SLURM_CONF. What
scontrol did (or that it is not on PATH) goes to stderr in one line (with --json: the object's ``slurm``); the exit
code stays the health verdict. Then, where the platform must be told to replace a drained node
(KILN_NODE_REPLACEMENT=hyperpod, set by the bootstrap on HyperPod with node recovery on), a node kiln drained that
runs no job is handed over (kiln.launcher.replacement); the JSON's ``replacement`` says what was done, or null.

Exit codes: 0 healthy (no FAIL), 1 unhealthy (a FAIL; also a launcher.env line that is not shell-quoted, in one line
on stderr), 2 usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kiln.catalog.platforms import service_fact
from kiln.launcher import health_checks, health_gpu, health_storage, health_verdict, imds, replacement, slurm_node
from kiln.launcher.arguments import SubcommandParser
from kiln.launcher.container import launcher_setting
from kiln.launcher.errors import UsageError
from kiln.launcher.health_checks import FAIL, LOCAL, Budget, Node, Result
from kiln.launcher.health_verdict import HealthVerdict
from kiln.launcher.paths import checkpoint_dir

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1
REASON_PREFIX = "kiln-health: "
# The checks, in the order they run and print.
NAMES = ("gpus", "gpu-errors", "gpu-xid", "neuron", "efa", "nccl-plugin", "shared-fs", "container-space")
DEFAULT_TIMEOUT_S = 5.0
# Searched after PATH, which slurmd does not set for its HealthCheckProgram.
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What the checks leave of Slurm's limit: scontrol's show and update (slurm_node.TIMEOUT_S each), and Python's start.
STARTUP_S = 5.0


def _seconds(text: str) -> float:
    return _number(text, "a positive number of seconds", lambda value: value > 0)


def _gib(text: str) -> float:
    return _number(text, "a non-negative number of GiB", lambda value: value >= 0)


def _number(text: str, what: str, good: Callable[[float], bool]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or value != value or not good(value) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected {what} (got {text!r})")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the health subcommand's parser."""
    parser = SubcommandParser(
        subcommand="health", prog="kiln-launch health", description="Node health check (kiln.launcher.health)."
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a line per check")
    parser.add_argument("--drain", action="store_true", help="drain this Slurm node on a FAIL; resume kiln's drain")
    parser.add_argument("--node", help="this node's Slurm name (default: $SLURMD_NODENAME, else the short host name)")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds each tool or file system look may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument("--root", help="the node's root, where its /etc/kiln is (default: $KILN_ROOT, else /)")
    parser.add_argument(
        "--min-free-gib",
        type=_gib,
        metavar="G",
        help=f"free space containers need (default {health_storage.MIN_FREE_GIB:g}; "
        f"{health_storage.LOCAL_MIN_FREE_GIB:g} on a local cluster's node)",
    )
    return parser


def run(argv: list[str], *, started: float, checkpoint_flag: str | None = None) -> int:
    """Run the checks for ARGV (the program started at STARTED, time.time()), print the report, drain or resume as
    asked; return the exit code."""
    begun = time.monotonic() - max(0.0, time.time() - started)
    args = build_parser().parse_args(argv)
    root = Path(args.root or os.environ.get("KILN_ROOT") or "/")
    if not root.is_dir():
        raise UsageError(f"health: --root: {root} is not a directory")
    node = describe(os.environ, root, args, started=begun, checkpoint_flag=checkpoint_flag)
    results = check(node)
    healthy = not any(result.status == FAIL for result in results)
    name = slurm_node.node_name(args.node, os.environ)
    action = _slurm(name, results, healthy, node.environ) if args.drain else None
    if args.drain:
        _keep_verdict(root, name, results, healthy, action)
    handed = replacement.hand_over(name, node.environ) if args.drain else None
    report = {
        "checks": [asdict(result) for result in results],
        "healthy": healthy,
        "node": name,
        "instance_type": node.instance_name,
        "elapsed_s": round(time.monotonic() - begun, 3),
        "slurm": action,
        "replacement": handed,
    }
    print(json.dumps(report, indent=2) if args.json else render(results))
    if not args.json:
        for done in (action, handed):
            if done is not None:
                print(f"kiln-launch health: {done['detail']}", file=sys.stderr)
    return EXIT_HEALTHY if healthy else EXIT_UNHEALTHY


def _keep_verdict(root: Path, node: str, results: list[Result], healthy: bool, action: dict | None) -> None:
    """Leave this run's verdict where a running job's launcher looks (kiln.launcher.health_verdict)."""
    failures = tuple(f"{result.check}: {result.detail}" for result in results if result.status == FAIL)
    verdict = HealthVerdict(
        node=node, healthy=healthy, failures=failures, checked_at=time.time(), drain=(action or {}).get("detail", "")
    )
    try:
        health_verdict.write(root, verdict)
    except OSError as error:
        print(f"kiln-launch health: cannot keep the verdict for running jobs: {error}", file=sys.stderr)


def describe(
    environ: Mapping[str, str], root: Path, args: argparse.Namespace, *, started: float, checkpoint_flag: str | None
) -> Node:
    """Gather what the checks judge this node against (STARTED: time.monotonic() when the program started)."""
    rooted = {**environ, "KILN_ROOT": str(root)}
    settings = {name: launcher_setting(name, rooted) for name in ("KILN_CHECKPOINT_DIR", "KILN_LUSTRE_MOUNT")}
    path = [d for d in environ.get("PATH", "").split(os.pathsep) if d]
    search = {**environ, "PATH": os.pathsep.join(dict.fromkeys(path + list(SYSTEM_DIRS)))}
    found = imds.lookup(rooted)
    if found.name == LOCAL:
        instance, why = None, None
    else:
        instance, why = imds.catalog_entry(found.name)
    limit = service_fact("slurm", "health_check_program").value["kill_after_s"]
    budget_s = max(limit - STARTUP_S - 2 * slurm_node.TIMEOUT_S, DEFAULT_TIMEOUT_S)
    return Node(
        root=root,
        environ=search,
        instance_name=found.name,
        instance=instance,
        why_unknown=why or found.note,
        checkpoint_dir=str(checkpoint_dir({k: v for k, v in settings.items() if v}, checkpoint_flag)),
        lustre_mount=settings["KILN_LUSTRE_MOUNT"],
        min_free_gib=args.min_free_gib,
        budget=Budget(per_check_s=args.timeout, deadline=started + budget_s),
    )


def check(node: Node) -> list[Result]:
    """Run every check on NODE, in the documented order."""
    # fi_info runs once for both EFA checks (inside their guard: a failure is their FAIL line).
    stack = functools.cache(lambda: health_checks.efa_stack(node))
    checks = (
        lambda: health_gpu.gpus(node),
        lambda: health_gpu.gpu_errors(node),
        lambda: health_gpu.gpu_xid(node),
        lambda: health_checks.neuron_devices(node),
        lambda: health_checks.efa_devices(node, stack()),
        lambda: health_checks.nccl_plugin(node, stack()),
        lambda: health_storage.shared_fs(node),
        lambda: health_storage.container_space(node),
    )
    return [_guarded(name, one) for name, one in zip(NAMES, checks, strict=True)]


def _guarded(name: str, one: Callable[[], Result]) -> Result:
    # A tool's answer of a shape no check foresaw is that check's FAIL, in one line, never a traceback.
    try:
        return one()
    except Exception as error:  # noqa: BLE001
        return Result(check=name, status=FAIL, detail=f"the check could not judge this node: {error!r}"[:300])


def render(results: list[Result]) -> str:
    """Return the report: one `<status> <check>: <detail>` line per check."""
    return "\n".join(f"{result.status} {result.check}: {result.detail}" for result in results)


def _slurm(node: str, results: list[Result], healthy: bool, environ: Mapping[str, str]) -> dict[str, Any]:
    """Drain NODE on a FAIL, resume it when healthy and drained by this program; return what was done."""
    if shutil.which("scontrol", path=environ.get("PATH", "")) is None:
        detail = f"scontrol is not on PATH (not a Slurm node?): node {node} left as it is"
        return {"action": "none", "ok": False, "detail": detail}
    reason = slurm_node.drain_reason(node, environ)
    ours = (reason or "").startswith(REASON_PREFIX.rstrip())
    if healthy:
        if reason is None:
            return {"action": "none", "ok": False, "detail": f"scontrol show node {node} gave no answer"}
        if not ours:
            return {"action": "none", "ok": True, "detail": f"node {node} is healthy; no drain of kiln's to resume"}
        done = slurm_node.resume(node, environ)
        said = f"resumed node {node} (drained by kiln-launch health: {reason})" if done.ok else done.detail
        return {"action": "resume", "ok": done.ok, "detail": said}
    if reason and not ours:
        detail = f"node {node} is already drained by someone else ({reason}): left as it is"
        return {"action": "none", "ok": True, "detail": detail}
    # A drain of our own is renewed with today's first FAIL; without an answer from show, drain all the same.
    first = next(result for result in results if result.status == FAIL)
    line = slurm_node.clean_reason(f"{REASON_PREFIX}{first.check}: {first.detail}")
    done = slurm_node.drain(node, line, environ)
    return {"action": "drain", "ok": done.ok, "detail": f"drained node {node}: {line}" if done.ok else done.detail}
