"""Does NCCL reach EFA here? Read before the workers start, and refuse to train over TCP on an EFA node.

On a GPU node with EFA devices NCCL needs the aws-ofi-nccl plugin on the loader's path and libfabric with its efa
provider; without either it falls back to TCP sockets and says so only in its debug log. A container brings both
itself (the EKS AMI installs EFA with --minimal), so a stock PyTorch image has neither. kiln-launch reads what is
really there, under the node's root (KILN_ROOT, default /):

- the EFA devices: /sys/class/infiniband, else the /dev/infiniband/uverbsN nodes the EFA device plugin passes in;
- the plugin: on LD_LIBRARY_PATH, else in the directories AWS's images use (kiln.catalog.nccl.efa_software);
- libfabric's efa provider: ``fi_info -p efa`` (PATH, else /opt/amazon/efa/bin), which lists it only when libfabric
  has the provider and can open the devices.

On a GPU type with EFA and devices present, a missing piece stops the launch in one line, unless --allow-tcp says
TCP is wanted (then a warning, and the run record keeps why). When the plugin is found, the workers get its
directory and libfabric's on LD_LIBRARY_PATH (ahead of what is there), and NCCL_NET_PLUGIN when its file name is
not the libnccl-net.so NCCL loads by default.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.catalog import InstanceType
from kiln.catalog.nccl import efa_software
from kiln.launcher import bounded, hardware
from kiln.launcher.errors import LaunchError
from kiln.launcher.image import root_of

ALLOW_TCP_FLAG = "--allow-tcp"
# fi_info enumerates the providers once; a node that takes longer is broken in another way.
TIMEOUT_SECONDS = 30
_EFA_PROVIDER_LINE = re.compile(r"^\s*provider:\s*efa\s*$", re.MULTILINE)
# The plugin NCCL loads without NCCL_NET_PLUGIN; libnccl-net-<X>.so needs NCCL_NET_PLUGIN=X.
_DEFAULT_PLUGIN = "libnccl-net.so"
_NAMED_PLUGIN = re.compile(r"libnccl-net-(.+)\.so")
FIX = (
    "use an image that carries libfabric and aws-ofi-nccl (an AWS Deep Learning Container for PyTorch, or one built "
    "with the EFA installer as AWS's EFA NCCL test image is), or pass --allow-tcp (kiln job submit --allow-tcp) to "
    "train over TCP"
)
NOT_APPLICABLE, READY, TCP_ALLOWED = "not_applicable", "ready", "tcp_allowed"


@dataclass(frozen=True, kw_only=True)
class EfaStack:
    """What this node or container holds of NCCL's EFA stack."""

    devices: tuple[str, ...]
    plugin: str | None = None
    libfabric_dir: str | None = None
    fi_info: str | None = None
    provider: bool = False
    # What fi_info said when it listed no efa provider, or why it could not run.
    provider_said: str = ""

    def missing(self) -> list[str]:
        """Return what NCCL lacks to use EFA here, each in a few words (empty: nothing)."""
        software = efa_software()
        found = []
        if self.plugin is None:
            homes = sorted({directory.split("/lib", 1)[0] for directory in software.plugin_dirs})
            found.append(
                f"no aws-ofi-nccl plugin ({' or '.join(software.plugin_names[:2])} on LD_LIBRARY_PATH or under "
                f"{', '.join(homes)})"
            )
        if self.fi_info is None:
            found.append(
                f"no libfabric efa provider ({software.tool}, libfabric's tool, is not on PATH or in "
                f"{', '.join(software.tool_dirs)})"
            )
        elif not self.provider:
            found.append(f"no libfabric efa provider ({self.fi_info} -p efa: {self.provider_said})")
        return found


@dataclass(frozen=True, kw_only=True)
class EfaGate:
    """The launcher's decision: not_applicable, ready, or tcp_allowed (--allow-tcp on a node lacking the stack)."""

    status: str
    detail: str
    stack: EfaStack | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    warning: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form the plan and the run record keep."""
        stack = self.stack
        return {
            "status": self.status,
            "detail": self.detail,
            "devices": len(stack.devices) if stack else 0,
            "plugin": stack.plugin if stack else None,
            "fi_info": stack.fi_info if stack else None,
            "efa_provider": stack.provider if stack else False,
            "missing": stack.missing() if stack else [],
            "worker_env": dict(self.worker_env),
        }


def _under(root: Path, directory: str) -> Path:
    return root / directory.lstrip("/")


def devices(root: Path) -> tuple[str, ...]:
    """Return the EFA devices visible under ROOT: the RDMA devices in sysfs, else the uverbs device nodes."""
    found = hardware.efa_devices(_under(root, str(hardware.INFINIBAND_SYSFS)))
    if found:
        return tuple(found)
    dev = _under(root, "/dev/infiniband")
    return tuple(sorted(entry.name for entry in dev.glob("uverbs*"))) if dev.is_dir() else ()


def _search_path(environ: Mapping[str, str], variable: str) -> list[str]:
    # Empty entries would mean the current directory: never look there.
    return [directory for directory in environ.get(variable, "").split(os.pathsep) if directory]


def _libfabric_dir(environ: Mapping[str, str], root: Path) -> str | None:
    software = efa_software()
    candidates = _search_path(environ, "LD_LIBRARY_PATH") + [
        str(_under(root, directory)) for directory in software.libfabric_dirs
    ]
    return next((d for d in candidates if (Path(d) / software.libfabric_library).is_file()), None)


def _provider(tool: str, environ: Mapping[str, str], library_path: str, timeout: float) -> tuple[bool, str]:
    """Run ``TOOL -p efa``; return whether it listed the efa provider, and what it said otherwise."""
    env = {**environ, "LD_LIBRARY_PATH": library_path} if library_path else dict(environ)
    try:
        done = bounded.run([tool, "-p", "efa"], env=env, timeout=timeout)
    except bounded.Timeout:
        return False, f"no answer within {timeout:g} s"
    except OSError as error:
        return False, f"cannot run ({error.strerror or error})"
    if done.returncode == 0 and _EFA_PROVIDER_LINE.search(done.stdout):
        return True, ""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    said = lines[-1] if lines else "no output"
    return False, f"exit {done.returncode}, {said[:200]}"


def scan(environ: Mapping[str, str] = os.environ, root: Path | None = None, timeout: float | None = None) -> EfaStack:
    """Read this node's (or container's) EFA devices, plugin, libfabric and efa provider (fi_info given TIMEOUT
    seconds, default TIMEOUT_SECONDS); never raise."""
    root = root_of(environ) if root is None else root
    software = efa_software()
    found = devices(root)
    plugin = hardware.ofi_nccl_plugin(environ, [str(_under(root, d)) for d in software.plugin_dirs])
    libfabric = _libfabric_dir(environ, root)
    search = _search_path(environ, "PATH") + [str(_under(root, d)) for d in software.tool_dirs]
    tool = shutil.which(software.tool, path=os.pathsep.join(search)) if search else None
    if tool is None:
        return EfaStack(devices=found, plugin=plugin, libfabric_dir=libfabric)
    library_path = _library_path(environ, [libfabric] if libfabric else [])
    provider, said = _provider(tool, environ, library_path, TIMEOUT_SECONDS if timeout is None else timeout)
    return EfaStack(
        devices=found, plugin=plugin, libfabric_dir=libfabric, fi_info=tool, provider=provider, provider_said=said
    )


def _library_path(environ: Mapping[str, str], directories: list[str]) -> str:
    """Return LD_LIBRARY_PATH with DIRECTORIES ahead of its own entries (each once), or '' when nothing changes."""
    current = _search_path(environ, "LD_LIBRARY_PATH")
    added = [d for d in dict.fromkeys(directories) if d not in current]
    return os.pathsep.join(added + current) if added else ""


def worker_environment(stack: EfaStack, environ: Mapping[str, str]) -> dict[str, str]:
    """Return what the workers need for NCCL to load the plugin found: LD_LIBRARY_PATH, and NCCL_NET_PLUGIN for a
    plugin file NCCL does not load by default (never a variable the user set)."""
    if stack.plugin is None:
        return {}
    plugin = Path(stack.plugin)
    env = {}
    if library_path := _library_path(
        environ, [str(plugin.parent)] + ([stack.libfabric_dir] if stack.libfabric_dir else [])
    ):
        env["LD_LIBRARY_PATH"] = library_path
    named = _NAMED_PLUGIN.fullmatch(plugin.name)
    if named and "NCCL_NET_PLUGIN" not in environ and not (plugin.parent / _DEFAULT_PLUGIN).is_file():
        env["NCCL_NET_PLUGIN"] = named.group(1)
    return env


def gate(
    instance: InstanceType | None,
    environ: Mapping[str, str] = os.environ,
    *,
    allow_tcp: bool = False,
    root: Path | None = None,
) -> EfaGate:
    """Decide whether the workers may start: LaunchError (one line) on a GPU node with EFA devices whose NCCL would
    fall back to TCP, unless ALLOW_TCP."""
    if instance is None:
        return EfaGate(status=NOT_APPLICABLE, detail="instance type unknown: no EFA expectation")
    if not (instance.efa_supported and instance.gpu_count):
        return EfaGate(status=NOT_APPLICABLE, detail=f"{instance.name} runs no NCCL over EFA")
    stack = scan(environ, root)
    if not stack.devices:
        return EfaGate(status=NOT_APPLICABLE, detail=f"no EFA device visible on this {instance.name}", stack=stack)
    env = worker_environment(stack, environ)
    missing = stack.missing()
    if not missing:
        detail = f"{len(stack.devices)} EFA device(s); aws-ofi-nccl at {stack.plugin}; libfabric efa provider"
        return EfaGate(status=READY, detail=detail, stack=stack, worker_env=env)
    image = environ.get("KILN_IMAGE")
    where = f"image {image}" if image else "this environment"
    cause = (
        f"{instance.name} has {len(stack.devices)} EFA device(s) here, but NCCL would fall back to TCP sockets in "
        f"{where}: {'; '.join(missing)}"
    )
    if not allow_tcp:
        raise LaunchError(f"{cause}; {FIX}")
    warning = f"{ALLOW_TCP_FLAG}: {cause}; training over TCP as asked"
    return EfaGate(status=TCP_ALLOWED, detail=cause, stack=stack, worker_env=env, warning=warning)
