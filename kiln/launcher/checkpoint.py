"""Save training state every K steps under <checkpoint_dir>/<job id> and resume from the newest complete one.

Layout: ``<checkpoint_dir>/<job id>/step-00000120/{state.pt,manifest.json}``.
Rank 0 writes ``state.pt`` through a temporary file in the same directory
(fsync, then rename), then the manifest the same way; a step directory counts
only when its manifest exists and names a file of the recorded size, so a
crash mid-save leaves nothing a restart would load. The newest ``keep``
complete checkpoints survive; older ones and abandoned partial saves go.

    ckpt = Checkpointer.from_env(every=50)
    resumed = ckpt.load_latest()
    start = resumed.step + 1 if resumed else 1
    for step in range(start, steps + 1):
        ...
        if ckpt.due(step):
            ckpt.save(step, {"model": ..., "optim": ...})
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from kiln.launcher.paths import checkpoint_dir

STATE_FILE = "state.pt"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
_STEP_DIR = re.compile(r"step-(\d{8,})")


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    step: int
    path: Path


@dataclass(frozen=True, kw_only=True)
class Resumed:
    """A loaded checkpoint: its step and the state saved with it."""

    step: int
    state: dict[str, Any]
    path: Path


class Checkpointer:
    """Save every EVERY steps into JOB_DIR, keep the newest KEEP, load the newest complete one."""

    def __init__(self, job_dir: Path | str, *, every: int, keep: int = 3, rank: int = 0) -> None:
        if every < 1:
            raise ValueError(f"every: expected >= 1 (got {every})")
        if keep < 1:
            raise ValueError(f"keep: expected >= 1 (got {keep})")
        self.job_dir = Path(job_dir)
        self.every = every
        self.keep = keep
        self.rank = rank

    @classmethod
    def from_env(cls, *, every: int, keep: int = 3, environ: Mapping[str, str] = os.environ) -> Checkpointer:
        """Build from what kiln-launch exports to workers: KILN_CHECKPOINT_DIR, KILN_JOB_ID, RANK."""
        job_id = environ.get("KILN_JOB_ID")
        if not job_id:
            raise ValueError("KILN_JOB_ID is not set: start the script with kiln-launch, or set it")
        rank = int(environ.get("RANK", "0"))
        return cls(checkpoint_dir(environ) / job_id, every=every, keep=keep, rank=rank)

    def due(self, step: int) -> bool:
        """Return whether STEP ends on a checkpoint boundary."""
        return step % self.every == 0

    def step_dir(self, step: int) -> Path:
        """Return the directory for STEP's checkpoint."""
        return self.job_dir / f"step-{step:08d}"

    def save(self, step: int, state: Mapping[str, Any]) -> Path | None:
        """Write STATE for STEP atomically (rank 0 only); return its directory on rank 0."""
        if self.rank != 0:
            return None
        directory = self.step_dir(step)
        directory.mkdir(parents=True, exist_ok=True)
        state_path = directory / STATE_FILE
        _atomic_write(state_path, lambda handle: torch.save(dict(state), handle))
        manifest = {
            "format": MANIFEST_FORMAT,
            "step": step,
            "files": {STATE_FILE: state_path.stat().st_size},
            "saved_at": time.time(),
        }
        _atomic_write(directory / MANIFEST_FILE, lambda handle: handle.write(json.dumps(manifest).encode()))
        self._prune(keep_also=directory)
        return directory

    def complete(self) -> list[Checkpoint]:
        """Return the complete checkpoints on disk, oldest first."""
        found = []
        for step, directory in self._step_dirs():
            if _is_complete(directory, step):
                found.append(Checkpoint(step=step, path=directory))
        return found

    def latest(self) -> Checkpoint | None:
        """Return the newest complete checkpoint, or None."""
        complete = self.complete()
        return complete[-1] if complete else None

    def load_latest(self, map_location: str | torch.device = "cpu") -> Resumed | None:
        """Load the newest complete checkpoint; every rank gets the one rank 0 chose."""
        latest = self.latest()
        step = latest.step if latest else None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            step = _agree(step)
        if step is None:
            return None
        directory = self.step_dir(step)
        state = torch.load(directory / STATE_FILE, map_location=map_location, weights_only=True)
        return Resumed(step=step, state=state, path=directory)

    def _step_dirs(self) -> list[tuple[int, Path]]:
        if not self.job_dir.is_dir():
            return []
        found = []
        for entry in self.job_dir.iterdir():
            match = _STEP_DIR.fullmatch(entry.name)
            if match and entry.is_dir():
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _prune(self, keep_also: Path) -> None:
        complete = self.complete()
        survivors = {c.path for c in complete[-self.keep :]} | {keep_also}
        complete_dirs = {c.path for c in complete}
        newest = complete[-1].step
        for step, directory in self._step_dirs():
            # Old complete checkpoints beyond KEEP go, and so do partial saves a crash
            # abandoned before the newest complete one; nothing will ever load them.
            if directory not in survivors and (directory in complete_dirs or step < newest):
                shutil.rmtree(directory, ignore_errors=True)


def _agree(step: int | None) -> int | None:
    """Return rank 0's STEP on every rank: ranks scanning a shared file system must not disagree."""
    # A tensor, not broadcast_object_list: that one needs numpy, which nodes may lack.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    chosen = torch.tensor([-1 if step is None else step], dtype=torch.int64, device=device)
    dist.broadcast(chosen, src=0)
    value = int(chosen.item())
    return None if value < 0 else value


def _is_complete(directory: Path, step: int) -> bool:
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("step") != step or not manifest.get("files"):
        return False
    for name, size in manifest["files"].items():
        try:
            if (directory / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def _atomic_write(path: Path, write) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    # The rename is durable only once the directory entry is on disk.
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
