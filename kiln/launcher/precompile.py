"""kiln-launch --precompile: run the workers under Neuron's neuron_parallel_compile.

neuron_parallel_compile (torch-neuronx's command, kiln.catalog.nccl.precompile_command) wraps a training command: it
runs it in graph-extraction mode, then compiles the graphs it saw in parallel into the Neuron Persistent Cache: the
job's and node's directory on FSx the launcher chose (kiln.launcher.compile_cache). The training run afterwards, of
the same job name on the same node rank, finds them there. The
launcher otherwise runs torch.distributed.run in its own process; here it runs it as the wrapped command instead,
with the same arguments, so the precompile run extracts the graphs the training run will want.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kiln.catalog import InstanceType
from kiln.catalog.nccl import precompile_command
from kiln.launcher.errors import LaunchError, UsageError
from kiln.launcher.runner import LaunchResult


def wrapper(
    facts: InstanceType | None, type_name: str | None, environ: Mapping[str, str], executable: str = sys.executable
) -> list[str]:
    """Return the command that precompiles around torch.distributed.run's arguments on this node; UsageError on a
    type without Neuron devices, LaunchError where neuron_parallel_compile is not installed."""
    command = precompile_command()
    if facts is None or not facts.neuron_count:
        what = f"{type_name} has no Neuron devices" if facts is not None else "this node's instance type is unknown"
        raise UsageError(f"--precompile: {what}; {command} precompiles Neuron graphs only")
    # PATH first (Neuron's training containers put it there), then beside this Python: a venv that installed
    # torch-neuronx keeps its console scripts in its bin. Empty PATH entries would mean the current directory.
    search = [d for d in environ.get("PATH", "").split(os.pathsep) if d] + [str(Path(executable).parent)]
    found = shutil.which(command, path=os.pathsep.join(search))
    if found is None:
        raise LaunchError(
            f"--precompile: {command} is not on PATH nor beside {executable}: it comes with torch-neuronx (Neuron's "
            "PyTorch training containers have it); run kiln-launch where torch-neuronx is installed"
        )
    return [found, executable, "-m", "torch.distributed.run"]


def run(command: Sequence[str]) -> LaunchResult:
    """Run COMMAND (the wrapper and torch.distributed.run's arguments) and return how it ended."""
    try:
        done = subprocess.run(list(command), check=False)
    except OSError as error:
        return LaunchResult(exit_code=1, status="launch_failed", message=f"cannot run {command[0]}: {error}")
    if done.returncode == 0:
        return LaunchResult(exit_code=0, status="succeeded")
    # A negative return code is a signal; report it the way a shell would.
    code = done.returncode if done.returncode > 0 else 128 - done.returncode
    return LaunchResult(
        exit_code=code, status="failed", message=f"{Path(command[0]).name} exited with {done.returncode}"
    )
