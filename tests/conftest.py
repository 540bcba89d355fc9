"""Shared fixtures and hooks: Node 22 for jsii, every example synthesized once, nothing left running, the slow tier."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.support.pinned_node  # noqa: F401  (jsii runs the CDK in the pinned Node 22, not the system's)
from tests.support.assemblies import SLOW_FIXTURES, Assembly, synthesize_examples
from tests.support.build_once import built_once
from tests.support.credentials import (
    no_credentials_env as no_credentials_env,  # tests/test_credentials.py, tests/connect
)
from tests.support.paths import EXAMPLES
from tests.support.processes import GNUPG_DAEMONS, processes_naming, stop_gnupg_daemons


@pytest.fixture(scope="session")
def example_assemblies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Assembly]:
    """Synthesize every example through app.py, all at once and once per run, and return them by file stem."""
    base = built_once(tmp_path_factory, "assemblies", synthesize_examples)
    outcomes = json.loads((base / "outcomes.json").read_text())
    return {path.stem: Assembly(spec_path=path, outdir=base / path.stem, **outcomes[path.stem]) for path in EXAMPLES}


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that synthesizes all the examples (example_assemblies) in the slow tier (`make test-slow`)."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
