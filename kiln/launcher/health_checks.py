"""What ``kiln-launch health`` (kiln.launcher.health documents it) judges a node by, and its Neuron and EFA checks
(GPUs: kiln.launcher.health_gpu; storage: kiln.launcher.health_storage), each against the catalog.

Every check returns one Result. A check that needs hardware the node's instance type does not have (or a type the
catalog does not know, or the local cluster's nodes) is n/a, never ok. Every tool and every look at a file system
runs under the node's deadline (kiln.launcher.bounded), so a stuck driver or mount is a FAIL, not a hang.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.catalog import InstanceType
from kiln.catalog.nccl import efa_software
from kiln.launcher import efa, neuron

OK, FAIL, NOT_APPLICABLE = "ok", "FAIL", "n/a"
# The bootstrap's instance type on a local cluster's nodes (node_context): no GPU, Neuron device or EFA.
LOCAL = "local"


@dataclass(frozen=True, kw_only=True)
class Result:
    """One line of the report: `<status> <check>: <detail>`."""

    check: str
    status: str
    detail: str


@dataclass(kw_only=True)
class Budget:
    """Each external step gets per_check_s seconds, and never runs past the program's deadline (time.monotonic)."""

    per_check_s: float
    deadline: float

    def timeout(self) -> float:
        return max(0.0, min(self.per_check_s, self.deadline - time.monotonic()))

    def spent(self) -> bool:
        return self.timeout() < 0.05


@dataclass(frozen=True, kw_only=True)
class Node:
    """What the checks judge this node against."""

    root: Path
    environ: Mapping[str, str]  # the node's environment, PATH extended with the system's directories
    instance_name: str | None
    instance: InstanceType | None
    why_unknown: str | None
    checkpoint_dir: str
    lustre_mount: str
    min_free_gib: float | None
    budget: Budget
    # Tools that did not answer once: asked no more (a stuck driver would only take another timeout).
    stuck: set[str] = field(default_factory=set)

    def under(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=self.environ.get("PATH", ""))

    def unrelated(self, needs: str) -> str | None:
        """Return why a check for NEEDS (gpu, neuron, efa) does not apply here, or None when it does."""
        if self.instance_name == LOCAL:
            return f"local node (instance type {LOCAL}): no GPU, Neuron device or EFA"
        if self.instance is None:
            return str(self.why_unknown)
        has = {"gpu": self.instance.gpu_count, "neuron": self.instance.neuron_count, "efa": self.instance.efa_supported}
        what = {"gpu": "GPU", "neuron": "Neuron device", "efa": "EFA"}[needs]
        return None if has[needs] else f"{self.instance.name} has no {what}"


def neuron_devices(node: Node) -> Result:
    """The Neuron devices neuron-ls lists against the catalog's count."""
    if why := node.unrelated("neuron"):
        return Result(check="neuron", status=NOT_APPLICABLE, detail=why)
    expected, name = node.instance.neuron_count, node.instance.name
    if node.budget.spent():
        return _out_of_time("neuron")
    scan = neuron.scan(node.environ, dev=node.under("/dev"), timeout=node.budget.timeout())
    if scan.tool is None:
        searched = ", ".join(("PATH", *neuron.TOOL_DIRS))
        return Result(
            check="neuron",
            status=FAIL,
            detail=f"{neuron.NEURON_LS} not found ({searched}): {name} has {expected} Neuron devices",
        )
    if scan.error:
        return Result(check="neuron", status=FAIL, detail=scan.error)
    status = OK if len(scan.devices) == expected else FAIL
    return Result(
        check="neuron",
        status=status,
        detail=f"{neuron.NEURON_LS} lists {len(scan.devices)} Neuron device(s); {name} has {expected}",
    )


def efa_stack(node: Node) -> efa.EfaStack | None:
    """Return the node's EFA devices, plugin and fi_info's answer (kiln.launcher.efa), or None where no EFA applies."""
    if node.unrelated("efa") or node.budget.spent():
        return None
    return efa.scan(node.environ, node.root, timeout=node.budget.timeout())


def efa_devices(node: Node, stack: efa.EfaStack | None) -> Result:
    """The EFA devices under sysfs against the catalog's EFA interface count, and libfabric's efa provider."""
    if why := node.unrelated("efa"):
        return Result(check="efa", status=NOT_APPLICABLE, detail=why)
    if stack is None:
        return _out_of_time("efa")
    expected, software = node.instance.efa_interface_count, efa_software()
    found = (
        [f"{len(stack.devices)} EFA device(s); {node.instance.name} has {expected}"]
        if len(stack.devices) < expected
        else []
    )
    if stack.fi_info is None:
        found.append(f"{software.tool} not found (PATH, {', '.join(software.tool_dirs)})")
    elif not stack.provider:
        found.append(f"{software.tool} -p efa lists no efa provider ({stack.provider_said})")
    if found:
        return Result(check="efa", status=FAIL, detail="; ".join(found))
    return Result(
        check="efa",
        status=OK,
        detail=f"{len(stack.devices)} EFA device(s) ({node.instance.name} has {expected}); "
        f"{software.tool} -p efa lists the efa provider",
    )


def nccl_plugin(node: Node, stack: efa.EfaStack | None) -> Result:
    """The aws-ofi-nccl plugin NCCL needs to reach EFA from a GPU node."""
    why = node.unrelated("gpu") or node.unrelated("efa")
    if why and node.instance is not None and node.instance.neuron_count:
        why = f"{node.instance.name} has Neuron devices: their collectives do not use NCCL"
    elif why and node.instance is not None:
        why = f"{node.instance.name} runs no NCCL over EFA"
    if why:
        return Result(check="nccl-plugin", status=NOT_APPLICABLE, detail=why)
    if stack is None:
        return _out_of_time("nccl-plugin")
    if stack.plugin:
        return Result(check="nccl-plugin", status=OK, detail=f"aws-ofi-nccl at {stack.plugin}")
    homes = ", ".join(efa_software().plugin_dirs)
    return Result(
        check="nccl-plugin",
        status=FAIL,
        detail=f"no aws-ofi-nccl plugin on LD_LIBRARY_PATH or in {homes}: NCCL would fall back to TCP sockets",
    )


def _out_of_time(check: str) -> Result:
    return Result(check=check, status=FAIL, detail="not run: the checks before it used up the program's time budget")
