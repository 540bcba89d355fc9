"""Render the `local` bootstrap target and run it: packages, slurm.conf, munge key, launcher venv."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

from kiln.bootstrap import BootstrapConfig, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.contracts.bundle import USER_STEP_PREFIX
from kiln.local import daemons
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout, NodeLayout
from kiln.local.progress import Progress
from kiln.node_config.translate import config_from_spec

_STEP_START = re.compile(r"\[(\w+)\] start$")
_STEP_DONE = re.compile(r"\[(\w+)\] done in \d+s$")
_FAILED = re.compile(r"FAILED: step (\w+) (.*)")
_ERROR = re.compile(r"\[(\w+)\] error: (.*)")
_GAVE_UP = re.compile(r"\[(\w+)\] (gave up after .*)")
# lib.sh's knobs that pass through from the caller's environment.
TUNABLES = frozenset(
    {
        "KILN_RETRY_ATTEMPTS",
        "KILN_RETRY_DELAY_SECONDS",
        "KILN_RETRY_MAX_DELAY_SECONDS",
        "KILN_LOCK_TIMEOUT_SECONDS",
        "KILN_LOCK_POLL_SECONDS",
    }
)
# Steps whose failure means packages could not be installed.
_INSTALL_STEPS = ("install_slurm", "install_munge", "install_launcher")


def load_spec_file(path: str):
    """Load and validate the spec at PATH; raise LocalError listing every problem."""
    from kiln.spec import SpecError, load_spec

    try:
        return load_spec(path)
    except SpecError as error:
        raise LocalError("; ".join(error.lines_out())) from None
    except OSError as error:
        raise LocalError(f"--spec: {error}") from None


def bootstrap_config(layout: ClusterLayout) -> BootstrapConfig:
    """Return the `local` target's config for LAYOUT (from its spec, when it has one)."""
    local = layout.local_cluster()
    try:
        if layout.spec:
            config = config_from_spec(load_spec_file(layout.spec), "local", local=local)
        else:
            config = BootstrapConfig(target="local", os="debian12", local=local)
        # Checkpoints stay under the prefix: a spec's /fsx path means nothing on this machine. The exporters (and
        # Prometheus, and code-server's user) are the ones the layout recorded when the cluster was planned.
        return dataclasses.replace(
            config,
            checkpoint_dir=str(layout.checkpoint_dir),
            exporters=layout.exporters,
            prometheus_agent=layout.prometheus and bool(layout.exporters),
            # code-server runs on node 1, which the bundle serves as its controller, as the user the layout recorded.
            code_server_role="controller" if layout.code_server_user else "",
            code_server_user=layout.code_server_user,
        )
    except ValueError as error:
        raise LocalError(f"bootstrap config: {error}") from None


def render(layout: ClusterLayout) -> Path:
    """Render the bundle into the prefix and return its entry point."""
    bundle = render_bundle(bootstrap_config(layout), layout.bundle_dir)
    return bundle.directory / bundle.entry_point


def _bootstrap_env(layout: ClusterLayout) -> dict[str, str]:
    # Any other KILN_ variable of the calling shell (KILN_ROOT, KILN_LOG, ...) would move the
    # bootstrap away from this prefix.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("KILN_", "SLURM_")) or name in TUNABLES
    }
    env["KILN_ROOT"] = layout.prefix
    # The venv's Python must match the torch that torchlink shares with it.
    env["KILN_PYTHON"] = sys.executable
    return env


def run_bootstrap(entry: Path, layout: ClusterLayout, progress: Progress) -> None:
    """Run ENTRY, showing each bootstrap step as a phase; raise a clear error when a step fails."""
    _run_steps(["bash", str(entry)], _bootstrap_env(layout), layout, progress, console="bootstrap-console.log")


def node_steps(layout: ClusterLayout) -> tuple[str, ...]:
    """Return the user's steps (spec bootstrap.steps) for compute nodes in LAYOUT's rendered bundle, install ones first:
    each node runs them when it starts (run_node_steps). Those for controller or login nodes ran in the bootstrap, on
    the controller's host, which is also where jobs are submitted from (the local cluster has no login node)."""
    values = parse_env_file((layout.bundle_dir / "bundle.env").read_text())
    steps = (*values["KILN_INSTALL_STEPS"].split(), *values["KILN_CONFIGURE_STEPS"].split())
    return tuple(
        step
        for step in steps
        if step.startswith(USER_STEP_PREFIX)
        and "worker" in values.get(f"KILN_USER_STEP_{step.removeprefix(USER_STEP_PREFIX).upper()}_ROLES", "").split()
    )


def run_node_steps(layout: ClusterLayout, node: NodeLayout, steps: tuple[str, ...], progress: Progress) -> None:
    """Run STEPS of the rendered bundle on NODE as a compute node (role worker): in its network namespace, with its
    host name, through the bundle's kiln-step. The nodes share the prefix, as nodes of one image share its files: an
    install step runs on the first node and its marker stands for the rest; a configure step runs on every node."""
    argv = [*daemons.node_launch(layout, node), "bash", str(layout.bundle_dir / "kiln-step"), *steps]
    # The host's os-release, as the local entry point reads it (kiln-step has no default of its own for it).
    env = {**_bootstrap_env(layout), "KILN_NODE_ROLE": "worker", "KILN_OS_RELEASE": "/etc/os-release"}
    _run_steps(argv, env, layout, progress, console=f"bootstrap-{node.name}-console.log", on=node.name)


def _run_steps(
    argv: list[str], env: dict[str, str], layout: ClusterLayout, progress: Progress, *, console: str, on: str = ""
) -> None:
    """Run ARGV (the bootstrap or kiln-step), showing each step as a phase (on node ON); raise a clear error when a
    step fails."""
    where = f" on {on}" if on else ""
    console_log = layout.log_dir / console
    console_log.parent.mkdir(parents=True, exist_ok=True)
    failed: tuple[str, str] | None = None
    errors: list[str] = []
    with open(console_log, "w") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for line in process.stdout:
            log.write(line)
            line = line.rstrip("\n")
            if match := _STEP_START.search(line):
                progress.begin(f"bootstrap step {match.group(1)}{where}")
            elif _STEP_DONE.search(line):
                progress.end()
            elif (match := _ERROR.search(line)) or (match := _GAVE_UP.search(line)):
                errors.append(match.group(2))
            elif match := _FAILED.search(line):
                failed = (match.group(1), match.group(2))
        code = process.wait()
    if code == 0:
        progress.end()
        return
    progress.end("failed")
    step, detail = failed or ("?", f"exited with code {code}")
    reason = errors[-1] if errors else detail
    if step in _INSTALL_STEPS:
        raise LocalFailure(
            f"packages could not be installed (bootstrap step {step}): {reason}; full log: {layout.bootstrap_log}"
        )
    raise LocalFailure(f"bootstrap step {step} failed{where}: {reason}; full log: {layout.bootstrap_log}")
