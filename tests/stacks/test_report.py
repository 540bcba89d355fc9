"""`kiln report`: the demo's summary table."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.cli import main
from tests.conftest import ROOT


def test_report_tables_stacks_resources_and_lint_results(capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(ROOT / "examples" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["spec", "stack", "resources", "cfn-lint", "E/W", "cdk-nag", "open/ack", "synth", "s"]
    rows = {line.split()[1]: line.split() for line in out[2:5]}
    assert set(rows) == {"quickstart-compute", "quickstart-network", "quickstart-storage"}
    assert all(row[3] == "0/0" for row in rows.values())
    assert {name: row[4] for name, row in rows.items()} == {
        "quickstart-compute": "0/1",
        "quickstart-network": "0/0",
        "quickstart-storage": "0/0",
    }
    assert out[-1].startswith("1 specs, 3 stacks,") and "cfn-lint 0 errors, 0 warnings" in out[-1]
    assert "cdk-nag 0 open, 1 acknowledged with reasons" in out[-1]


def test_report_marks_an_invalid_spec_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\n")
    assert main(["report", "--no-lint", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "(invalid spec)" in captured.out
    assert f"{bad}: compute: is required" in captured.err
