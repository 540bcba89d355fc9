"""Run jsii (the CDK's Node.js side) on the project's pinned Node.js when kiln runs from a checkout."""

from __future__ import annotations

import os
from pathlib import Path

PINNED_NODE_BIN = Path(__file__).resolve().parent.parent / "node_modules" / ".bin"


def use_pinned_node() -> None:
    """Put the checkout's node_modules/.bin (Node 22 from package.json) first on PATH, if it is there.

    Call before the first `import aws_cdk`: jsii starts Node.js then, and the machine's Node may be older.
    """
    path = os.environ.get("PATH", "")
    if (PINNED_NODE_BIN / "node").exists() and str(PINNED_NODE_BIN) not in path.split(os.pathsep):
        os.environ["PATH"] = f"{PINNED_NODE_BIN}{os.pathsep}{path}"
