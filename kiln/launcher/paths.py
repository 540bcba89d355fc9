"""Where the launcher keeps things; no torch here, so bad input fails fast."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_CHECKPOINT_DIR = "/fsx/checkpoints"


def checkpoint_dir(environ: Mapping[str, str] = os.environ, flag: str | None = None) -> Path:
    """Return the checkpoint root: --checkpoint-dir, else KILN_CHECKPOINT_DIR, else /fsx/checkpoints."""
    return Path(flag or environ.get("KILN_CHECKPOINT_DIR") or DEFAULT_CHECKPOINT_DIR)
