"""Deploy a synthesized environment stack by stack with the pinned CDK CLI, timing each one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Which CDK CLI and which Node.js run it are kiln.host.node_runtime's to decide; `kiln ci up` takes them from here.
from kiln.contracts.errors import Failure
from kiln.host.node_runtime import CDK_CLI_VERSION, CDK_ENV, last_line, run_cdk
from kiln.host.node_runtime import cdk_command as cdk_command


class DeployFailed(Failure):
    """A stack did not deploy; the message is one line naming it, its time and what to do."""


def check_cdk_version(cdk: list[str], environ: Mapping[str, str] | None = None) -> str:
    """Return the CLI's version; raise DeployFailed when it is not the pinned one (or does not run).

    A CLI that fails says why in its last line of output, decoded: DeployFailed carries it.
    """
    shown_cdk = " ".join(cdk)
    try:
        result = run_cdk(cdk, ["--version"], environ, capture=True)
    except OSError as exc:
        raise DeployFailed(f"CDK CLI {shown_cdk} does not run: {exc.strerror}") from None
    version = result.stdout.strip().split(" ")[0] if result.returncode == 0 else ""
    if result.returncode != 0:
        said = last_line(result.stderr) or last_line(result.stdout)
        raise DeployFailed(
            f"CDK CLI {shown_cdk} failed (exit {result.returncode})" + (f": {said}" if said else "") + ": "
            f"`npm install aws-cdk@{CDK_CLI_VERSION}` here, or set {CDK_ENV}"
        )
    if version != CDK_CLI_VERSION:
        raise DeployFailed(
            f"CDK CLI {shown_cdk} is {version or 'of no version'}, not the {CDK_CLI_VERSION} kiln is tested with: "
            f"`npm install aws-cdk@{CDK_CLI_VERSION}` here, or set {CDK_ENV}"
        )
    return version


def stack_order(assembly: Path) -> list[str]:
    """Return the assembly's stacks so that each comes after the stacks it depends on."""
    artifacts = json.loads((assembly / "manifest.json").read_text())["artifacts"]
    stacks = {name: a for name, a in artifacts.items() if a["type"] == "aws:cloudformation:stack"}
    ordered: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in ordered:
            return
        if name in path:
            raise DeployFailed(f"stack dependency cycle: {' -> '.join(path + (name,))}")
        for dependency in stacks[name].get("dependencies", []):
            if dependency in stacks:
                visit(dependency, path + (name,))
        ordered.append(name)

    for name in sorted(stacks):
        visit(name, ())
    return ordered


@dataclass
class Deployment:
    """What a deploy did: each stack's seconds and the outputs of every stack, by stack then output key."""

    seconds: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)


def deploy_stacks(
    assembly: Path,
    *,
    cdk: list[str],
    workdir: Path,
    progress: Callable[[str], None],
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Deployment:
    """Deploy every stack of ASSEMBLY in dependency order, one `cdk deploy` each, non-interactively.

    Raises DeployFailed at the first stack that fails; the stacks before it stay deployed (`kiln ci down`
    removes them, and so does the reaper when the TTL ends, since it deploys first).
    """
    done = Deployment()
    for stack in stack_order(assembly):
        outputs_file = workdir / f"{stack}.outputs.json"
        arguments = [
            "deploy",
            stack,
            "--app",
            str(assembly),
            "--exclusively",
            "--require-approval",
            "never",
            "--ci",
            "--progress",
            "events",
            "--outputs-file",
            str(outputs_file),
        ]
        progress(f"{stack}: deploying")
        started = clock()
        result = run_cdk(cdk, arguments, environ)
        seconds = clock() - started
        if result.returncode != 0:
            raise DeployFailed(
                f"{stack}: deploy failed after {seconds:.0f} s (cdk exit {result.returncode}); the output above says "
                "why. Stacks before it stay up until `kiln ci down` (or the reaper, when a TTL is set)"
            )
        done.seconds[stack] = seconds
        if outputs_file.exists():
            done.outputs.update(json.loads(outputs_file.read_text()))
        progress(f"{stack}: deployed in {seconds:.0f} s")
    return done


def github_output_lines(environment: str, region: str, outputs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Return `key=value` lines for $GITHUB_OUTPUT: the environment, its region and every stack output."""
    lines = [f"environment={environment}", f"region={region}"]
    for stack, values in outputs.items():
        part = stack.removeprefix(f"{environment}-")
        lines += [f"{part}-{key}={value}" for key, value in values.items() if "\n" not in str(value)]
    return lines


def write_github_output(lines: list[str], environ: Mapping[str, str]) -> bool:
    """Append LINES to the file $GITHUB_OUTPUT names; return False when there is none."""
    target = environ.get("GITHUB_OUTPUT")
    if not target:
        return False
    with open(target, "a", encoding="utf-8") as out:
        out.write("".join(f"{line}\n" for line in lines))
    return True
