"""The Neuron compile cache of one job on one node: <root>/<uid>/<job name>/node-<node rank> on the shared file system.

A Neuron node with kiln's FSx carries the cache's root (KILN_NEURON_CACHE_ROOT, in nccl.env or a kiln job's pod;
kiln.catalog.nccl.neuron_compile_cache), not a cache: Neuron's troubleshooting page reports errors when instances
share one cache directory on NFS/EFS/FSx and recommends one per instance, so the launcher gives each node of a job a
directory of its own and sets NEURON_COMPILE_CACHE_URL to it. The job name and node rank make it stable: a replaced
pod or node, a requeued or resubmitted job of the same name, and the training run after --precompile find the graphs
compiled before. The uid keeps users apart (a directory another user made is refused, as the graphs in it run as
this user). While the workers run, the launcher holds an exclusive flock on the directory's lock file beside it;
when another live launcher holds it (two jobs of one name at once), it takes the next free one (node-<rank>.1, ...),
so no two nodes ever write one directory. Nothing is chosen when the user names a cache (NEURON_COMPILE_CACHE_URL,
or --cache_dir in NEURON_CC_FLAGS), nor when the node rank is unknown (an elastic rendezvous assigns it late).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from kiln.catalog.nccl import names_cache_dir, neuron_compile_cache
from kiln.launcher.environment import LaunchEnvironment
from kiln.launcher.errors import LaunchError, UsageError
from kiln.launcher.ncclenv import NcclPlan
from kiln.launcher.paths import not_own_directory

# A job name as one path component: these characters, at most this long (longer or changed names get a digest).
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NAME_CHARS = 64
# Where a launcher finds every slot busy: as many jobs of one name and user at once on one node rank.
MAX_SLOTS = 8
# The job names the launcher was given explicitly; they name the cache as they name the checkpoints.
_NAMED = ("--job-id", "KILN_JOB_ID")


@dataclass(frozen=True, kw_only=True)
class CachePlan:
    """The compile cache directory chosen for this node (None: Neuron decides), and how it was chosen."""

    directory: str | None
    how: str

    def as_dict(self) -> dict[str, str | None]:
        """Return the JSON-ready form (the launch plan's compile_cache)."""
        return {"directory": self.directory, "how": self.how}


def variable() -> str:
    """Return the variable that names the cache to Neuron (NEURON_COMPILE_CACHE_URL)."""
    return neuron_compile_cache().variable


def path_component(name: str) -> str:
    """Return job NAME as one safe path component; a name that had to change gets 8 hex of its sha256."""
    if _COMPONENT.fullmatch(name) and len(name) <= MAX_NAME_CHARS:
        return name
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).lstrip(".-")[: MAX_NAME_CHARS - 9].rstrip(".-") or "job"
    return f"{cleaned}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def choose(
    detected: LaunchEnvironment, environ: Mapping[str, str], nccl: NcclPlan, uid: int | None = None
) -> CachePlan | None:
    """Return this node's compile cache for the launch, or None where no root is set (no Neuron node with FSx)."""
    cache = neuron_compile_cache()
    root = environ.get(cache.root_variable) or nccl.wanted.get(cache.root_variable, ("", ""))[0]
    if not root:
        return None
    if not PurePosixPath(root).is_absolute():
        raise UsageError(f"{cache.root_variable}: expected an absolute directory (got {root[:80]!r})")
    if cache.variable in environ or cache.variable in nccl.wanted:
        return CachePlan(directory=None, how=f"{cache.variable} is set: that cache is used as it is")
    flags = environ["NEURON_CC_FLAGS"] if "NEURON_CC_FLAGS" in environ else nccl.wanted.get("NEURON_CC_FLAGS", ("",))[0]
    if names_cache_dir(flags):
        return CachePlan(directory=None, how="NEURON_CC_FLAGS names a --cache_dir: that cache is used as it is")
    if detected.node_rank is None:
        return CachePlan(
            directory=None, how="node rank unknown until the rendezvous: Neuron's node-local default cache"
        )
    name, source = job_name(detected, environ)
    user = os.getuid() if uid is None else uid
    directory = PurePosixPath(root) / str(user) / path_component(name) / f"node-{detected.node_rank}"
    how = f"{cache.root_variable}/<uid>/<job name: {source}>/node-<node rank: {detected.sources.get('node_rank')}>"
    return CachePlan(directory=str(directory), how=how)


def job_name(detected: LaunchEnvironment, environ: Mapping[str, str]) -> tuple[str, str]:
    """Return the name the job's cache goes by, and where it came from: a --job-id or KILN_JOB_ID given, else Slurm's
    job name, else the job id the scheduler gave (the PyTorchJob's name); a launch nothing named shares 'local'."""
    source = detected.sources.get("job_id", "")
    if source in _NAMED:
        return detected.job_id, source
    if detected.scheduler == "slurm" and environ.get("SLURM_JOB_NAME"):
        return environ["SLURM_JOB_NAME"], "SLURM_JOB_NAME"
    if source != "generated":
        return detected.job_id, source
    return "local", "no job name"


def claim(planned: str) -> tuple[str, IO[str]]:
    """Create and lock this node's cache directory: PLANNED, else the next free node-<rank>.N. Return the directory
    and the open lock file, held until it is closed (or the process ends); LaunchError in one line otherwise."""
    wanted = Path(planned)
    user_dir = wanted.parent.parent
    try:
        _make_root(user_dir.parent)
        user_dir.mkdir(mode=0o700, exist_ok=True)
        if why := not_own_directory(user_dir):
            raise LaunchError(
                f"the compile cache {user_dir} is not this user's own ({why}): remove it, or set "
                f"{neuron_compile_cache().variable} to a directory of your own"
            )
        wanted.parent.mkdir(mode=0o700, exist_ok=True)
        for slot in range(MAX_SLOTS):
            directory = wanted if slot == 0 else wanted.with_name(f"{wanted.name}.{slot}")
            lock = open(directory.with_name(f"{directory.name}.lock"), "w")  # noqa: SIM115 - held by the caller
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            except OSError:
                lock.close()
                raise
            directory.mkdir(mode=0o700, exist_ok=True)
            return str(directory), lock
    except OSError as error:
        raise LaunchError(
            f"cannot use the compile cache {wanted}: {error.strerror}; set {neuron_compile_cache().variable} to a "
            "directory of your own"
        ) from None
    raise LaunchError(
        f"the compile cache {wanted} and its {MAX_SLOTS - 1} alternates are in use by other launchers of this job "
        "name on this node rank; give the job another name"
    )


def _make_root(root: Path) -> None:
    # Made by the first launcher to need it, for every user as /tmp is (sticky: no user removes another's).
    try:
        root.mkdir()
    except FileExistsError:
        return
    root.chmod(0o1777)
