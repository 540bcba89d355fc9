"""`kiln report`: the demo's summary table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.bootstrap.artifacts import lockable_artifacts
from kiln.bootstrap.lock import LockedFile, lock_text
from kiln.cli import main
from kiln.spec import load_spec
from kiln.stacks.bootstrap_config import config_from_spec
from tests.conftest import ROOT

# What quickstart's PCS nodes download that kiln has no published digest for.
QUICKSTART_LOCKED = ("enroot-deb", "enroot-caps-deb", "pyxis")


def test_report_tables_stacks_resources_lint_results_and_boot_readiness(capsys: pytest.CaptureFixture) -> None:
    quickstart = str(ROOT / "examples" / "quickstart.yaml")
    # Every cell is clean but the nodes would refuse unverifiable downloads: the report says so and fails.
    assert main(["report", quickstart]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0].split() == [
        "spec", "stack", "resources", "cfn-lint", "E/W", "cdk-nag", "open/ack", "boot-ready", "synth", "s"
    ]  # fmt: skip
    rows = {line.split()[1]: line.split() for line in out[2:5]}
    assert set(rows) == {"quickstart-compute", "quickstart-network", "quickstart-storage"}
    assert all(row[3] == "0/0" for row in rows.values())
    assert {name: row[4] for name, row in rows.items()} == {
        "quickstart-compute": "0/1",
        "quickstart-network": "0/0",
        "quickstart-storage": "0/0",
    }
    assert all(row[5:7] == ["NO", "(3)"] for row in rows.values())
    assert out[-1] == "1 specs: problems found; 0 of 1 specs boot-ready (details below)"
    [refused] = [line for line in captured.err.splitlines() if ": not boot-ready: " in line]
    assert all(name in refused for name in QUICKSTART_LOCKED)
    assert refused.endswith(
        f"run `kiln bootstrap lock --spec {quickstart}` on a machine with internet "
        f"(it writes {ROOT / 'examples' / 'quickstart.lock.json'})"
    )


def test_report_accepts_unready_nodes_only_when_asked_and_still_says_so(capsys: pytest.CaptureFixture) -> None:
    quickstart = str(ROOT / "examples" / "quickstart.yaml")
    assert main(["report", "--no-lint", "--accept-unready", quickstart]) == 0
    captured = capsys.readouterr()
    last = captured.out.splitlines()[-1]
    assert last.startswith("1 specs, 3 stacks,") and "cfn-lint skipped" in last
    assert "cdk-nag 0 open, 1 acknowledged with reasons" in last
    assert last.endswith("0 of 1 specs boot-ready (accepted by --accept-unready)")
    assert captured.err.count(": not boot-ready: ") == 1


def test_report_calls_a_spec_with_every_digest_boot_ready(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    path = tmp_path / "ready.yaml"
    path.write_text(yaml.safe_dump(spec))
    needed = lockable_artifacts(config_from_spec(load_spec(path)))
    assert tuple(a.name for a in needed) == QUICKSTART_LOCKED
    entries = [LockedFile(name=a.name, version=a.version, url=a.url, sha256="a" * 64, size_bytes=1) for a in needed]
    (tmp_path / "quickstart.lock.json").write_text(lock_text(entries))
    assert main(["report", "--no-lint", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(line.split()[5] == "yes" for line in out[2:5])
    assert out[-1].endswith("; 1 of 1 specs boot-ready")


def test_report_marks_an_invalid_spec_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\n")
    assert main(["report", "--no-lint", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "(invalid spec)" in captured.out
    assert f"{bad}: compute: is required" in captured.err
