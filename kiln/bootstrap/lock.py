"""The lock file: sha256 of the downloads whose publisher gives no digest, computed once, enforced by nodes.

`kiln bootstrap lock --spec cluster.yaml` downloads each such file once, on a machine with internet, and writes
the lock the spec names (software.lock_file). Synthesis renders the locked digests into the bundle, and a node
refuses a file whose sha256 differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kiln.bootstrap.artifacts import Artifact, artifact_table
from kiln.catalog.names import SHA256, VERSION
from kiln.contracts.errors import Failure, InputError, KilnError

LOCK_FORMAT = 1
MAX_LOCK_BYTES = 1024 * 1024
# A kiln lock nests three levels (the document, its artifacts list, an entry). Python's JSON decoder recurses once
# per level and fails past about a thousand (1,100 '[' are 2.2 KB), so nesting is counted before decoding: 16 leaves
# room for a hand-edited mistake to get the line about its field rather than this one.
MAX_LOCK_DEPTH = 16
# The most of a value a refusal echoes.
_ECHO_CHARS = 80
# Far above any file kiln locks (enroot packages and the pyxis source are well under 10 MB).
MAX_DOWNLOAD_BYTES = 2 * 1024**3
DOWNLOAD_TIMEOUT_SECONDS = 60
_CHUNK = 1024 * 1024
_ABOUT = (
    "sha256 of the node downloads whose publisher gives no digest, written by `kiln bootstrap lock`; "
    "nodes refuse a file whose digest differs. Rerun the command after changing a pinned version."
)


class LockError(KilnError):
    """A lock file kiln cannot use (LockUnreadable), or a download that cannot be locked (LockFailed)."""


class LockUnreadable(LockError, InputError):
    """A lock file kiln cannot read or use; str() names the file and what is wrong."""


class LockFailed(LockError, Failure):
    """A download that cannot be locked: it failed, it is too large, or its digest changed."""


@dataclass(frozen=True, kw_only=True)
class LockedFile:
    """One locked download: the exact URL and the digest of the bytes it served."""

    name: str
    version: str
    url: str
    sha256: str
    size_bytes: int


def _got(value: object) -> str:
    """Return VALUE as a refusal quotes it: repr() (so controls are escaped), cut past _ECHO_CHARS with its length."""
    if isinstance(value, str) and len(value) > _ECHO_CHARS:
        return f"{value[:_ECHO_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= _ECHO_CHARS else f"{text[:_ECHO_CHARS]}... ({len(text)} characters)"


def _entry(path: Path, number: int, raw: Any) -> LockedFile:
    where = f"{path}: artifacts[{number}]"
    if not isinstance(raw, dict) or set(raw) != {"name", "version", "url", "sha256", "size_bytes"}:
        raise LockUnreadable(f"{where}: must have exactly name, version, url, sha256, size_bytes")
    entry = LockedFile(**raw)
    if entry.name not in artifact_table():
        raise LockUnreadable(f"{where}: name: got {_got(entry.name)}, allowed: {', '.join(artifact_table())}")
    if not isinstance(entry.version, str) or not VERSION.fullmatch(entry.version):
        raise LockUnreadable(f"{where}: version: got {_got(entry.version)}, allowed: a version such as 1.2.3")
    if not isinstance(entry.url, str) or not entry.url.startswith("https://") or not entry.url.isprintable():
        raise LockUnreadable(f"{where}: url: got {_got(entry.url)}, allowed: an https:// URL")
    if not isinstance(entry.sha256, str) or not SHA256.fullmatch(entry.sha256):
        raise LockUnreadable(f"{where}: sha256: got {_got(entry.sha256)}, allowed: 64 lowercase hex digits")
    if isinstance(entry.size_bytes, bool) or not isinstance(entry.size_bytes, int) or entry.size_bytes < 0:
        raise LockUnreadable(f"{where}: size_bytes: got {_got(entry.size_bytes)}, allowed: an integer >= 0")
    return entry


def _nesting(raw: bytes) -> int:
    """Return how deeply the JSON text RAW nests arrays and objects (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def _read_lock_bytes(path: Path) -> bytes:
    """Return at most MAX_LOCK_BYTES + 1 bytes of PATH, refusing anything but a regular file without blocking."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise LockUnreadable(f"{path}: not a regular file")
        # Non-blocking: a FIFO put in the file's place since the stat must not hang the reader.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise LockUnreadable(f"{path}: not a regular file") from None
    except OSError as error:
        raise LockUnreadable(f"{path}: cannot be read ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LockUnreadable(f"{path}: not a regular file")
        chunks, left = [], MAX_LOCK_BYTES + 1  # the size can grow while the file is read
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as error:
        raise LockUnreadable(f"{path}: cannot be read ({error.strerror})") from None
    finally:
        os.close(fd)


def read_lock(path: Path) -> tuple[LockedFile, ...]:
    """Return the entries of the lock file at PATH; raise LockUnreadable naming the file and what is wrong."""
    raw = _read_lock_bytes(path)
    if len(raw) > MAX_LOCK_BYTES:
        raise LockUnreadable(f"{path}: larger than {MAX_LOCK_BYTES} bytes; a lock holds a few entries")
    if _nesting(raw) > MAX_LOCK_DEPTH:
        raise LockUnreadable(
            f"{path}: nests deeper than {MAX_LOCK_DEPTH} levels; not a kiln lock (format {LOCK_FORMAT} nests 3)"
        )
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise LockUnreadable(f"{path}: not JSON ({error})") from None
    except RecursionError:
        # MAX_LOCK_DEPTH keeps the decoder far from Python's limit; this keeps any miss one line.
        raise LockUnreadable(f"{path}: nests too deeply to read; not a kiln lock") from None
    shaped = isinstance(data, dict) and data.get("kiln_lock") == LOCK_FORMAT
    if not shaped or not isinstance(data.get("artifacts"), list):
        raise LockUnreadable(f"{path}: not a kiln lock (format {LOCK_FORMAT}: kiln_lock, about, artifacts)")
    entries = tuple(_entry(path, number, raw) for number, raw in enumerate(data["artifacts"]))
    urls = [entry.url for entry in entries]
    if len(set(urls)) != len(urls):
        raise LockUnreadable(f"{path}: a URL is locked twice")
    return entries


def locked_digests(entries: Iterable[LockedFile]) -> dict[str, str]:
    """Return URL -> sha256 of ENTRIES, the form a BootstrapConfig takes."""
    return {entry.url: entry.sha256 for entry in entries}


def lock_text(entries: Iterable[LockedFile]) -> str:
    """Return the lock file for ENTRIES, sorted so that the same lock is the same text."""
    ordered = sorted(entries, key=lambda entry: (entry.name, entry.url))
    document = {"kiln_lock": LOCK_FORMAT, "about": _ABOUT, "artifacts": [asdict(entry) for entry in ordered]}
    return json.dumps(document, indent=2) + "\n"


def download_digest(url: str, *, timeout: float = DOWNLOAD_TIMEOUT_SECONDS) -> tuple[str, int]:
    """Download URL once, streaming, and return its sha256 and size; raise LockFailed on any failure."""
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - URLs come from artifacts.json
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > MAX_DOWNLOAD_BYTES:
                    raise LockFailed(f"{url}: larger than {MAX_DOWNLOAD_BYTES} bytes; refusing to lock it")
                digest.update(chunk)
    except LockFailed:
        raise
    except (OSError, ValueError) as error:
        raise LockFailed(f"{url}: download failed ({error})") from None
    return digest.hexdigest(), size


@dataclass(frozen=True, kw_only=True)
class LockPlan:
    """The lock to write and what happened to each entry (kept, downloaded, dropped)."""

    entries: tuple[LockedFile, ...]
    notes: tuple[str, ...]


def plan_lock(
    needed: Iterable[Artifact],
    existing: Iterable[LockedFile],
    *,
    refresh: bool = False,
    fetch: Callable[[str], tuple[str, int]] | None = None,
) -> LockPlan:
    """Return the lock for NEEDED: kept entries reused, the rest downloaded once; REFRESH downloads all again.

    A refreshed file whose digest differs from the lock's raises LockFailed: the publisher changed bytes that
    were already trusted, which a person must look at.
    """
    fetch = fetch or download_digest
    known = {entry.url: entry for entry in existing}
    entries, notes = [], []
    for artifact in needed:
        old = known.pop(artifact.url, None)
        if old is not None and not refresh:
            entries.append(old)
            notes.append(f"{artifact.name} {artifact.version}: kept {old.sha256}")
            continue
        sha256, size = fetch(artifact.url)
        if old is not None and old.sha256 != sha256:
            raise LockFailed(
                f"{artifact.url}: sha256 is now {sha256}, the lock has {old.sha256}: the published file changed; "
                "find out why before trusting it (the lock is unchanged)"
            )
        entries.append(
            LockedFile(name=artifact.name, version=artifact.version, url=artifact.url, sha256=sha256, size_bytes=size)
        )
        notes.append(f"{artifact.name} {artifact.version}: {sha256} ({size} bytes from {artifact.url})")
    notes.extend(f"{entry.name} {entry.version}: dropped (no longer needed)" for entry in known.values())
    return LockPlan(entries=tuple(entries), notes=tuple(notes))
