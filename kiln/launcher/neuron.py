"""Neuron nodes: how many NeuronCores the launcher starts processes for, and what neuron-ls sees."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.catalog import InstanceType
from kiln.launcher import bounded
from kiln.launcher.errors import UsageError

LNC_VARIABLE = "NEURON_LOGICAL_NC_CONFIG"
NEURON_LS = "neuron-ls"
TOOLS_PACKAGE = "aws-neuronx-tools"
# Where aws-neuronx-tools installs its commands; searched after PATH, which login shells may not have extended.
TOOL_DIRS = ("/opt/aws/neuron/bin",)
# neuron-ls answers in well under a second; a hung driver must not hang the readiness check.
TIMEOUT_SECONDS = 30


@dataclass(frozen=True, kw_only=True)
class NeuronCores:
    """The NeuronCores one node exposes under one LNC setting, and how that was worked out."""

    count: int
    lnc: int
    how: str


@dataclass(frozen=True, kw_only=True)
class NeuronDevice:
    """One device as neuron-ls lists it."""

    index: int
    cores: int  # NeuronCores the runtime exposes on it: logical ones, so already divided by the LNC
    lnc: int | None = None  # the LNC neuron-ls reports, where it reports one (trn2)


@dataclass(frozen=True, kw_only=True)
class NeuronScan:
    """What this node shows of its Neuron devices."""

    tool: str | None  # neuron-ls's path; None when it is not installed
    devices: tuple[NeuronDevice, ...] = ()
    error: str | None = None  # why neuron-ls gave no device list
    device_nodes: int = 0  # /dev/neuronN nodes: the devices a process here can open
    lnc_setting: str | None = None  # NEURON_LOGICAL_NC_CONFIG as this node has it

    @property
    def cores(self) -> int:
        """Return the NeuronCores neuron-ls lists over all devices."""
        return sum(device.cores for device in self.devices)


def logical_cores(instance: InstanceType, setting: str | None) -> NeuronCores:
    """Return INSTANCE's NeuronCores under the LNC SETTING (NEURON_LOGICAL_NC_CONFIG; None: the runtime default)."""
    accelerator = instance.accelerator
    lnc, origin = None, f"{accelerator.name} default"
    if (setting or "").strip():
        if not setting.strip().isdigit():
            raise UsageError(f"{LNC_VARIABLE}: expected physical NeuronCores per logical one (1 or 2), got {setting!r}")
        lnc, origin = int(setting), LNC_VARIABLE
    try:
        count = instance.logical_neuron_cores(lnc)
    except ValueError as error:
        raise UsageError(f"{LNC_VARIABLE}: {error}") from None
    lnc = instance.lnc.default if lnc is None else lnc
    how = f"{accelerator.count} {accelerator.name} x {accelerator.core_count} NeuronCores, LNC {lnc} ({origin})"
    return NeuronCores(count=count, lnc=lnc, how=how)


def device_node_count(dev: Path = Path("/dev")) -> int:
    """Return the /dev/neuronN device nodes under DEV."""
    return sum(1 for entry in dev.glob("neuron*") if entry.name[len("neuron") :].isdigit())


def find_neuron_ls(environ: Mapping[str, str] = os.environ, tool_dirs: Iterable[str] = TOOL_DIRS) -> str | None:
    """Return the neuron-ls on PATH, else in TOOL_DIRS, or None."""
    # Empty PATH entries would mean the current directory; never run a tool from there.
    search = [d for d in environ.get("PATH", "").split(os.pathsep) if d] + list(tool_dirs)
    return shutil.which(NEURON_LS, path=os.pathsep.join(search))


def parse_neuron_ls(text: str) -> tuple[NeuronDevice, ...]:
    """Return the devices in ``neuron-ls --json-output`` TEXT (a JSON list, one object per device)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"output is not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(document, list):
        raise ValueError(f"expected a JSON list of devices, got a JSON {type(document).__name__}")
    devices = []
    for position, entry in enumerate(document):
        if not isinstance(entry, dict):
            raise ValueError(f"device entry {position} is not a JSON object")
        cores = entry.get("nc_count")
        if not _count(cores):
            raise ValueError(f"device entry {position} has no NeuronCore count (nc_count: {cores!r})")
        # Fields beyond the core count vary by neuron-ls version: take them where present and sane.
        index = entry.get("neuron_device")
        lnc = entry.get("logical_neuroncore_config")
        devices.append(
            NeuronDevice(index=index if _count(index) else position, cores=cores, lnc=lnc if _count(lnc) else None)
        )
    return tuple(devices)


def scan(
    environ: Mapping[str, str] = os.environ,
    *,
    tool_dirs: Iterable[str] = TOOL_DIRS,
    dev: Path = Path("/dev"),
    timeout: float | None = None,
) -> NeuronScan:
    """Run ``neuron-ls --json-output`` (given TIMEOUT seconds, default TIMEOUT_SECONDS) and count /dev/neuronN; never
    raise."""
    found = {"device_nodes": device_node_count(dev), "lnc_setting": environ.get(LNC_VARIABLE)}
    tool = find_neuron_ls(environ, tool_dirs)
    if tool is None:
        return NeuronScan(tool=None, **found)
    command = f"{tool} --json-output"
    limit = TIMEOUT_SECONDS if timeout is None else timeout
    try:
        done = bounded.run([tool, "--json-output"], timeout=limit)
    except bounded.Timeout:
        return NeuronScan(tool=tool, error=f"{command} did not answer within {limit:g}s", **found)
    except OSError as error:
        return NeuronScan(tool=tool, error=f"cannot run {tool}: {error.strerror or error}", **found)
    if done.returncode != 0:
        said = _last_line(done.stderr) or _last_line(done.stdout) or "no output"
        return NeuronScan(tool=tool, error=f"{command} exited {done.returncode}: {said}", **found)
    try:
        devices = parse_neuron_ls(done.stdout)
    except ValueError as error:
        return NeuronScan(tool=tool, error=f"{command}: {error}", **found)
    return NeuronScan(tool=tool, devices=devices, **found)


def _count(value: Any) -> bool:
    # JSON true/false are ints to Python; neither is a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
