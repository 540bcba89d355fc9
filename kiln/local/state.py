"""The state file: what `up` created and started, so `down` removes exactly that."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kiln.local.errors import LocalError
from kiln.local.layout import ClusterLayout

STATE_VERSION = 1
STATE_FILE = "state.json"


@dataclass(frozen=True, kw_only=True)
class ProcessRecord:
    """A daemon `up` started: its PID, the command it runs and when it started (to tell PID reuse)."""

    role: str
    pid: int
    argv: tuple[str, ...]
    start_ticks: int
    log: str


@dataclass(frozen=True, kw_only=True)
class ClusterState:
    """The layout plus every resource created so far; saved before each resource is created."""

    layout: ClusterLayout
    bootstrapped: bool = False
    bridge: str | None = None
    namespaces: tuple[str, ...] = ()
    veths: tuple[str, ...] = ()
    processes: tuple[ProcessRecord, ...] = ()

    def process(self, role: str) -> ProcessRecord | None:
        """Return the record of ROLE, if one was started."""
        return next((record for record in self.processes if record.role == role), None)

    def with_process(self, record: ProcessRecord) -> ClusterState:
        """Return this state with RECORD replacing any earlier record of its role."""
        others = tuple(p for p in self.processes if p.role != record.role)
        return dataclasses.replace(self, processes=(*others, record))

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["layout"] = self.layout.to_dict()
        return {"version": STATE_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict) -> ClusterState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state version {data.get('version')!r}, this kiln reads {STATE_VERSION}")
        processes = tuple(
            ProcessRecord(**{**record, "argv": tuple(record["argv"])}) for record in data.get("processes", ())
        )
        return cls(
            layout=ClusterLayout.from_dict(data["layout"]),
            bootstrapped=data.get("bootstrapped", False),
            bridge=data.get("bridge"),
            namespaces=tuple(data.get("namespaces", ())),
            veths=tuple(data.get("veths", ())),
            processes=processes,
        )


def state_path(prefix: str | Path) -> Path:
    return Path(prefix) / STATE_FILE


def load(prefix: str | Path) -> ClusterState | None:
    """Return the state under PREFIX, or None when no cluster was brought up there."""
    path = state_path(prefix)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return ClusterState.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as error:
        raise LocalError(f"{path} is not a kiln local state file ({error}); remove it by hand") from None


def save(state: ClusterState) -> None:
    """Write STATE atomically, so a crash never leaves half a record."""
    path = state_path(state.layout.prefix)
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(json.dumps(state.to_dict(), indent=2) + "\n")
    os.replace(staged, path)


@contextlib.contextmanager
def locked(prefix: str | Path) -> Iterator[None]:
    """Hold the prefix's lock, so two commands never work on one cluster at once."""
    path = Path(prefix) / ".lock"
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LocalError(f"another `kiln local` command is working on {prefix}; wait for it to finish") from None
        yield
