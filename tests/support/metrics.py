"""Fakes for the exporters: Slurm clients that print canned text, RDMA devices in sysfs; the exposition format read."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.support.paths import ROOT

# What `sinfo --noheader --Node --all --Format=NodeList:|,...,GresUsed:|,Reason:` prints: one line per node and
# partition.
SINFO_TEXT = """\
gpu-st-p5-1|gpu|mixed|96/96/0/192|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-2)|none
gpu-st-p5-2|gpu|allocated|192/0/0/192|gpu:h100:8(S:0-1)|gpu:h100:8(IDX:0-7)|none
gpu-st-p5-3|gpu|idle~|0/192/0/192|gpu:h100:8(S:0-1)|gpu:h100:0(IDX:N/A)|none
gpu-st-p5-4|gpu|drained*|0/0/192/192|gpu:h100:8(S:0-1)|gpu:0|kiln-health: gpus: 7 of 8
gpu-st-p5-1|debug|mixed|96/96/0/192|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-2)|none
trn-st-trn1-1|trn|draining@|32/96/0/128|neuron:16|neuron:4|kiln-hung: rank 3 | step 41
cpu-1|cpu|down*|0/0/8/8|(null)|(null)|Not responding
cpu-2|cpu|idle|0/8/0/8|(null)|gpu:0|none
"""


# What `squeue --noheader --all --array --Format=Partition:|,State:|,RestartCnt:|,Reason:` prints.
SQUEUE_TEXT = """\
gpu|RUNNING|0|None
gpu|RUNNING|2|None
gpu|PENDING|0|Resources
gpu|PENDING|0|Priority
gpu,debug|PENDING|1|Resources
trn|PENDING|0|ReqNodeNotAvail, UnavailableNodes:trn-st-trn1-[2-4]
debug|COMPLETING|0|None
cpu|PENDING|0|Dependency
"""


CONTROLLER_DOWN = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"


def write_fake_command(bin_dir: Path, name: str, stdout: str = "", stderr: str = "", exit_code: int = 0) -> Path:
    """Write an executable NAME into BIN_DIR that records its arguments and environment, then prints canned text."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / f"{name}.stdout").write_text(stdout)
    (bin_dir / f"{name}.stderr").write_text(stderr)
    script = bin_dir / name
    script.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$@" > "$0.args"\n'
        'printf "SLURM_CONF=%s\\nSINFO_PARTITION=%s\\n" "${SLURM_CONF-unset}" "${SINFO_PARTITION-unset}" > "$0.env"\n'
        'cat "$0.stdout"\n'
        'cat "$0.stderr" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def write_slow_command(bin_dir: Path, name: str, seconds: int) -> Path:
    """Write an executable NAME into BIN_DIR that sleeps SECONDS (exec, so a kill reaches the sleep)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nexec sleep {seconds}\n")
    script.chmod(0o755)
    return script


def add_rdma_device(
    sysfs: Path,
    name: str,
    driver: str,
    pci: str,
    ports: Mapping[str, tuple[str, Mapping[str, str]]],
) -> Path:
    """Lay out an RDMA device as the kernel does; PORTS maps a port to its state text and hw_counters files."""
    pci_dir = sysfs / "devices" / "pci0000:00" / pci
    device_dir = pci_dir / "infiniband" / name
    (sysfs / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    device_dir.mkdir(parents=True)
    # The kernel's links are relative: class/infiniband/NAME -> the device, device -> its PCI function,
    # driver -> bus/pci/drivers/DRIVER.
    os.symlink(os.path.relpath(sysfs / "bus" / "pci" / "drivers" / driver, pci_dir), pci_dir / "driver")
    os.symlink(os.path.relpath(pci_dir, device_dir), device_dir / "device")
    class_dir = sysfs / "class" / "infiniband"
    class_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device_dir, class_dir), class_dir / name)
    for port, (state, counters) in ports.items():
        port_dir = device_dir / "ports" / port
        (port_dir / "hw_counters").mkdir(parents=True)
        (port_dir / "state").write_text(state + "\n")
        for counter, text in counters.items():
            (port_dir / "hw_counters" / counter).write_text(text)
    return device_dir


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    """Return a sample's labels as families_of keys them."""
    return tuple(sorted(values.items()))


def exposition(registry: CollectorRegistry) -> str:
    """Return REGISTRY's text exposition, as a scrape gets it."""
    return generate_latest(registry).decode()


def parse_exposition(text: str) -> tuple[Samples, dict[str, str]]:
    """Read TEXT back with prometheus_client's parser: family -> labels -> value, and family -> type."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        samples[family.name] = {tuple(sorted(sample.labels.items())): sample.value for sample in family.samples}
    return samples, types


def families_of(registry: CollectorRegistry) -> Samples:
    """Return what REGISTRY exposes, read back: family -> labels -> value."""
    return parse_exposition(exposition(registry))[0]


STARTUP_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 15.0
SERVING = re.compile(r"^kiln-metrics (slurm|efa): serving http://127\.0\.0\.1:(\d+)/metrics$")


@contextlib.contextmanager
def exporter(args: Sequence[str], env: Mapping[str, str] | None = None) -> Iterator[Exporter]:
    """Start `python -m kiln.metrics ARGS`; kill it on the way out if the test left it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.metrics", *args],
        cwd=ROOT,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = Exporter(process)
    pump = threading.Thread(target=_pump, args=(process.stderr, running.lines), daemon=True)
    pump.start()
    try:
        yield running
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(EXIT_TIMEOUT_S)
        pump.join(EXIT_TIMEOUT_S)
        process.stderr.close()


def fake_sinfo(bin_dir: Path, script: str) -> None:
    """Make BIN_DIR/sinfo run SCRIPT, switched atomically: a running loop never reads half a change."""
    sinfo = bin_dir / "sinfo"
    if not sinfo.exists():
        bin_dir.mkdir(parents=True, exist_ok=True)
        sinfo.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.args"\n. "$0.now"\n')
        sinfo.chmod(0o755)
    draft = bin_dir / "sinfo.draft"
    draft.write_text(script)
    os.replace(draft, bin_dir / "sinfo.now")


def sinfo_prints(text: str) -> str:
    return f"cat <<'SINFO'\n{text}SINFO\n"


def path_first(bin_dir: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def snapshot(directory: Path) -> dict[str, tuple[str, int, int]]:
    """Each file's content, inode and mtime: a rewrite changes the inode (os.replace), a touch the mtime."""
    return {
        path.name: (path.read_text(), path.stat().st_ino, path.stat().st_mtime_ns)
        for path in sorted(directory.iterdir())
    }


def age(directory: Path) -> None:
    # An hour back, so a rewrite within the same clock tick still shows.
    for path in directory.iterdir():
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - 3600 * 10**9))


@dataclass
class Exporter:
    """A running `python -m kiln.metrics`, its stderr lines read by a thread as they come."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    def next_line(self, timeout_s: float = STARTUP_TIMEOUT_S) -> str:
        line = self.lines.get(timeout=timeout_s)
        assert line is not None, f"exporter exited ({self.process.wait(EXIT_TIMEOUT_S)}) after {self.seen}"
        self.seen.append(line)
        return line

    def port(self) -> int:
        line = self.next_line()
        match = SERVING.match(line)
        assert match, line
        return int(match.group(2))

    def rest(self) -> list[str]:
        """Return the stderr lines after those read, once the process has exited."""
        lines = []
        while (line := self.lines.get(timeout=EXIT_TIMEOUT_S)) is not None:
            lines.append(line)
        return lines


def _pump(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)
