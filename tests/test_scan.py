"""checkov as kiln runs it: one offline process over many templates, read back per template."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kiln.review.scan import (
    CHECKOV_VERSION,
    CheckovFinding,
    CheckovResult,
    ScanFailed,
    ScannerMissing,
    find_checkov,
    run_checkov,
)

VERSIONING = "Ensure the S3 bucket has versioning enabled"
REASON = "scratch data: every run writes it anew"


def _bucket(metadata: dict | None = None) -> str:
    bucket = {"Type": "AWS::S3::Bucket", "Properties": {}}
    if metadata:
        bucket["Metadata"] = metadata
    return json.dumps({"Resources": {"Data": bucket}})


def _fake_checkov(tmp_path: Path, stdout: str, *, stderr: str = "", status: int = 0) -> Path:
    """Write an executable that prints STDOUT and STDERR and exits with STATUS, whatever it is asked."""
    (tmp_path / "out.txt").write_text(stdout)
    (tmp_path / "err.txt").write_text(stderr)
    script = tmp_path / "checkov"
    script.write_text(f"#!/bin/sh\ncat '{tmp_path}/out.txt'\ncat '{tmp_path}/err.txt' >&2\nexit {status}\n")
    script.chmod(0o755)
    return script


def _report(file: Path, *, failed: int = 0, parsing_errors: list[str] | None = None, version: str = CHECKOV_VERSION):
    check = {"check_id": "CKV_AWS_21", "check_name": VERSIONING, "resource": "AWS::S3::Bucket.Data"}
    check |= {"file_abs_path": str(file), "check_result": {"result": "FAILED"}}
    results = {"passed_checks": [], "failed_checks": [check] * failed, "skipped_checks": []}
    results["parsing_errors"] = parsing_errors or []
    summary = {"passed": 0, "failed": failed, "skipped": 0, "parsing_errors": len(results["parsing_errors"])}
    summary |= {"resource_count": 1, "checkov_version": version}
    return json.dumps({"check_type": "cloudformation", "results": results, "summary": summary})


def test_one_run_fails_an_unversioned_bucket_and_skips_a_reviewed_one_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "open.json").write_text(_bucket())
    skip = {"checkov": {"skip": [{"id": "CKV_AWS_21", "comment": REASON}]}}
    (tmp_path / "reviewed.json").write_text(_bucket(skip))
    monkeypatch.chdir(tmp_path)
    # Results come back under the paths as given, relative ones too.
    found = run_checkov([Path("open.json"), tmp_path / "reviewed.json"])
    assert set(found) == {Path("open.json"), tmp_path / "reviewed.json"}
    unreviewed, reviewed = found[Path("open.json")], found[tmp_path / "reviewed.json"]
    assert CheckovFinding("CKV_AWS_21", VERSIONING, "AWS::S3::Bucket.Data") in unreviewed.failed
    assert unreviewed.skipped == ()
    assert "CKV_AWS_21" not in {finding.check_id for finding in reviewed.failed}
    assert reviewed.skipped == (CheckovFinding("CKV_AWS_21", VERSIONING, "AWS::S3::Bucket.Data", REASON),)
    assert unreviewed.passed > 0 and reviewed.passed == unreviewed.passed


def test_no_templates_run_nothing(tmp_path: Path) -> None:
    assert run_checkov([], executable=tmp_path / "no-such-checkov") == {}


def test_a_missing_checkov_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    with pytest.raises(ScannerMissing) as missing:
        run_checkov([tmp_path / "template.json"])
    assert str(missing.value) == (
        "checkov not found: run `make setup` (it installs checkov into .venv-checkov and links it as "
        ".venv/bin/checkov), or put checkov 3.3.30 on PATH"
    )
    # Beside the running Python (.venv/bin) counts when PATH has none.
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    beside = _fake_checkov(tmp_path / "venv" / "bin", "")
    assert find_checkov() == beside


def test_another_checkov_version_is_refused(tmp_path: Path) -> None:
    template = tmp_path / "t.json"
    template.write_text(_bucket())
    fake = _fake_checkov(tmp_path, _report(template, version="3.2.0"))
    with pytest.raises(ScannerMissing, match=rf"^{fake} is checkov 3\.2\.0, not 3\.3\.30: run `make setup`"):
        run_checkov([template], executable=fake)


@pytest.mark.parametrize(
    ("stdout", "stderr", "status", "says"),
    [
        ("", "Traceback (most recent call last):\nKeyError: 'x'", 2, "checkov exited with status 2: Traceback"),
        ("Checkov crashed\n", "boom", 0, "checkov printed no JSON report: boom"),
        ("[]", "", 0, "checkov printed an empty report"),
        ("{}", "", 0, "checkov printed a report kiln cannot read"),
        ("PARSE", "Template file not found", 0, "checkov could not parse /elsewhere.json: Template file not found"),
        ("OTHER", "", 1, "checkov reported on /elsewhere.json, which kiln did not give it"),
        ("CLEAN", "", 1, "checkov exited with status 1 but reported no failed check"),
    ],
)
def test_a_failed_scan_is_one_line_with_checkovs_own_words(
    tmp_path: Path, stdout: str, stderr: str, status: int, says: str
) -> None:
    template = tmp_path / "t.json"
    template.write_text(_bucket())
    stdout = {
        "PARSE": _report(template, parsing_errors=["/elsewhere.json"]),
        "OTHER": _report(Path("/elsewhere.json"), failed=1),
        "CLEAN": _report(template),
    }.get(stdout, stdout)
    with pytest.raises(ScanFailed) as failed:
        run_checkov([template], executable=_fake_checkov(tmp_path, stdout, stderr=stderr, status=status))
    assert str(failed.value).startswith(says)
    assert "\n" not in str(failed.value)


def test_a_report_of_failed_checks_is_read_per_template(tmp_path: Path) -> None:
    template, quiet = tmp_path / "t.json", tmp_path / "quiet.json"
    fake = _fake_checkov(tmp_path, _report(template, failed=1), status=1)
    found = run_checkov([template, quiet], executable=fake)
    assert found[template] == CheckovResult(failed=(CheckovFinding("CKV_AWS_21", VERSIONING, "AWS::S3::Bucket.Data"),))
    # A template checkov said nothing about passed nothing and failed nothing.
    assert found[quiet] == CheckovResult()
