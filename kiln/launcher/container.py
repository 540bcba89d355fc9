"""Run kiln-launch inside the cluster's training container where this node's Python has no torch (stdlib only).

A Trainium node of a Slurm backend has no Neuron PyTorch on the host: Neuron offers torch-neuronx on Amazon Linux 2023
(PCS's sample AMIs) for no current PyTorch ("PyTorch 2.9 is not available on Amazon Linux 2023", Neuron's AL2023
setup page: https://awsdocs-neuron.readthedocs-hosted.com/en/v2.30.0/frameworks/torch/torch-neuronx/setup/pytorch-install-prev-al2023.html),
and no image kiln boots ships it (platforms.json ``images``). So the bootstrap names the PyTorch training container of
the cluster's Neuron release (KILN_TRAINING_IMAGE in /etc/kiln/launcher.env, configure_training_env), and kiln-launch
runs the same command line inside it with enroot (NVIDIA/enroot, v3.5.0 docs doc/cmd/{import,create,start}.md):

- ``enroot import -o FILE docker://REGISTRY#REPOSITORY:TAG`` once per user and node, into a per-user cache on the
  node's local disk (<root>/<uid>, the root on the NVMe scratch enroot's own storage is on, as
  configure_container_storage records it; KILN_CONTAINER_CACHE overrides it; else ~/.cache/kiln/containers): enroot's
  own cache and data are per user too (the enroot.conf kiln writes), an unprivileged import cannot fill a cache other
  users run from, and a directory another user made is refused. A file lock keeps two job steps on
  one node from importing twice. enroot checks each layer it downloads against the sha256 digest the image manifest
  names (src/docker.sh); enroot 3.5 imports by tag only (digest references need enroot 4), so the tag is the pin.
  public.ecr.aws gives anonymous pull tokens: no credentials are needed.
- ``enroot create --name NAME FILE`` once: NAME carries the user's uid and a digest of the reference, so two users or
  two images never share a container; its root file system stays read-only (enroot starts containers read-only
  without --rw), so every step reuses it.
- ``enroot start --rc RC --mount ... --env ... NAME WORKDIR python3 -m kiln.launcher ARGV``: RC (a file of kiln's own
  in the cache) changes into the job's working directory and runs the command, skipping the image's entrypoint as
  pyxis does by default. enroot binds the host's /dev (its conf/mounts/10-system.fstab: rbind, so /dev/neuronN and
  /dev/infiniband/uverbsN are there) and /dev/shm, keeps the host network, and runs the container as the job's user
  in a user namespace. Started without --root (as here), enroot drops every capability, bounding set included, and
  sets no_new_privs before the command runs (bin/enroot-switchroot.c, drop_privileges, at v3.5.0): the Neuron runtime
  gets what the same user gets on the host (device files, RLIMIT_MEMLOCK as Slurm propagates it) and no capability.
  Neuron's container examples run Docker with --cap-add SYS_ADMIN and --cap-add IPC_LOCK (aws-neuron-sdk at 81ce03ae:
  setup/pytorch/update-dlc.rst, setup/jax/dlc.rst). enroot gives neither. IPC_LOCK lets a process lock memory past
  RLIMIT_MEMLOCK, which the user's own limit (unlimited under slurmd's LimitMEMLOCK=infinity, and kiln's limits.d
  file) makes unneeded; Neuron's pages do not say what the runtime uses SYS_ADMIN for, so whether anything a job
  does needs it is unknown (kiln has no way to grant it to an unprivileged user's container).
- enroot clears the environment (bin/enroot-switchroot.c load_environment): the image's own variables, then each
  ``--env NAME`` with the host's value. kiln passes Slurm's, kiln's, NCCL's, libfabric's and Neuron's variables and
  sets KILN_IN_CONTAINER=1, so the launcher inside never starts another container.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.launcher.errors import LaunchError
from kiln.launcher.paths import not_own_directory

TRAINING_IMAGE = "KILN_TRAINING_IMAGE"
IN_CONTAINER = "KILN_IN_CONTAINER"
CACHE = "KILN_CONTAINER_CACHE"
# The launcher's settings the bootstrap writes (configure_training_env), under KILN_ROOT where that is set.
LAUNCHER_ENV = "/etc/kiln/launcher.env"
# Where configure_container_storage records the node's image cache root (on local NVMe, beside enroot's storage).
CACHE_RECORD = "/etc/kiln/container-cache"
# The node's kiln files the launcher inside reads: nccl.env, launcher.env, instance-type.
KILN_ETC = "/etc/kiln"
# What the node's root side leaves for jobs and takes from them (health verdicts, the drain and requeue hand-off).
KILN_RUN = "/run/kiln"
# Where nodes mount the cluster's FSx for Lustre file system (kiln.stacks.compute_context.MOUNT_POINT).
FSX_MOUNT = "/fsx"
# Where the node's kiln package appears inside the container; PYTHONPATH names it.
LAUNCHER_MOUNT = "/opt/kiln-launcher"
# The variables that cross into the container, by prefix: the scheduler's, kiln's, the collectives'.
PASSED_PREFIXES = ("SLURM_", "SLURMD_", "KILN_", "NCCL_", "FI_", "NEURON_", "CCOM_", "XLA_", "MASTER_")
# enroot takes NAME or NAME=VALUE for --env (src/runtime.sh checks it so) and fstab fields split at ':'.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MOUNT_PATH = re.compile(r"/[^\s:,]*")
# REGISTRY/REPOSITORY:TAG, the registry a host name (with a dot) or host:port, as Docker names an image.
_REFERENCE = re.compile(
    r"(?P<registry>[a-z0-9.-]+\.[a-z0-9.-]+(?::[0-9]+)?|[a-z0-9.-]+:[0-9]+)/"
    r"(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*):(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127})"
)
# The command script enroot runs inside the container with WORKDIR and the command: cd, then exec (sh syntax).
RC_SCRIPT = 'cd -- "$1" || exit 125\nshift\nexec "$@"\n'
# The question asked of the image once: a python3 that imports torch.
TORCH_PROBE = ("python3", "-c", "import torch")


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A host path bound into the container."""

    source: str
    target: str
    read_only: bool

    def fstab(self) -> str:
        """Return the mount as enroot's --mount takes it: fstab fields joined by ':'."""
        options = "x-create=dir,bind,nosuid,nodev" + (",ro" if self.read_only else ",rw")
        return f"{self.source}:{self.target}:none:{options}"


@dataclass(frozen=True, kw_only=True)
class ContainerPlan:
    """How kiln-launch runs its command line in the training image."""

    image: str
    uri: str
    name: str
    cache_dir: Path
    workdir: str
    mounts: tuple[Mount, ...]
    passed: tuple[str, ...]
    settings: dict[str, str]
    command: tuple[str, ...]

    @property
    def squashfs(self) -> Path:
        return self.cache_dir / f"{self.name}.sqsh"

    @property
    def rc_file(self) -> Path:
        return self.cache_dir / "kiln-rc.sh"

    @property
    def import_log(self) -> Path:
        return self.cache_dir / f"{self.name}.import.log"

    def import_command(self, output: Path) -> list[str]:
        return ["enroot", "import", "--output", str(output), self.uri]

    def create_command(self) -> list[str]:
        return ["enroot", "create", "--name", self.name, str(self.squashfs)]

    def start_command(self, command: tuple[str, ...] | None = None) -> list[str]:
        """Return enroot start for COMMAND (default: the launcher's) in the job's working directory."""
        argv = ["enroot", "start", "--rc", str(self.rc_file)]
        for mount in self.mounts:
            argv += ["--mount", mount.fstab()]
        argv += [arg for name in self.passed for arg in ("--env", name)]
        argv += [arg for name, value in self.settings.items() for arg in ("--env", f"{name}={value}")]
        return [*argv, self.name, self.workdir, *(command or self.command)]

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON-ready plan --dry-run prints."""
        return {
            "image": self.image,
            "runtime": "enroot",
            "name": self.name,
            "squashfs": str(self.squashfs),
            "workdir": self.workdir,
            "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in self.mounts],
            "environment": {"passed": list(self.passed), "set": dict(self.settings)},
            "commands": [
                self.import_command(self.squashfs),
                self.create_command(),
                self.start_command(),
            ],
        }


def has_torch() -> bool:
    """Return whether this interpreter can import torch (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def launcher_setting(name: str, environ: Mapping[str, str]) -> str:
    """Return NAME from ENVIRON, else from the bootstrap's launcher.env (shell-quoted NAME=value lines), else ''."""
    if environ.get(name):
        return environ[name]
    path = Path(environ.get("KILN_ROOT", "/").rstrip("/") + LAUNCHER_ENV)
    try:
        text = path.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(f"{name}="):
            try:
                words = shlex.split(line)
            except ValueError:
                raise LaunchError(f"{path}: cannot read {name}: {line!r} is not shell-quoted") from None
            return words[0].partition("=")[2] if len(words) == 1 else ""
    return ""


def python_source(environ: Mapping[str, str] = os.environ) -> str:
    """Return where this launcher's training Python comes from, as one line for kiln-launch check."""
    if environ.get(IN_CONTAINER) == "1":
        image = environ.get(TRAINING_IMAGE) or "an image kiln-launch was not told"
        return f"python3 of the training container {image} (enroot), started by kiln-launch on the host"
    torch = "with torch" if has_torch() else "without torch"
    return f"this node's {sys.executable} ({torch})"


def enroot_uri(image: str) -> str:
    """Return enroot's URI for IMAGE (REGISTRY/REPOSITORY:TAG): docker://REGISTRY#REPOSITORY:TAG, which enroot 3.5
    and 4 both read; raise LaunchError for a reference of another shape."""
    match = _REFERENCE.fullmatch(image)
    if match is None:
        raise LaunchError(
            f"{TRAINING_IMAGE}={image!r}: expected REGISTRY/REPOSITORY:TAG (a registry host such as public.ecr.aws, "
            "and a tag: enroot 3.5 imports by tag, not by digest)"
        )
    return f"docker://{match['registry']}#{match['repository']}:{match['tag']}"


def container_name(image: str, uid: int) -> str:
    """Return the enroot container name of IMAGE for user UID: kiln-<uid>-<12 hex of the reference's sha256>."""
    return f"kiln-{uid}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def cache_dir(environ: Mapping[str, str], uid: int) -> Path:
    """Return this user's image cache: <root>/<uid> of KILN_CONTAINER_CACHE, else of the node's record of it
    (/etc/kiln/container-cache, configure_container_storage: local NVMe), else ~/.cache/kiln/containers."""
    root = environ.get(CACHE, "")
    if not root:
        try:
            root = Path(environ.get("KILN_ROOT", "/").rstrip("/") + CACHE_RECORD).read_text().strip()
        except OSError:
            root = ""
    if root:
        return Path(root) / str(uid)
    home = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(home) / "kiln" / "containers"


def kiln_package() -> Path:
    """Return the directory of the kiln package this launcher runs from (the node venv's, read-only inside)."""
    return Path(__file__).resolve().parent.parent


def plan(
    argv: list[str],
    environ: Mapping[str, str] = os.environ,
    *,
    torch_here: bool | None = None,
    cwd: str | None = None,
    uid: int | None = None,
) -> ContainerPlan | None:
    """Return how to run kiln-launch ARGV in the training container, or None to run it here: inside the container
    already (KILN_IN_CONTAINER=1), where this Python has torch, or where no training image is named."""
    if environ.get(IN_CONTAINER) == "1":
        return None
    if has_torch() if torch_here is None else torch_here:
        return None
    image = launcher_setting(TRAINING_IMAGE, environ)
    if not image:
        return None
    uid = os.getuid() if uid is None else uid
    workdir = cwd or os.getcwd()
    root = environ.get("KILN_ROOT", "/").rstrip("/")
    package = kiln_package()
    mounts = [Mount(source=str(package), target=f"{LAUNCHER_MOUNT}/kiln", read_only=True)]
    if Path(f"{root}{KILN_ETC}").is_dir():
        mounts.insert(0, Mount(source=f"{root}{KILN_ETC}", target=KILN_ETC, read_only=True))
    # The node's health verdict and the hand-off of drains and requeues (kiln.launcher.drain_request): the watchdog
    # in the container reads and writes them there, as it would on the host.
    if Path(f"{root}{KILN_RUN}").is_dir():
        mounts.append(Mount(source=f"{root}{KILN_RUN}", target=KILN_RUN, read_only=False))
    if Path(FSX_MOUNT).is_dir():
        mounts.append(Mount(source=FSX_MOUNT, target=FSX_MOUNT, read_only=False))
    if not any(workdir == m.target or workdir.startswith(f"{m.target}/") for m in mounts):
        mounts.append(Mount(source=workdir, target=workdir, read_only=False))
    for mount in mounts:
        for path in (mount.source, mount.target):
            if not _MOUNT_PATH.fullmatch(path):
                raise LaunchError(
                    f"cannot bind {path!r} into the training container: enroot's --mount takes absolute paths "
                    "without spaces, ':' or ','; run kiln-launch from another directory"
                )
    settings = {IN_CONTAINER: "1", "PYTHONPATH": LAUNCHER_MOUNT, TRAINING_IMAGE: image}
    passed = tuple(
        sorted(
            name
            for name in environ
            if name.startswith(PASSED_PREFIXES) and name not in settings and _ENV_NAME.fullmatch(name)
        )
    )
    return ContainerPlan(
        image=image,
        uri=enroot_uri(image),
        name=container_name(image, uid),
        cache_dir=cache_dir(environ, uid),
        workdir=workdir,
        mounts=tuple(mounts),
        passed=passed,
        settings=settings,
        command=("python3", "-m", "kiln.launcher", *argv),
    )


def prepare(container: ContainerPlan, *, enroot: str | None = None) -> None:
    """Import and create CONTAINER's image once for this user (under a lock), and check it has python3 with torch;
    raise LaunchError in one line when enroot is missing, the import fails or the image cannot run the launcher."""
    program = enroot or shutil.which("enroot")
    if program is None:
        raise LaunchError(
            f"no python3 with torch on this node, and enroot is not on PATH to run the training container "
            f"{container.image}: the node's bootstrap installs enroot on Trainium Slurm nodes (software.containers)"
        )
    try:
        container.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_owned(container.cache_dir)
        if not container.rc_file.is_file() or container.rc_file.read_text() != RC_SCRIPT:
            # Written beside it and renamed: a step starting at the same moment reads the whole script or none.
            staged = container.rc_file.with_name(f"{container.rc_file.name}.{os.getpid()}")
            staged.write_text(RC_SCRIPT)
            staged.replace(container.rc_file)
        lock = open(container.cache_dir / f"{container.name}.lock", "w")  # noqa: SIM115 - held until return
    except OSError as error:
        raise LaunchError(f"cannot use the container cache {container.cache_dir}: {error.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not container.squashfs.exists():
            _import(container, program)
        if container.name not in _containers(program):
            _run(container, [program, *container.create_command()[1:]], "create the container from")
            probe = [program, *container.start_command(TORCH_PROBE)[1:]]
            done = subprocess.run(probe, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                subprocess.run([program, "remove", "--force", container.name], capture_output=True, check=False)
                said = _last_line(done.stderr) or f"exit {done.returncode}"
                raise LaunchError(
                    f"the training container {container.image} has no python3 that imports torch ({said}); "
                    f"name an image with Neuron's PyTorch: {TRAINING_IMAGE}=REGISTRY/REPOSITORY:TAG"
                )


def exec_start(container: ContainerPlan, *, enroot: str | None = None) -> None:
    """Replace this process with enroot start (signals from Slurm then reach the container's launcher)."""
    program = enroot or shutil.which("enroot") or "enroot"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program, *container.start_command()[1:]])  # noqa: S606 - enroot, an argument list, no shell


def print_plan(container: ContainerPlan) -> None:
    """Print the container plan as JSON (kiln-launch --dry-run; the launcher inside prints its own plan next)."""
    print(json.dumps({"container": container.as_dict()}, indent=2, sort_keys=True), flush=True)


def run_if_needed(argv: list[str], *, dry_run: bool) -> None:
    """Run kiln-launch ARGV in the training container when this node needs it (plan); return only when it does not.

    With DRY_RUN the container plan is printed first; the launcher inside, given the same --dry-run, prints its own
    plan and starts no worker (the image is still imported once, to start the container at all)."""
    container = plan(argv)
    if container is None:
        return
    if dry_run:
        print_plan(container)
    prepare(container)
    exec_start(container)


def _import(container: ContainerPlan, program: str) -> None:
    partial = container.cache_dir / f"{container.name}.partial.sqsh"
    partial.unlink(missing_ok=True)
    print(
        f"kiln-launch: importing the training container {container.image} into {container.squashfs} "
        "(once per user and node; several minutes for a Neuron image)",
        file=sys.stderr,
        flush=True,
    )
    with container.import_log.open("w") as log:
        done = subprocess.run(
            [program, *container.import_command(partial)[1:]], stdout=log, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        said = _last_line(container.import_log.read_text(errors="replace"))
        raise LaunchError(
            f"enroot could not import the training container {container.image} (exit {done.returncode}"
            f"{': ' + said if said else ''}); its log: {container.import_log}"
        )
    partial.replace(container.squashfs)


def _check_owned(directory: Path) -> None:
    """Refuse a cache directory another user made or may write: the images in it run as this user."""
    if why := not_own_directory(directory):
        raise LaunchError(
            f"the container cache {directory} is not this user's own ({why}): remove it, or set {CACHE} to a "
            "directory of your own"
        )


def _containers(program: str) -> set[str]:
    done = subprocess.run([program, "list"], capture_output=True, text=True, check=False)
    return set(done.stdout.split()) if done.returncode == 0 else set()


def _run(container: ContainerPlan, argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = _last_line(done.stderr) or f"exit {done.returncode}"
        raise LaunchError(f"enroot could not {what} {container.squashfs} ({said})")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
