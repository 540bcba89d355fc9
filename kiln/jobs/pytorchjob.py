"""Turn a training script into a PyTorchJob for a kiln EKS cluster: the manifests, from the spec and the catalog.

What a job carries:
- one pod per node of one accelerated node group (`nodeSelector` on kiln's node-group label), asking for all of the
  node's GPUs or Neuron devices and EFA interfaces, so each pod has a node to itself;
- the instance type's NCCL/EFA and Neuron preset for containers (AWS's pod environment for EFA: the efa provider,
  device RDMA where the type has it; on Trainium CCOM_SOCKET_IFNAME=eth0 and NEURON_RT_RESET_CORES=1, as AWS's
  Neuron samples set them in pods) with the spec's `launcher.env` over it, as container variables (the launcher
  keeps what the environment sets), and the image's name (KILN_IMAGE) for the launcher's messages;
- on a Neuron group: the root of the Neuron Persistent Cache on FSx (KILN_NEURON_CACHE_ROOT, unless launcher.env
  names a cache of its own), under which the launcher in each pod compiles into <root>/<uid>/<job name>/node-<rank>
  (kiln.launcher.compile_cache), so a replaced pod, or the job resubmitted under its name, does not compile its
  graphs again and no two pods write one cache; with --precompile, the launcher runs the workers under
  neuron_parallel_compile to fill those directories first; without --image, the PyTorch training container of
  the cluster's Neuron release (kiln.catalog.neuron);
- kiln's FSx for Lustre claim at the mount point nodes use, with checkpoints under `launcher.checkpoint_dir`, so a
  pod that restarts, or the job resubmitted under its name, resumes from its last checkpoint;
- Kueue's queue label: Kueue admits the job only when all of its pods fit, and evicts it when they do not all start
  in time (gang scheduling, kiln.constructs.eks_scheduling);
- kiln's training label on every pod (TRAINING_POD_LABEL): the cluster's disruption budget refuses to evict a running
  training pod, so a node group update waits for the job instead of killing it (kiln.constructs.eks_disruption);
- the spec's resilience: with auto_resume the operator makes a pod again when it fails (its node lost or replaced,
  evicted) and restarts its container when kiln-launch exits non-zero (a hung job), up to --max-restarts times, and
  the launcher resumes from the newest complete checkpoint; without it the first failure ends the job
  (kubernetes.json, pytorchjob_restart). The hang watchdog's bounds and the TCP opt-out reach kiln-launch as
  KILN_HANG_FACTOR, KILN_HANG_MIN_S and KILN_ALLOW_TCP;
- `kiln-launch` as the entry point. The image brings Python and torch; the launcher and the script travel in a
  ConfigMap beside the job (kiln's node wheel, unpacked at start), so any PyTorch image runs it. On a GPU type with
  EFA the image must also bring libfabric and aws-ofi-nccl: the launcher's first step reads them in the pod and
  stops the job in one line when NCCL would fall back to TCP, unless the job was submitted with --allow-tcp
  (kiln.launcher.efa).
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from kiln.catalog import instance_type, preset_environment
from kiln.catalog.kubernetes import (
    JOB_NAMESPACE,
    JOB_QUEUE,
    LUSTRE_CLAIM,
    NEURON_SCHEDULER_NAME,
    NODE_GROUP_LABEL,
    QUEUE_NAME_LABEL,
    TRAINING_POD_LABEL,
    kubernetes_fact,
    node_resources,
)
from kiln.catalog.names import ENV_NAME, ENV_NAME_RULE
from kiln.catalog.neuron import neuron_release
from kiln.contracts.errors import InputError

# Kubeflow training operator v1 (kiln.constructs.eks_addons.TRAINING_OPERATOR): the PyTorchJob's group and kind,
# and the container name it looks for in each replica (kubeflow/trainer v1.9.3, pkg/apis/kubeflow.org/v1,
# PyTorchJobDefaultContainerName).
PYTORCHJOB_API_VERSION = "kubeflow.org/v1"
PYTORCH_CONTAINER = "pytorch"
# Where the job's files are mounted, and where nodes mount the file system (kiln.stacks.compute_context).
JOB_FILES_DIR = "/opt/kiln/job"
FSX_MOUNT = "/fsx"
LAUNCHER_WHEEL = "kiln.whl"
# A ConfigMap holds at most 1 MiB (Kubernetes docs, "ConfigMaps": "The data stored in a ConfigMap cannot exceed
# 1 MiB"); kiln keeps a margin for the object's own fields.
CONFIG_MAP_LIMIT = 1_000_000
# NCCL's shared-memory transport needs more than a container's 64 MiB /dev/shm: a memory-backed emptyDir.
SHM_VOLUME = "dshm"
# A DNS-1035 label short enough for the operator's pod names (<job>-worker-<index>) and Service names (63).
JOB_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
JOB_NAME_RULE = "a lowercase letter, then up to 39 lowercase letters, digits or '-', not ending in '-'"
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")
# How the operator restarts a job's pods with resilience.auto_resume on and off (kubernetes.json, pytorchjob_restart).
RESTART: dict[str, Any] = kubernetes_fact("pytorchjob_restart").value
# The variables kiln-launch reads its hang bounds and TCP opt-out from (kiln.launcher.watchdog FACTOR_VARIABLE and
# MIN_VARIABLE, kiln.launcher.launch ALLOW_TCP_VARIABLE; the job layer does not import the launcher).
HANG_FACTOR_VARIABLE = "KILN_HANG_FACTOR"
HANG_MIN_VARIABLE = "KILN_HANG_MIN_S"
ALLOW_TCP_VARIABLE = "KILN_ALLOW_TCP"
# Unpack the launcher beside the job's files and run it: `python3 -m kiln.launcher` is kiln-launch.
ENTRY_SCRIPT = (
    "set -eu\n"
    'lib="$(mktemp -d)"\n'
    "python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "
    f'"{JOB_FILES_DIR}/{LAUNCHER_WHEEL}" "$lib"\n'
    'export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}"\n'
    'exec python3 -m kiln.launcher "$@"\n'
)


class JobError(InputError):
    """A job that cannot be written for this spec: one line saying why."""


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """What the user asks for.

    script: the training script (a file); args: its arguments. image: a container image with Python 3 and torch;
    None on a Neuron group: the PyTorch training container of the cluster's Neuron release.
    name: the job's name (also its checkpoint directory). group: the spec's node group; default its only one.
    nodes: pods, one per node; default 1. nproc_per_node: processes per pod; default one per GPU or NeuronCore.
    max_restarts: the launcher's worker restarts. env: further container variables.
    allow_tcp: the launcher starts even where NCCL would fall back to TCP on an EFA node (kiln-launch --allow-tcp).
    precompile: the launcher runs the workers under neuron_parallel_compile (kiln-launch --precompile): a Neuron
    group only.
    """

    script: Path
    args: Sequence[str] = ()
    image: str | None = None
    name: str
    group: str | None = None
    nodes: int = 1
    nproc_per_node: int | None = None
    max_restarts: int = 3
    env: Mapping[str, str] = field(default_factory=dict)
    allow_tcp: bool = False
    precompile: bool = False


@dataclass(frozen=True, kw_only=True)
class JobResilience:
    """The spec's resilience section, as far as a job carries it (ClusterSpec.resilience)."""

    # The operator restarts failed pods (OnFailure, backoffLimit --max-restarts); False: the first failure ends the job.
    auto_resume: bool
    # kiln-launch's hang watchdog: a stall of hang_factor median step times, at least hang_min_s seconds.
    hang_factor: int
    hang_min_s: int
    # kiln-launch starts where NCCL would fall back to TCP on an EFA node.
    allow_tcp: bool


@dataclass(frozen=True, kw_only=True)
class ClusterFacts:
    """What the job needs to know of the cluster, read from its spec by cluster_facts."""

    backend: str
    groups: Mapping[str, tuple[str, int]]  # name -> (instance type, max nodes)
    lustre: bool
    checkpoint_dir: str
    # The spec's launcher.env (or its older name nccl_env).
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    # The cluster's Neuron release (ClusterSpec.neuron_release); None without Neuron devices.
    neuron_release: str | None = None
    resilience: JobResilience


def cluster_facts(spec: Any) -> ClusterFacts:
    """Return what a job needs of SPEC's cluster."""
    return ClusterFacts(
        backend=spec.compute.backend,
        groups={g.name: (g.instance_type, g.max_count) for g in spec.compute.groups},
        lustre=spec.storage.lustre is not None,
        checkpoint_dir=spec.launcher.checkpoint_dir,
        nccl_env=spec.launcher.environment,
        neuron_release=spec.neuron_release,
        resilience=JobResilience(
            auto_resume=spec.resilience.auto_resume,
            hang_factor=spec.resilience.hang_factor,
            hang_min_s=spec.resilience.hang_min_s,
            allow_tcp=spec.resilience.allow_tcp,
        ),
    )


def job_manifests(request: JobRequest, cluster: ClusterFacts, wheel: bytes) -> list[dict[str, Any]]:
    """Return the ConfigMap with the launcher and script, and the PyTorchJob; JobError when they cannot be."""
    _check_request(request, cluster)
    group = _group(request, cluster)
    instance, _ = cluster.groups[group]
    facts = instance_type(instance)
    _check_precompile(request, group, facts)
    request = _with_image(request, cluster, group, facts)
    files = _config_map(request, wheel)
    labels = {"app.kubernetes.io/name": request.name, "app.kubernetes.io/managed-by": "kiln"}
    # The pods also carry the training label: the cluster's disruption budget refuses to evict them while they run.
    pod = _pod_template(request, cluster, group, files["metadata"]["name"], {**labels, **TRAINING_POD_LABEL})
    restart_policy, backoff_limit = restart_policy_of(request, cluster.resilience)
    replicas = {"Master": _replica(1, pod, restart_policy)}
    if request.nodes > 1:
        replicas["Worker"] = _replica(request.nodes - 1, pod, restart_policy)
    job = {
        "apiVersion": PYTORCHJOB_API_VERSION,
        "kind": "PyTorchJob",
        "metadata": {
            "name": request.name,
            "namespace": JOB_NAMESPACE,
            "labels": {**labels, QUEUE_NAME_LABEL: JOB_QUEUE},
        },
        "spec": {
            "nprocPerNode": str(request.nproc_per_node or _processes(facts)),
            # The launcher restarts workers itself, from their last checkpoint; with auto_resume the operator replaces
            # a pod that fails for good (a lost node) and restarts a container that exits non-zero, as many times
            # more.
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": backoff_limit},
            "pytorchReplicaSpecs": replicas,
        },
    }
    return [files, job]


def restart_policy_of(request: JobRequest, resilience: JobResilience) -> tuple[str, int]:
    """Return the replicas' restartPolicy and the job's backoffLimit: OnFailure and REQUEST's --max-restarts with
    auto_resume, else Never and none (kubernetes.json, pytorchjob_restart)."""
    if resilience.auto_resume:
        return RESTART["resume"]["restart_policy"], request.max_restarts
    return RESTART["no_resume"]["restart_policy"], RESTART["no_resume"]["backoff_limit"]


def resume_line(request: JobRequest, cluster: ClusterFacts) -> str:
    """Return what happens to the job when a pod fails, in one line (what `kiln job submit` prints)."""
    policy, limit = restart_policy_of(request, cluster.resilience)
    if cluster.resilience.auto_resume:
        return (
            f"resilience.auto_resume: a pod whose node is lost is made again and a kiln-launch that exits non-zero "
            f"(hung or failed) restarts, up to {limit} restarts (restartPolicy {policy}, backoffLimit {limit}); each "
            "resumes from the newest complete checkpoint"
        )
    return (
        f"resilience.auto_resume false: the job's first failed pod ends it (restartPolicy {policy}, backoffLimit "
        f"{limit})"
    )


def _check_request(request: JobRequest, cluster: ClusterFacts) -> None:
    if cluster.backend != "eks":
        raise JobError(
            f"compute.backend is {cluster.backend!r}: `kiln job submit` writes PyTorchJobs for the eks backend "
            "(Slurm clusters run `sbatch ... kiln-launch`)"
        )
    if not cluster.lustre:
        raise JobError(
            "storage.lustre is not set: a job keeps its checkpoints on kiln's FSx for Lustre claim, so that a "
            "restarted pod resumes; add storage.lustre to the spec"
        )
    if not JOB_NAME.fullmatch(request.name):
        raise JobError(f"--name: got {request.name!r}; allowed: {JOB_NAME_RULE}")
    if request.image is not None and not IMAGE.fullmatch(request.image):
        raise JobError(f"--image: got {request.image!r}; allowed: an image reference such as repo/name:tag")
    if request.nodes < 1:
        raise JobError(f"--nodes: got {request.nodes}; allowed: 1 or more")
    for name in request.env:
        if not ENV_NAME.fullmatch(name):
            raise JobError(f"--env: got {name!r}; allowed: {ENV_NAME_RULE}")
    if not request.script.is_file():
        raise JobError(f"{request.script}: no such file (the training script)")


def _group(request: JobRequest, cluster: ClusterFacts) -> str:
    names = sorted(cluster.groups)
    if request.group is None:
        if len(names) != 1:
            raise JobError(f"--group: the spec has {len(names)} node groups; name one of {', '.join(names)}")
        group = names[0]
    elif request.group not in cluster.groups:
        raise JobError(f"--group: got {request.group!r}; allowed: {', '.join(names)}")
    else:
        group = request.group
    _, max_nodes = cluster.groups[group]
    if request.nodes > max_nodes:
        raise JobError(
            f"--nodes: got {request.nodes}; group {group} scales to {max_nodes} nodes (compute.groups max_count), "
            "so the job would never be admitted"
        )
    return group


def _check_precompile(request: JobRequest, group: str, facts: Any) -> None:
    if request.precompile and not facts.neuron_count:
        raise JobError(
            f"--precompile: group {group} runs {facts.name}, which has no Neuron devices: neuron_parallel_compile "
            "precompiles Neuron graphs only"
        )


def _with_image(request: JobRequest, cluster: ClusterFacts, group: str, facts: Any) -> JobRequest:
    """Return REQUEST with its image: its own, else on a Neuron group the Neuron release's training container."""
    if request.image is not None:
        return request
    if not facts.neuron_count or cluster.neuron_release is None:
        raise JobError(f"--image: required for group {group} ({facts.name}): a container image with Python 3 and torch")
    release = neuron_release(cluster.neuron_release)
    if release.training_image is None:
        raise JobError(
            f"--image: required: Neuron {release.version} (the cluster's release) publishes no PyTorch training "
            "container kiln knows; give an image with torch-neuronx"
        )
    return replace(request, image=release.training_image)


def default_image_note(cluster: ClusterFacts) -> str | None:
    """Return where the image a Neuron job got without --image comes from (one line), None without a release."""
    if cluster.neuron_release is None:
        return None
    release = neuron_release(cluster.neuron_release)
    if release.training_image is None:
        return None
    return f"Neuron {release.version}'s PyTorch training container ({release.training_image_source})"


def _processes(facts: Any) -> int:
    """Return one process per GPU or logical NeuronCore (the launcher's own default)."""
    if facts.gpu_count:
        return facts.gpu_count
    if facts.neuron_count:
        return facts.logical_neuron_cores()
    return 1


def _environment(request: JobRequest, cluster: ClusterFacts, instance: str) -> list[dict[str, str]]:
    try:
        # The job checks its spec has storage.lustre (_check_request): a Neuron type's graphs go under the cache's
        # root on it.
        preset = preset_environment(instance, container=True, overrides=cluster.nccl_env, shared_cache=cluster.lustre)
    except ValueError as error:
        raise JobError(f"launcher.env: {error}") from None
    values = {
        **preset,
        # The launcher reads the instance type here: pods do not reach IMDS (nodes keep a hop limit of 1).
        "KILN_INSTANCE_TYPE": instance,
        "KILN_CHECKPOINT_DIR": cluster.checkpoint_dir,
        # Named in the launcher's one line when the image lacks NCCL's EFA stack (kiln.launcher.efa).
        "KILN_IMAGE": request.image,
        **_resilience_environment(cluster.resilience),
        **request.env,
    }
    return [{"name": name, "value": str(value)} for name, value in values.items()]


def _resilience_environment(resilience: JobResilience) -> dict[str, str]:
    """Return the variables that give kiln-launch the spec's hang bounds and, when it allows TCP, that."""
    values = {HANG_FACTOR_VARIABLE: str(resilience.hang_factor), HANG_MIN_VARIABLE: str(resilience.hang_min_s)}
    if resilience.allow_tcp:
        values[ALLOW_TCP_VARIABLE] = "1"
    return values


def _pod_template(
    request: JobRequest, cluster: ClusterFacts, group: str, files: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    instance, _ = cluster.groups[group]
    facts = instance_type(instance)
    resources = {name: str(count) for name, count in node_resources(instance).items()}
    script = PurePosixPath(JOB_FILES_DIR) / _script_key(request.script)
    launcher_args = [
        "--max-restarts",
        str(request.max_restarts),
        *(["--allow-tcp"] if request.allow_tcp else []),
        *(["--precompile"] if request.precompile else []),
        str(script),
        *request.args,
    ]
    container = {
        "name": PYTORCH_CONTAINER,
        "image": request.image,
        "command": ["sh", "-c", ENTRY_SCRIPT, "kiln-launch", *launcher_args],
        "env": _environment(request, cluster, instance),
        "resources": {"requests": resources, "limits": resources},
        # No setuid way up inside the container. runAsNonRoot is not set: the image is the user's, and most
        # training images run as root (the namespace's Pod Security baseline keeps root off the node).
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [
            {"name": "fsx", "mountPath": FSX_MOUNT},
            {"name": "job-files", "mountPath": JOB_FILES_DIR, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
        ],
    }
    spec: dict[str, Any] = {
        "nodeSelector": {NODE_GROUP_LABEL: group},
        "containers": [container],
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": LUSTRE_CLAIM}},
            {"name": "job-files", "configMap": {"name": files}},
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        ],
    }
    if facts.neuron_count:
        # Whole devices, contiguous cores: the Neuron scheduler extension places Neuron pods.
        spec["schedulerName"] = NEURON_SCHEDULER_NAME
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def _replica(count: int, pod: dict[str, Any], restart_policy: str) -> dict[str, Any]:
    return {"replicas": count, "restartPolicy": restart_policy, "template": pod}


def _script_key(script: Path) -> str:
    # ConfigMap keys: letters, digits, '-', '_' and '.'.
    key = re.sub(r"[^-._a-zA-Z0-9]", "_", script.name)
    return key if key != LAUNCHER_WHEEL else f"script-{key}"


def _config_map(request: JobRequest, wheel: bytes) -> dict[str, Any]:
    script = request.script.read_bytes()
    key = _script_key(request.script)
    try:
        data: dict[str, Any] = {"data": {key: script.decode("utf-8")}}
    except UnicodeDecodeError:
        data = {"binaryData": {key: base64.b64encode(script).decode()}}
    data.setdefault("binaryData", {})[LAUNCHER_WHEEL] = base64.b64encode(wheel).decode()
    size = len(script) + len(wheel)
    if size > CONFIG_MAP_LIMIT:
        raise JobError(
            f"{request.script}: {len(script)} bytes, too large to travel with the job (a ConfigMap holds 1 MiB); "
            "put the code in the image or on the file system and submit a small entry script"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{request.name}-files",
            "namespace": JOB_NAMESPACE,
            "labels": {"app.kubernetes.io/name": request.name, "app.kubernetes.io/managed-by": "kiln"},
        },
        **data,
    }


def launcher_wheel() -> bytes:
    """Return kiln's node wheel (launcher and catalog), built from this installation."""
    from kiln.bootstrap.wheel import wheel_bytes

    return wheel_bytes()


def owned_by(config_map: dict[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
    """Return CONFIG_MAP owned by the applied JOB (its uid), so deleting the job deletes its files."""
    metadata = job["metadata"]
    owner = {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "blockOwnerDeletion": False,
    }
    return {**config_map, "metadata": {**config_map["metadata"], "ownerReferences": [owner]}}


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """Return OBJECTS as one multi-document YAML stream."""
    import yaml

    class _Plain(yaml.SafeDumper):
        # Every object written out in full: no &anchors for the replicas' shared pod template.
        def ignore_aliases(self, data: Any) -> bool:
            return True

    out = io.StringIO()
    yaml.dump_all(list(objects), out, Dumper=_Plain, sort_keys=False, default_flow_style=False)
    return out.getvalue()
