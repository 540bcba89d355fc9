"""Write only where kiln may: stage beside the target, rename into place, never remove what kiln did not make.

Every kiln command that writes a directory or a file goes through here. A directory is replaced only when
it carries kiln's marker from an earlier write (or is empty); the filesystem root, the home directory, the
current directory and its ancestors are refused outright, whatever they hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kiln.contracts.errors import InputError

MARKER = ".kiln-output"


class UnsafeOutput(InputError):
    """A write or removal kiln refuses, because it could destroy what kiln did not create."""


def _resolved(path: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path))).resolve()


def protected_reason(path: Path | str, *, cwd: Path | None = None, home: Path | None = None) -> str | None:
    """Return why PATH may never be replaced or removed as a whole (root, home, cwd or an ancestor), else None."""
    target = _resolved(path)
    here = _resolved(cwd or Path.cwd())
    home_dir = _resolved(home or Path.home())
    if target == Path(target.anchor):
        return "it is the filesystem root"
    if target == home_dir:
        return "it is the home directory"
    if target == here:
        return "it is the current directory"
    if target in here.parents:
        return "it contains the current directory"
    return None


def is_kiln_output(path: Path | str) -> bool:
    """Return True when PATH is a directory that kiln made (it carries kiln's marker file)."""
    return (Path(path) / MARKER).is_file()


def check_replaceable(target: Path, what: str) -> None:
    """Raise UnsafeOutput unless TARGET is missing, empty, or a directory kiln made (and not protected)."""
    reason = protected_reason(target)
    if reason:
        raise UnsafeOutput(f"{what}: refusing {target}: {reason}; choose a new directory")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise UnsafeOutput(f"{what}: refusing {target}: it exists and is not a directory; choose a new directory")
    if target.is_dir() and any(target.iterdir()) and not is_kiln_output(target):
        raise UnsafeOutput(
            f"{what}: refusing {target}: it is not empty and kiln did not make it (no {MARKER}); "
            "choose a new or empty directory"
        )


def _write_marker(directory: Path, what: str) -> None:
    (directory / MARKER).write_text(json.dumps({"made_by": "kiln", "what": what}) + "\n")


@contextlib.contextmanager
def replaced_directory(target: Path | str, *, what: str) -> Iterator[Path]:
    """Yield a fresh staging directory beside TARGET; on success, mark it and rename it into TARGET's place.

    TARGET may be missing, empty, or a directory kiln made before; anything else raises UnsafeOutput before a
    single byte is written. On failure the staging directory is removed and TARGET is left as it was.
    """
    target = Path(os.path.abspath(os.path.expanduser(target)))
    check_replaceable(target, what)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.kiln-new-", dir=target.parent))
    try:
        yield staging
        _write_marker(staging, what)
        staging.chmod(0o755)
        _swap_into_place(staging, target, what)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, target: Path, what: str) -> None:
    # Checked again: the target may have changed while the staging directory was being written.
    check_replaceable(target, what)
    if not target.exists():
        os.rename(staging, target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.kiln-old-", dir=target.parent))
    os.rename(target, retired / "previous")
    os.rename(staging, target)
    previous = retired / "previous"
    if is_kiln_output(previous):
        shutil.rmtree(retired)
    else:
        # It was empty when checked; rmdir (never rmtree) keeps anything that arrived since.
        os.rmdir(previous)
        os.rmdir(retired)


def claim_directory(target: Path | str, *, what: str) -> Path:
    """Create TARGET (or take an empty one, or one kiln made) as kiln's own, and mark it; return its path."""
    path = Path(os.path.abspath(os.path.expanduser(target)))
    check_replaceable(path, what)
    path.mkdir(parents=True, exist_ok=True)
    if not is_kiln_output(path):
        _write_marker(path, what)
    return path


def remove_owned_directory(target: Path | str, *, what: str) -> None:
    """Remove TARGET as a whole, only when kiln made it and it is not a protected path."""
    path = Path(os.path.abspath(os.path.expanduser(target)))
    reason = protected_reason(path)
    if reason:
        raise UnsafeOutput(f"{what}: refusing to remove {path}: {reason}")
    if path.is_symlink() or not is_kiln_output(path):
        raise UnsafeOutput(f"{what}: refusing to remove {path}: kiln did not make it (no {MARKER})")
    shutil.rmtree(path)


def check_file_target(target: Path | str, what: str) -> Path:
    """Return TARGET as an absolute path a file may be written to; raise UnsafeOutput for a directory."""
    path = Path(os.path.abspath(os.path.expanduser(target)))
    if path.is_dir():
        raise UnsafeOutput(f"{what}: refusing {path}: it is a directory; name a file")
    return path


def write_file_atomically(target: Path | str, content: str | bytes, *, what: str) -> Path:
    """Write CONTENT to a temporary file beside TARGET and rename it over TARGET; refuse a directory target."""
    path = check_file_target(target, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staged = tempfile.mkstemp(prefix=f".{path.name}.kiln-new-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content.encode() if isinstance(content, str) else content)
        os.chmod(staged, 0o644)
        os.replace(staged, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        raise
    return path
