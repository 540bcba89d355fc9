"""Which Node.js kiln runs, decided in one place: for jsii (the CDK's Node side) and for the CDK CLI.

jsii starts Node.js on the first `import aws_cdk`, and the CDK CLI is a Node.js program. Every kiln command that
does either calls `require_node()` first (tests/test_node_runtime.py checks the source), which picks, once per
process:

1. the checkout's pinned Node (node_modules/.bin/node: Node 22 from package.json, put there by `make setup`);
2. else the `node` on PATH, when the CDK supports its major version (SUPPORTED_NODE_MAJORS);
3. else nothing: NodeUnavailable, one line that says to run `make setup`.

It names that Node in JSII_NODE (for jsii) and, when it is the pinned one, puts it first on PATH (for the CDK CLI
and npx, which run the `node` on PATH). The CDK CLI is found and run here too (`cdk_command`, `run_cdk`); no
other module spawns node, npx or cdk.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kiln.contracts.errors import Failure

PINNED_NODE_BIN = Path(__file__).resolve().parents[2] / "node_modules" / ".bin"
# The Node.js majors both halves of the CDK support. The AWS CDK supports 24.x until 2028-10-30 and 22.x until
# 2027-10-30; its support of 20.x ended on 2026-10-30
# (https://docs.aws.amazon.com/cdk/v2/guide/node-versions.html). jsii 1.142 (the runtime aws-cdk-lib 2.275 loads)
# lists ^22 and ^24 as supported and prints an 11-line end-of-life banner on Node 20 (its @jsii/check-node release
# table; https://aws.github.io/jsii/user-guides/lib-user/ has the policy). aws-cdk-lib 2.275.0's own package.json
# still says "node": ">= 20.0.0".
SUPPORTED_NODE_MAJORS = (22, 24)
# The CDK CLI kiln is tested with (package.json pins the same version for `make setup`).
CDK_CLI_VERSION = "2.1148.1"
CDK_ENV = "KILN_CDK"
JSII_NODE_ENV = "JSII_NODE"  # jsii's Python runtime starts this node instead of the `node` on PATH
VERSION_TIMEOUT_S = 30
MAKE_SETUP = "run `make setup` in the kiln checkout (it installs Node 22 into node_modules)"


class NodeUnavailable(Failure):
    """No Node.js kiln can run the CDK on; str() is one line that says what to do."""


@dataclass(frozen=True)
class NodeChoice:
    """The Node.js kiln runs: its executable, and whether it is the checkout's pinned one."""

    node: Path
    pinned: bool


def last_line(output: str | None) -> str:
    """Return the last line of a child's OUTPUT with a word in it, stripped ("" when there is none): a banner's
    frame of `!!!!` says nothing."""
    lines = [line.strip() for line in (output or "").splitlines() if any(c.isalnum() for c in line)]
    return lines[-1] if lines else ""


def node_major(node: Path | str, environ: Mapping[str, str]) -> tuple[int | None, str]:
    """Run `NODE --version`; return its major version (None when it does not run or says no version) and its text."""
    try:
        done = subprocess.run(
            [str(node), "--version"],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    text = last_line(done.stdout)
    major = text.removeprefix("v").split(".", 1)[0]
    return (int(major) if done.returncode == 0 and major.isdigit() else None), text


def choose_node(environ: Mapping[str, str], pinned_bin: Path | None = None) -> NodeChoice:
    """Return the Node.js to run: the pinned one (in PINNED_BIN, default the checkout's) if it is there, else PATH's
    if the CDK supports it.

    Raises NodeUnavailable (one line) otherwise.
    """
    pinned = (pinned_bin or PINNED_NODE_BIN) / "node"
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return NodeChoice(node=pinned.absolute(), pinned=True)
    supported = " or ".join(str(major) for major in SUPPORTED_NODE_MAJORS)
    found = shutil.which("node", path=environ.get("PATH", ""))
    if found is None:
        raise NodeUnavailable(f"no Node.js for the CDK: {MAKE_SETUP}, or put Node.js {supported} on PATH")
    major, version = node_major(found, environ)
    if major not in SUPPORTED_NODE_MAJORS:
        shown = version or "no version"
        raise NodeUnavailable(
            f"Node.js {shown} at {found} is not one the CDK supports ({supported}): {MAKE_SETUP}, "
            f"or put Node.js {supported} first on PATH"
        )
    return NodeChoice(node=Path(os.path.abspath(found)), pinned=False)


_chosen: NodeChoice | None = None


def require_node() -> NodeChoice:
    """Decide the Node.js for this process, once, and make jsii and every child use it.

    Call before the first `import aws_cdk` (of kiln.stacks.synth, kiln.review.report, kiln.stacks.app,
    kiln.constructs) and before running the CDK CLI. Raises NodeUnavailable (one line) when there is none kiln can use.
    """
    global _chosen
    if _chosen is None:
        _chosen = choose_node(os.environ)
    _point_at(os.environ, _chosen)
    return _chosen


def _point_at(environ: MutableMapping[str, str], chosen: NodeChoice) -> None:
    """Make ENVIRON run CHOSEN: jsii through JSII_NODE; the CDK CLI and npx (`env node`) through PATH."""
    environ[JSII_NODE_ENV] = str(chosen.node)
    if chosen.pinned:
        directory, path = str(chosen.node.parent), environ.get("PATH", "")
        if path.split(os.pathsep)[:1] != [directory]:
            environ["PATH"] = f"{directory}{os.pathsep}{path}" if path else directory


def use_pinned_node() -> None:
    """For test and benchmark harnesses: `require_node()` when a Node.js is there, and nothing when none is."""
    with contextlib.suppress(NodeUnavailable):
        require_node()


def cdk_command(environ: Mapping[str, str], cwd: Path) -> list[str]:
    """Return the CDK CLI to run: $KILN_CDK, else ./node_modules/.bin/cdk, else the checkout's, else `npx`.

    `npx` runs the pinned version. Raises NodeUnavailable (one line) when there is neither npx nor a CLI.
    """
    given = environ.get(CDK_ENV, "").strip()
    if given:
        return shlex.split(given)
    for local in (cwd / "node_modules" / ".bin" / "cdk", PINNED_NODE_BIN / "cdk"):
        if local.exists():
            return [str(local)]
    npx = shutil.which("npx", path=environ.get("PATH"))
    if npx is None:
        raise NodeUnavailable(
            f"no CDK CLI: {MAKE_SETUP}, or run `npm install aws-cdk@{CDK_CLI_VERSION}` here, or set {CDK_ENV}"
        )
    return [npx, "--yes", f"aws-cdk@{CDK_CLI_VERSION}"]


def run_cdk(
    cdk: Sequence[str], args: Sequence[str], environ: Mapping[str, str] | None = None, *, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the CDK CLI CDK with ARGS on the Node.js `require_node()` chose, in ENVIRON (default: this process's).

    With CAPTURE its output comes back as text (undecodable bytes replaced); without, it streams to this
    process's stdout and stderr. OSError when CDK does not start.
    """
    env = dict(os.environ if environ is None else environ)
    _point_at(env, require_node())
    return subprocess.run(
        [*cdk, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=capture,
        text=True,
        encoding="utf-8",
        errors="replace",
        check=False,
    )
