"""The storage checks of ``kiln-launch health``: the shared file system answers, and containers have room.

Both look at a directory only from a child process with a deadline (kiln.launcher.bounded.probe): a hung Lustre
mount blocks the child in the kernel, never this program.
"""

from __future__ import annotations

import re
from pathlib import Path

from kiln.catalog.names import SCRATCH_DIR
from kiln.launcher import bounded
from kiln.launcher.health_checks import FAIL, LOCAL, NOT_APPLICABLE, OK, Node, Result

# Where the kernel lists this process's mounts (proc(5)); under the node's root, as the rest of the launcher reads
# /sys and /dev.
MOUNTS = "/proc/self/mounts"
LUSTRE = "lustre"
# Where configure_container_storage records the image cache on the node's local NVMe, beside enroot's storage.
CONTAINER_CACHE_RECORD = "/etc/kiln/container-cache"
# The container runtimes' own stores where kiln recorded none (EKS nodes: containerd; docker where it runs).
RUNTIME_STORES = ("/var/lib/containerd", "/var/lib/docker")
# A local cluster's node stands in for a cloud node's local scratch, where kiln puts container storage, with its own
# SCRATCH_DIR under the prefix: not the /tmp its jobs write to, so a full container store keeps new work off the node
# without breaking the job that runs there, as on a cloud node.
# The free space a node needs where containers go: kiln's choice, room to import one more training image (enroot
# keeps the downloaded layers, their unpacked tree and the squashfs it builds at once, and PyTorch training images
# run to tens of GB unpacked). The local cluster runs no containers: 1 GiB on its nodes. --min-free-gib sets another
# floor.
MIN_FREE_GIB = 20.0
LOCAL_MIN_FREE_GIB = 1.0
GIB = 1 << 30


def shared_fs(node: Node) -> Result:
    """The FSx for Lustre mount (where the bootstrap mounted one) is a lustre mount and answers; the checkpoint
    root answers (before the first checkpoint, its parent directory)."""
    # The mount point as this node's root places it (the root is / on a cloud node).
    mount = str(node.under(node.lustre_mount)) if node.lustre_mount else ""
    if mount:
        fstype = mounted_type(node.under(MOUNTS), mount)
        if fstype != LUSTRE:
            where = f"{fstype} is mounted there" if fstype else "nothing is mounted there"
            return Result(check="shared-fs", status=FAIL, detail=f"{mount} is not a {LUSTRE} mount ({where})")
        problem, _ = _look(node, mount)
        if problem:
            return Result(check="shared-fs", status=FAIL, detail=f"{mount} ({LUSTRE}): {problem}")
    directory = node.checkpoint_dir
    problem, seen = _look(node, directory)
    if problem:
        return Result(check="shared-fs", status=FAIL, detail=f"checkpoint root {directory}: {problem}")
    on = f" on {LUSTRE} at {mount}" if mount else ""
    if seen.missing:
        parent = str(Path(directory).parent)
        if seen.answered != parent:
            detail = f"neither the checkpoint root {directory} nor {parent} exists"
            return Result(check="shared-fs", status=FAIL, detail=detail)
        detail = f"{parent} answers{on} (the checkpoint root {directory} is not created yet)"
        return Result(check="shared-fs", status=OK, detail=detail)
    if not seen.directory:
        return Result(check="shared-fs", status=FAIL, detail=f"checkpoint root {directory} is not a directory")
    return Result(check="shared-fs", status=OK, detail=f"checkpoint root {directory} answers{on}")


def container_space(node: Node) -> Result:
    """Free space where containers go against a floor (--min-free-gib)."""
    path, floor = container_storage(node)
    if path is None:
        stores = ", ".join((CONTAINER_CACHE_RECORD, *RUNTIME_STORES))
        return Result(
            check="container-space", status=NOT_APPLICABLE, detail=f"no container storage on this node ({stores})"
        )
    problem, seen = _look(node, str(path))
    if problem:
        return Result(check="container-space", status=FAIL, detail=f"{path}: {problem}")
    if seen.free_bytes is None:
        return Result(check="container-space", status=FAIL, detail=f"{path}: not a directory")
    free, total = seen.free_bytes / GIB, (seen.total_bytes or 0) / GIB
    where = f"{path} (as {seen.answered}: {path} is not created yet)" if seen.missing else str(path)
    if free < floor:
        detail = f"{where}: {free:.2f} GiB free of {total:.2f} GiB, below the floor of {floor:g} GiB"
        return Result(check="container-space", status=FAIL, detail=detail)
    detail = f"{where}: {free:.2f} GiB free of {total:.2f} GiB (floor {floor:g} GiB)"
    return Result(check="container-space", status=OK, detail=detail)


def container_storage(node: Node) -> tuple[Path | None, float]:
    """Return where containers go on this node (under its root) and the floor of free GiB there."""
    if node.instance_name == LOCAL:
        floor = LOCAL_MIN_FREE_GIB if node.min_free_gib is None else node.min_free_gib
        return node.under(SCRATCH_DIR), floor
    floor = MIN_FREE_GIB if node.min_free_gib is None else node.min_free_gib
    try:
        recorded = node.under(CONTAINER_CACHE_RECORD).read_text().strip()
    except OSError:
        recorded = ""
    if recorded.startswith("/"):
        return node.under(recorded), floor
    store = next((node.under(s) for s in RUNTIME_STORES if node.under(s).is_dir()), None)
    return store, floor


def mounted_type(mounts: Path, mount_point: str) -> str | None:
    """Return the file system type mounted at MOUNT_POINT in the mounts table MOUNTS (the last mount there wins),
    or None."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    wanted = mount_point.rstrip("/") or "/"
    found = None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and _unescape(fields[1]) == wanted:
            found = fields[2]
    return found


def _unescape(field: str) -> str:
    # proc(5): a mount point's space, tab, newline and backslash are written as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), field)


def _look(node: Node, path: str) -> tuple[str | None, bounded.Probe | None]:
    """Probe PATH within the node's budget; return what went wrong in a few words (or None) and what was seen."""
    if node.budget.spent():
        return "not looked at: the checks before it used up the program's time budget", None
    try:
        seen = bounded.probe(path, timeout=node.budget.timeout())
    except bounded.Timeout as error:
        return f"{error} (a hung mount or disk)", None
    if seen.error:
        return seen.error, seen
    return None, seen
