"""Specs synthesized by `python app.py` into cloud assemblies, the way the CDK CLI runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import EXAMPLES, ROOT


@dataclass(frozen=True)
class Assembly:
    """A spec synthesized by `python app.py` into its own cloud assembly."""

    spec_path: Path
    outdir: Path
    returncode: int
    stderr: str

    def templates(self) -> dict[str, dict]:
        return {
            path.name.removesuffix(".template.json"): json.loads(path.read_text())
            for path in sorted(self.outdir.glob("*.template.json"))
        }


def run_app(spec_path: Path, outdir: Path) -> subprocess.Popen:
    """Start `python app.py` for SPEC_PATH the way the CDK CLI does (context via CDK_CONTEXT_JSON)."""
    env = {**os.environ, "CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps({"spec": str(spec_path)})}
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def synthesize_examples(base: Path) -> None:
    """Synthesize every example into BASE/<stem>, all at once, and record each one's exit code and stderr."""
    running = {path.stem: run_app(path, base / path.stem) for path in EXAMPLES}
    outcomes = {}
    for stem, process in running.items():
        _, stderr = process.communicate(timeout=600)
        outcomes[stem] = {"returncode": process.returncode, "stderr": stderr}
    (base / "outcomes.json").write_text(json.dumps(outcomes))


# Fixtures whose first use costs tens of seconds on 2 cores: a test that takes one belongs to the slow tier.
SLOW_FIXTURES = frozenset({"example_assemblies"})
