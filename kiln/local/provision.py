"""Render the `local` bootstrap target and run it: packages, slurm.conf, munge key, launcher venv."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

from kiln.bootstrap import BootstrapConfig, render_bundle
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import ClusterLayout
from kiln.local.progress import Progress
from kiln.stacks.bootstrap_config import config_from_spec

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
        # Prometheus) are the ones the layout recorded when the cluster was planned.
        return dataclasses.replace(
            config,
            checkpoint_dir=str(layout.checkpoint_dir),
            exporters=layout.exporters,
            prometheus_agent=layout.prometheus and bool(layout.exporters),
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
    console = layout.log_dir / "bootstrap-console.log"
    console.parent.mkdir(parents=True, exist_ok=True)
    failed: tuple[str, str] | None = None
    errors: list[str] = []
    with open(console, "w") as log:
        process = subprocess.Popen(
            ["bash", str(entry)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_bootstrap_env(layout),
        )
        for line in process.stdout:
            log.write(line)
            line = line.rstrip("\n")
            if match := _STEP_START.search(line):
                progress.begin(f"bootstrap step {match.group(1)}")
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
    raise LocalFailure(f"bootstrap step {step} failed: {reason}; full log: {layout.bootstrap_log}")
