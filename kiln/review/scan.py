"""checkov, the second IaC scanner: run it once over CloudFormation templates and read its verdict per template.

Standard library only: checkov pins boto3 and packaging versions the project's environment has moved past, so it
lives in its own venv (`make setup` links it as .venv/bin/checkov) and runs as a subprocess, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.contracts.errors import Failure

CHECKOV_VERSION = "3.3.30"
TIMEOUT_S = 600
MISSING = (
    "checkov not found: run `make setup` (it installs checkov into .venv-checkov and links it as "
    f".venv/bin/checkov), or put checkov {CHECKOV_VERSION} on PATH"
)
# checkov's settings come from kiln alone: an API key would send the templates to a platform, and
# CKV_SKIP_CHECK or CKV_CHECK would hide checks without a reason in the template.
_FOREIGN_SETTINGS = ("BC_", "CKV_", "CHECKOV_", "PRISMA_")
_KINDS = ("passed_checks", "failed_checks", "skipped_checks")


class ScanError(Failure):
    """checkov gave no verdict; the message says why in one line."""


class ScannerMissing(ScanError):
    """checkov (the pinned version) is not installed where kiln looks."""


class ScanFailed(ScanError):
    """checkov ran but failed, or printed nothing kiln can read."""


@dataclass(frozen=True)
class CheckovFinding:
    """One check on one resource; a skipped check carries its reason (the template's suppression comment)."""

    check_id: str
    check_name: str
    resource: str  # "AWS::S3::Bucket.LogicalId"
    reason: str | None = None


@dataclass(frozen=True)
class CheckovResult:
    """checkov's verdict on one template: how many checks passed, which failed, which were skipped and why."""

    passed: int = 0
    failed: tuple[CheckovFinding, ...] = ()
    skipped: tuple[CheckovFinding, ...] = ()


def find_checkov() -> Path:
    """Return the checkov executable: on PATH, else beside this Python (.venv/bin); ScannerMissing if neither."""
    found = shutil.which("checkov")
    if found:
        return Path(found)
    beside = Path(sys.executable).parent / "checkov"
    if beside.exists():
        return beside
    raise ScannerMissing(MISSING)


def _environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(_FOREIGN_SETTINGS)}
    # Without it, checkov asks pypi.org for a newer version at every start (checkov/common/util/banner.py).
    env["CKV_SKIP_PACKAGE_UPDATE_CHECK"] = "true"
    return env


def _failed(why: str, stderr: str = "") -> ScanFailed:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    # The first lines say what checkov was doing; a traceback's last line says what went wrong.
    shown = lines[:3] + lines[-1:] if len(lines) > 4 else lines
    return ScanFailed(f"checkov {why}" + (f": {' | '.join(shown)}" if shown else ""))


def run_checkov(templates: Sequence[Path], *, executable: Path | None = None) -> dict[Path, CheckovResult]:
    """Scan TEMPLATES in one checkov process; return each template's result, keyed as given.

    Raise ScannerMissing when checkov (or its pinned version) is not found, ScanFailed when it fails,
    cannot parse a template or prints no report. Nothing runs for no templates.
    """
    if not templates:
        return {}
    ours = {template.resolve(): template for template in templates}
    command = [str(executable or find_checkov())]
    for template in ours:
        command += ["-f", str(template)]
    # --skip-download: offline, checkov's own checks only; --compact drops each finding's code block.
    command += ["--framework", "cloudformation", "--skip-download", "--compact", "--output", "json"]
    try:
        # Run beside the templates: a .checkov.yml in the caller's directory must not skip checks silently.
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=_environment(),
            cwd=next(iter(ours)).parent,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _failed(f"did not finish within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise ScanFailed(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    if done.returncode not in (0, 1):
        raise _failed(f"exited with status {done.returncode}", done.stderr)
    try:
        data = json.loads(done.stdout)
    except ValueError:
        raise _failed("printed no JSON report", done.stderr) from None
    try:
        found = _read_reports(data if isinstance(data, list) else [data], set(ours), command[0], done.stderr)
    except (KeyError, TypeError, AttributeError):
        raise _failed("printed a report kiln cannot read", done.stderr) from None
    if done.returncode == 1 and not any(result.failed for result in found.values()):
        raise _failed("exited with status 1 but reported no failed check", done.stderr)
    return {template: found.get(resolved, CheckovResult()) for resolved, template in ours.items()}


def _read_reports(reports: list[Any], ours: set[Path], executable: str, stderr: str) -> dict[Path, CheckovResult]:
    """Sort the findings of checkov's REPORTS by template (each one of OURS)."""
    if not reports:
        raise _failed("printed an empty report", stderr)
    checks: dict[Path, dict[str, list[dict[str, Any]]]] = {}
    for report in reports:
        # A scan that found nothing to check prints its summary alone.
        summary = report.get("summary", report)
        if summary["checkov_version"] != CHECKOV_VERSION:
            raise ScannerMissing(
                f"{executable} is checkov {summary['checkov_version']}, not {CHECKOV_VERSION}: "
                + MISSING.removeprefix("checkov not found: ")
            )
        results = report.get("results", {})
        if results.get("parsing_errors") or summary.get("parsing_errors"):
            unparsed = ", ".join(map(str, results.get("parsing_errors", [])))
            raise _failed(f"could not parse {unparsed or 'a template'}", stderr)
        for kind in _KINDS:
            for check in results.get(kind, []):
                path = Path(check["file_abs_path"]).resolve()
                if path not in ours:
                    raise _failed(f"reported on {check['file_abs_path']}, which kiln did not give it", stderr)
                checks.setdefault(path, {}).setdefault(kind, []).append(check)
    return {
        path: CheckovResult(
            passed=len(kinds.get("passed_checks", [])),
            failed=tuple(_finding(check) for check in kinds.get("failed_checks", [])),
            skipped=tuple(_finding(check) for check in kinds.get("skipped_checks", [])),
        )
        for path, kinds in checks.items()
    }


def _finding(check: dict[str, Any]) -> CheckovFinding:
    reason = check["check_result"].get("suppress_comment") if check["check_result"]["result"] == "SKIPPED" else None
    return CheckovFinding(check["check_id"], check["check_name"], check["resource"], reason)
