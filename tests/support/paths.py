"""Where things are in the repository: its root, the example specs, the pinned Node tools."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NODE_BIN = ROOT / "node_modules" / ".bin"
