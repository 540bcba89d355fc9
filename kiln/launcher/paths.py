"""Where the launcher keeps things; no torch here, so bad input fails fast."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

DEFAULT_CHECKPOINT_DIR = "/fsx/checkpoints"


def checkpoint_dir(environ: Mapping[str, str] = os.environ, flag: str | None = None) -> Path:
    """Return the checkpoint root: --checkpoint-dir, else KILN_CHECKPOINT_DIR, else /fsx/checkpoints."""
    return Path(flag or environ.get("KILN_CHECKPOINT_DIR") or DEFAULT_CHECKPOINT_DIR)


def not_own_directory(directory: Path) -> str | None:
    """Return why DIRECTORY is not this user's own (a symbolic link, not a directory, another owner, or group/other
    may write it), or None when it is: what runs from it (an image, compiled graphs) runs as this user. The link
    itself is judged, never its target: in a shared parent anyone may plant a link named as another user's directory."""
    info = directory.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"a symbolic link to {os.readlink(directory)}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return f"owner uid {info.st_uid}, mode {info.st_mode & 0o777:o}"
    return None
