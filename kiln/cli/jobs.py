"""`kiln job submit`: a training script as a PyTorchJob on the spec's EKS cluster; written, and applied when asked.

The options follow TorchX's `dist.ddp` where they mean the same: `-j NODESxPROCS`, `--image`, `--name`, `--env`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from kiln.cli.errors import one_line_failures
from kiln.jobs.pytorchjob import (
    JOB_NAME,
    JOB_NAME_RULE,
    JobError,
    JobRequest,
    cluster_facts,
    default_image_note,
    job_manifests,
    launcher_wheel,
    owned_by,
    resume_line,
    to_yaml,
)
from kiln.spec.yaml_source import special_file_kind

# TorchX's -j: NODES, or NODESxPROCS_PER_NODE.
NODES_BY_PROCS = re.compile(r"([1-9][0-9]*)(?:x([1-9][0-9]*))?")
KUBECTL_TIMEOUT_S = 120
# --max-restarts becomes the PyTorchJob's runPolicy.backoffLimit, an int32 (kubeflow/trainer v1.9.3,
# https://github.com/kubeflow/trainer/blob/v1.9.3/pkg/apis/kubeflow.org/v1/common_types.go, RunPolicy.BackoffLimit
# *int32), and kiln-launch's own restart count: 0 (no restart) up to int32's largest value.
MAX_RESTARTS_MAX = 2**31 - 1
# Why a job name is the shape it is (kiln.jobs.pytorchjob.JOB_NAME): the operator names the job's Services
# <job>-master-0 and <job>-worker-N, and a Service's name is a Kubernetes DNS-1035 label
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#rfc-1035-label-names).
JOB_NAME_WHY = "a job name is a Kubernetes DNS-1035 label the operator's pod and Service names are built from"


def _pairs(values: list[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep:
            raise JobError(f"--env: got {value!r}; allowed: NAME=VALUE")
        pairs[name] = text
    return pairs


def _name_fault(name: str) -> str:
    """Return what is wrong with job name NAME, which JOB_NAME refuses, in a few words."""
    bad = sorted({char for char in name if not re.fullmatch(r"[-a-z0-9]", char)})
    if bad:
        return "which holds " + " ".join(repr(char) for char in bad)
    if not name:
        return "which is empty"
    if not name[0].isalpha():
        return "which does not start with a letter"
    if name.endswith("-"):
        return "which ends in '-'"
    return f"which is {len(name)} characters long"


def _check_script(script: Path) -> None:
    """Refuse SCRIPT unless it is a regular file (following symlinks), saying what it is: a FIFO or a device would
    block or act when read, and is no script."""
    if "\0" in str(script):
        raise JobError(f"{script!s}: the path holds a NUL character (the training script)")
    try:
        mode = script.stat().st_mode
    except FileNotFoundError:
        raise JobError(f"{script}: no such file (the training script)") from None
    except OSError as error:
        raise JobError(f"{script}: cannot be read ({error.strerror}) (the training script)") from None
    if kind := special_file_kind(mode):
        raise JobError(f"{script}: is {kind}, not a file; give the training script itself")


def _request(args: argparse.Namespace) -> JobRequest:
    if args.script[:1] == ["--"]:
        args.script = args.script[1:]
    if not args.script:
        raise JobError("no training script: give it after --, as in `kiln job submit --spec FILE -- train.py`")
    nodes, procs = args.nodes, None
    if args.j is not None:
        shape = NODES_BY_PROCS.fullmatch(args.j)
        if shape is None:
            raise JobError(f"-j: got {args.j!r}; allowed: NODES or NODESxPROCS_PER_NODE, such as 2x8")
        nodes, procs = int(shape.group(1)), int(shape.group(2)) if shape.group(2) else None
    script = Path(args.script[0])
    _check_script(script)
    if not 0 <= args.max_restarts <= MAX_RESTARTS_MAX:
        raise JobError(
            f"--max-restarts: got {args.max_restarts}; allowed: 0 to {MAX_RESTARTS_MAX} (the PyTorchJob's "
            "backoffLimit is an int32)"
        )
    if args.name is not None and not JOB_NAME.fullmatch(args.name):
        raise JobError(f"--name: got {args.name!r}, {_name_fault(args.name)}; {JOB_NAME_WHY}: {JOB_NAME_RULE}")
    name = args.name or re.sub(r"[^a-z0-9-]", "-", script.stem.lower()).strip("-")
    if not JOB_NAME.fullmatch(name):
        raise JobError(f"--name: the script's name gives {name!r}, not a job name; give --name")
    return JobRequest(
        script=script,
        args=tuple(args.script[1:]),
        image=args.image,
        name=name,
        group=args.group,
        nodes=nodes,
        nproc_per_node=procs,
        max_restarts=args.max_restarts,
        env=_pairs(args.env),
        allow_tcp=args.allow_tcp,
        precompile=args.precompile,
    )


def _kubectl(kubeconfig: str, *arguments: str, stdin: str) -> dict[str, Any]:
    """Run kubectl against KUBECONFIG with STDIN; return its JSON output, JobError on failure."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise JobError("kubectl is not on PATH: install it to apply the job, or drop --kubeconfig and apply the file")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    try:
        done = subprocess.run(
            [kubectl, *arguments],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise JobError(f"kubectl {arguments[0]} did not finish within {KUBECTL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
        raise JobError(f"kubectl {arguments[0]} failed: {said.strip()}")
    return json.loads(done.stdout or "{}")


def apply(objects: list[dict[str, Any]], kubeconfig: str) -> dict[str, Any]:
    """Apply the job, then its files owned by it (so deleting the job deletes them); return the applied job."""
    files, job = objects
    applied = _kubectl(kubeconfig, "apply", "--server-side", "-o", "json", "-f", "-", stdin=json.dumps(job))
    _kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "-o",
        "json",
        "-f",
        "-",
        stdin=json.dumps(owned_by(files, applied)),
    )
    return applied


def _submit(args: argparse.Namespace) -> int:
    from kiln.host.safe_output import write_file_atomically
    from kiln.spec import load_spec

    spec = load_spec(args.spec)
    cluster = cluster_facts(spec)
    request = _request(args)
    objects = job_manifests(request, cluster, launcher_wheel())
    _, job = objects
    if args.image is None:
        image = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
        print(f"kiln job submit: --image not given: using {image}, {default_image_note(cluster)}", file=sys.stderr)
    if args.out:
        write_file_atomically(args.out, to_yaml(objects), what="the job's manifests")
        print(f"kiln job submit: wrote {args.out} (PyTorchJob {job['metadata']['name']} and its files)")
    if args.kubeconfig:
        applied = apply(objects, args.kubeconfig)
        print(
            f"kiln job submit: applied PyTorchJob {applied['metadata']['name']} in namespace "
            f"{applied['metadata']['namespace']}; Kueue starts it when all its pods fit"
        )
    if not args.out and not args.kubeconfig:
        sys.stdout.write(to_yaml(objects))
    # What happens when a pod fails (the spec's resilience.auto_resume); on stderr when stdout is the YAML.
    print(
        f"kiln job submit: {resume_line(request, cluster)}",
        file=sys.stdout if args.out or args.kubeconfig else sys.stderr,
    )
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln job` to the command line."""
    job = commands.add_parser("job", help="training jobs on an EKS cluster (PyTorchJob, gang-scheduled by Kueue)")
    actions = job.add_subparsers(dest="job_command", required=True, metavar="ACTION")
    submit = actions.add_parser(
        "submit",
        help="turn a script into a PyTorchJob run by kiln-launch: print it, write it (--out), apply it (--kubeconfig)",
        description="Write a PyTorchJob that runs SCRIPT with kiln-launch on one node group of the spec's EKS "
        "cluster: the instance type's NCCL/EFA preset, all of each node's GPUs or Neuron devices and EFA "
        "interfaces, kiln's FSx claim with checkpoints on it, and Kueue's queue (all pods start together or none).",
    )
    submit.add_argument("--spec", required=True, metavar="FILE", help="the cluster's spec")
    submit.add_argument(
        "--image",
        help="a container image with Python 3 and torch (default on a Neuron group: the PyTorch training container "
        "of the cluster's Neuron release)",
    )
    submit.add_argument("--name", help="the job's name (default: the script's); also its checkpoint directory")
    submit.add_argument("--group", help="the node group to run on (default: the spec's only one)")
    submit.add_argument("--nodes", type=int, default=1, help="nodes, one pod each (default 1)")
    submit.add_argument("-j", metavar="NODES[xPROCS]", help="as TorchX's dist.ddp: nodes, and processes per node")
    submit.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help=f"worker restarts from the last checkpoint: 0 to {MAX_RESTARTS_MAX} (default 3)",
    )
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a container variable")
    submit.add_argument(
        "--allow-tcp",
        action="store_true",
        help="let the job train over TCP sockets on EFA nodes when its image lacks libfabric or aws-ofi-nccl "
        "(default: the launcher stops the job at its first step, in one line)",
    )
    submit.add_argument(
        "--precompile",
        action="store_true",
        help="Neuron groups: run the workers under neuron_parallel_compile, which extracts the script's graphs and "
        "compiles them into the job's compile cache on FSx, a directory per node rank (run a few steps; the training "
        "job of the same --name then finds them)",
    )
    submit.add_argument("--out", metavar="FILE", help="write the manifests here (YAML)")
    submit.add_argument("--kubeconfig", metavar="FILE", help="apply the job to the cluster this kubeconfig names")
    submit.add_argument("script", nargs=argparse.REMAINDER, metavar="-- SCRIPT [ARGS]")
    submit.set_defaults(func=one_line_failures("kiln job submit", _submit, error_word=True))
