"""The GPU checks of ``kiln-launch health`` (kiln.launcher.health documents them): nvidia-smi's count and error
counters, and the fatal Xids the driver logged since boot; never through torch."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kiln.catalog.platforms import service_fact
from kiln.launcher import bounded
from kiln.launcher.health_checks import FAIL, NOT_APPLICABLE, OK, Node, Result

NVIDIA_SMI = "nvidia-smi"
# The kernel's log since boot, one record per read (Documentation/ABI/testing/dev-kmsg); under the node's root.
KMSG = "/dev/kmsg"
KMSG_MAX_BYTES = 64 << 20
# nvidia-smi --help-query-gpu: the uncorrectable ECC errors since the driver loaded (volatile) and over the GPU's
# life (aggregate), and whether a retired page waits for a reset (pre-Ampere page retirement); row remapping (Ampere
# and newer) is asked with --query-remapped-rows. NVIDIA's "Error Recovery and Response Flags"
# (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html): a pending row
# remapping lets work go on until the next GPU reset; a failed one is a replacement.
ERROR_FIELDS = (
    "index",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
)
_XID = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<xid>\d+),")


def gpus(node: Node) -> Result:
    """The GPUs nvidia-smi lists against the catalog's count for the instance type."""
    if why := node.unrelated("gpu"):
        return Result(check="gpus", status=NOT_APPLICABLE, detail=why)
    expected = node.instance.gpu_count
    rows, problem = _nvidia_smi(node, ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"])
    if problem:
        return Result(check="gpus", status=FAIL, detail=f"{problem}: {node.instance.name} has {expected} GPUs")
    status = OK if len(rows) == expected else FAIL
    return Result(
        check="gpus",
        status=status,
        detail=f"{NVIDIA_SMI} lists {len(rows)} GPU(s); {node.instance.name} has {expected}",
    )


def gpu_errors(node: Node) -> Result:
    """Uncorrectable ECC errors since the driver loaded, pages pending retirement, failed row remapping."""
    if why := node.unrelated("gpu"):
        return Result(check="gpu-errors", status=NOT_APPLICABLE, detail=why)
    rows, problem = _nvidia_smi(node, [f"--query-gpu={','.join(ERROR_FIELDS)}", "--format=csv,noheader"])
    if problem:
        return Result(check="gpu-errors", status=FAIL, detail=problem)
    found, lifetime = [], 0
    for index, bus, volatile, aggregate, pending in ((row + [""] * 5)[:5] for row in rows):
        if _number(volatile):
            found.append(f"GPU {index} ({bus}): {_number(volatile)} uncorrectable ECC error(s) since the driver loaded")
        if pending.lower() == "yes":
            found.append(f"GPU {index} ({bus}): a retired page is pending (reset the GPU)")
        lifetime += _number(aggregate)
    remaps, problem = _nvidia_smi(
        node, ["--query-remapped-rows=gpu_bus_id,remapped_rows.failure", "--format=csv,noheader"]
    )
    if problem and "did not answer" in problem:
        found.append(problem)
    for bus, failure in ((row + [""] * 2)[:2] for row in remaps if not problem):
        if failure.lower() == "yes" or _number(failure):
            found.append(f"GPU {bus}: row remapping failed (replace the GPU)")
    if found:
        return Result(check="gpu-errors", status=FAIL, detail="; ".join(found))
    remapping = "row remapping not reported" if problem else "no failed row remapping"
    detail = (
        f"{len(rows)} GPU(s): no uncorrectable ECC error since the driver loaded, no page pending retirement, "
        f"{remapping}"
    )
    return Result(
        check="gpu-errors",
        status=OK,
        detail=detail + (f" ({lifetime} uncorrectable over the GPUs' lifetime)" if lifetime else ""),
    )


def gpu_xid(node: Node) -> Result:
    """Fatal Xids (NVIDIA's catalog, platforms.json nvidia.fatal_xids) the driver logged since boot."""
    if why := node.unrelated("gpu"):
        return Result(check="gpu-xid", status=NOT_APPLICABLE, detail=why)
    path = node.under(KMSG)
    try:
        lines = _read_kernel_log(path)
    except PermissionError:
        if os.geteuid() != 0:
            return Result(
                check="gpu-xid", status=NOT_APPLICABLE, detail=f"{path} needs root (slurmd runs this as root)"
            )
        return Result(check="gpu-xid", status=FAIL, detail=f"cannot read the kernel log {path}: permission denied")
    except OSError as error:
        return Result(
            check="gpu-xid", status=FAIL, detail=f"cannot read the kernel log {path}: {error.strerror or error}"
        )
    fatal = service_fact("nvidia", "fatal_xids").value
    seen = [(m["xid"], m["device"]) for line in lines if (m := _XID.search(line))]
    bad = list(dict.fromkeys((xid, device) for xid, device in seen if xid in fatal))
    if bad:
        named = ", ".join(f"Xid {xid} {fatal[xid]} on {device}" for xid, device in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        return Result(
            check="gpu-xid", status=FAIL, detail=f"fatal {named}{more} since boot: reboot or replace the node"
        )
    return Result(
        check="gpu-xid", status=OK, detail=f"no fatal Xid in the kernel log since boot ({len(seen)} other Xid(s))"
    )


def _nvidia_smi(node: Node, args: list[str]) -> tuple[list[list[str]], str | None]:
    """Run nvidia-smi ARGS (CSV); return its rows, or why it gave none."""
    tool = node.which(NVIDIA_SMI)
    if tool is None:
        return [], f"{NVIDIA_SMI} not found (PATH, /usr/bin)"
    if node.budget.spent():
        return [], "not run: the checks before it used up the program's time budget"
    if NVIDIA_SMI in node.stuck:
        return [], f"not asked: {NVIDIA_SMI} did not answer before (a stuck GPU driver)"
    try:
        done = bounded.run([tool, *args], timeout=node.budget.timeout(), env=node.environ)
    except bounded.Timeout as error:
        node.stuck.add(NVIDIA_SMI)
        return [], f"{error} (a stuck GPU driver)"
    except OSError as error:
        return [], f"cannot run {tool}: {error.strerror or error}"
    if done.returncode != 0:
        said = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
        return [], f"{NVIDIA_SMI} exited {done.returncode}: {said[-1][:200] if said else 'no output'}"
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()], None


def _number(value: str) -> int:
    """Return a counter nvidia-smi printed, 0 for [N/A], [Not Supported] and the like."""
    return int(value) if value.strip().isdigit() else 0


def _read_kernel_log(path: Path) -> list[str]:
    """Return the kernel log's lines: /dev/kmsg gives one record per read and EAGAIN at its end (a file: EOF)."""
    chunks, size = [], 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while size < KMSG_MAX_BYTES:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                # The record asked for was overwritten in the ring buffer: the next read returns the next one.
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").splitlines()
