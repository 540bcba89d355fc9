"""Shared fixtures: the repo layout, Node 22 for jsii, and every example synthesized once."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kiln.host.node_runtime import use_pinned_node

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NODE_BIN = ROOT / "node_modules" / ".bin"

# The smallest valid spec as plain data (PCS, one p5 group, persistent Lustre); tests copy it before changing it.
MINIMAL_SPEC = {
    "name": "t",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "storage": {"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}},
    "compute": {"backend": "pcs", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}]},
}


def spec_problems(spec: dict) -> list[str]:
    """Return the lines `kiln validate` prints for the spec SPEC (plain data), none when it is valid."""
    from kiln.spec import SpecError, parse_spec

    try:
        parse_spec(spec, "x.yaml")
    except SpecError as error:
        return error.lines_out()
    return []


# jsii runs the CDK in Node: use the pinned Node 22 from node_modules, not the system's.
use_pinned_node()
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


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


@contextlib.contextmanager
def loopback_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve HANDLER on an ephemeral loopback port while the block runs; yield its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """Return the directory NAME that BUILD filled, built by the first xdist worker to ask and shared by the rest.

    The workers of one run share the parent of their base temp directories; a lock there makes the others
    wait for the first build instead of repeating it. (pytest 9 ignores xdist_group: the tests of one group
    may run on every worker.) A build that raised is tried again by the next worker that asks.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            directory.mkdir(exist_ok=True)
            build(directory)
            done.touch()
    return directory


def run_app(spec_path: Path, outdir: Path) -> subprocess.Popen:
    """Start `python app.py` for SPEC_PATH the way the CDK CLI does (context via CDK_CONTEXT_JSON)."""
    env = {**os.environ, "CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps({"spec": str(spec_path)})}
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _synthesize_examples(base: Path) -> None:
    running = {path.stem: run_app(path, base / path.stem) for path in EXAMPLES}
    outcomes = {}
    for stem, process in running.items():
        _, stderr = process.communicate(timeout=600)
        outcomes[stem] = {"returncode": process.returncode, "stderr": stderr}
    (base / "outcomes.json").write_text(json.dumps(outcomes))


@pytest.fixture(scope="session")
def example_assemblies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Assembly]:
    """Synthesize every example through app.py, all at once and once per run, and return them by file stem."""
    base = built_once(tmp_path_factory, "assemblies", _synthesize_examples)
    outcomes = json.loads((base / "outcomes.json").read_text())
    return {path.stem: Assembly(spec_path=path, outdir=base / path.stem, **outcomes[path.stem]) for path in EXAMPLES}


# The daemons gpg starts on its own for a GnuPG home, and which outlive it unless told to stop.
GNUPG_DAEMONS = ("gpg-agent", "dirmngr", "keyboxd")


def stop_gnupg_daemons(home: Path) -> None:
    """Stop every daemon gpg started for the GnuPG home HOME (`gpgconf --kill all`; none running is fine)."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, timeout=60, check=False)


def processes_naming(directory: Path) -> dict[int, list[str]]:
    """Return the command line of every process but this one with an argument in DIRECTORY, by process id."""
    inside = str(directory).rstrip("/") + "/"
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = [arg.decode(errors="replace") for arg in (proc / "cmdline").read_bytes().split(b"\0") if arg]
        except OSError:  # gone meanwhile
            continue
        if any(inside in arg + "/" for arg in argv):
            found[int(proc.name)] = argv
    return found


@pytest.fixture(scope="session", autouse=True)
def tests_leave_nothing_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the run if a process that names this run's temp directory (each xdist worker has its own) outlives the
    tests: a gpg-agent for a test's GnuPG home, a server on a test's files. GnuPG's daemons found are stopped."""
    yield
    base = tmp_path_factory.getbasetemp()
    deadline = time.monotonic() + 10  # a stopped daemon takes a moment to go
    while (left := processes_naming(base)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for argv in left.values():
        if Path(argv[0]).name in GNUPG_DAEMONS and "--homedir" in argv[:-1]:
            stop_gnupg_daemons(Path(argv[argv.index("--homedir") + 1]))
    if left:
        running = "; ".join(f"{pid}: {' '.join(argv)}" for pid, argv in sorted(left.items()))
        pytest.fail(f"still running after the tests, started by them: {running}", pytrace=False)


# Fixtures whose first use costs tens of seconds on 2 cores: a test that takes one belongs to the slow tier.
SLOW_FIXTURES = frozenset({"example_assemblies"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that synthesizes all the examples (example_assemblies) in the slow tier (`make test-slow`)."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# A spec edit's marker for a key to drop (changed).
DELETE = object()


def changed(data: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """Return a copy of spec DATA with CHANGES: `a__b=value` sets data[a][b] (making dicts on the way), DELETE drops."""
    result = copy.deepcopy(dict(data))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = result
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return result
