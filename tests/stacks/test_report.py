"""`kiln report`: the demo's summary table."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kiln.bootstrap.artifacts import lockable_artifacts
from kiln.bootstrap.lock import LockedFile, lock_text
from kiln.cli.main import main
from kiln.contracts.iam_wildcards import REVIEW_METADATA, review_metadata, template_wildcards
from kiln.node_config.translate import config_from_spec
from kiln.review.report import (
    RESILIENCE_TITLE,
    UNREVIEWED_REMEDY,
    VERBOSE_HINT,
    Review,
    _summary,
    checkov_review,
    wildcard_review,
)
from kiln.review.scan import MISSING, CheckovFinding, CheckovResult
from kiln.spec import load_spec
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
STACKS = ("quickstart-compute", "quickstart-network", "quickstart-storage")
# What the unready variant of the quickstart (_unready) downloads that kiln has no published digest for.
UNREADY_LOCKED = ("efa-installer",)
# A policy that grants everything on S3, with no review beside it.
OPEN_S3 = {
    "Type": "AWS::IAM::Policy",
    "Properties": {
        "PolicyName": "open",
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        },
        "Roles": ["node"],
    },
}


def table(out: list[str]) -> dict[str, dict[str, str]]:
    """Read the report's table from its stdout lines: each row's cells by column, keyed by stack."""
    header, rule, *lines = out
    spans, start = [], 0
    for dashes in rule.split("  "):
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 2
    columns = [header[a:b].strip() for a, b in spans]
    rows = {}
    for line in lines:
        if not line:
            break
        cells = [line[a:b].strip() for a, b in spans]
        rows[cells[1]] = dict(zip(columns, cells, strict=True))
    return rows


def summary_line(out: list[str]) -> str:
    """Return the report's summary from its stdout lines: the line after the table (without --verbose, a hint that
    --verbose lists the reasons may follow it)."""
    return out[out.index("") + 1]


def _unready(tmp_path: Path) -> Path:
    """Write the quickstart on an AMI of the user's own with an EFA installer release AWS publishes no digest for,
    and no lock: its nodes would refuse that download. (Its GPU nodes are static: no boot budget applies.)"""
    spec = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec["compute"]["image"] = {"base": "own", "ami_id": "ami-0123456789abcdef0"}
    spec["compute"]["groups"][0]["min_count"] = spec["compute"]["groups"][0]["max_count"]
    spec["software"] = {"efa_installer": "1.47.0", "lock_file": "quickstart.lock.json"}
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_report_tables_stacks_resources_lint_results_and_boot_readiness(capsys: pytest.CaptureFixture) -> None:
    # Every cell is clean and every download verifiable (enroot and pyxis by their commits): the report passes.
    assert main(["report", "--verbose", QUICKSTART]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0].split() == [
        "spec", "stack", "resources", "cfn-lint", "E/W", "cdk-nag", "open/ack", "checkov", "pass/fail/skip",
        "IAM", "wildcards+managed", "boot-ready", "synth", "s",
    ]  # fmt: skip
    rows = table(out)
    assert set(rows) == set(STACKS)
    assert all(row["cfn-lint E/W"] == "0/0" for row in rows.values())
    assert {name: row["cdk-nag open/ack"] for name, row in rows.items()} == {
        "quickstart-compute": "0/2",  # SSM Agent's heartbeat and channels (NODE_SSM_GRANTS)
        "quickstart-network": "0/0",
        "quickstart-storage": "0/0",
    }
    assert all(row["boot-ready"] == "yes" for row in rows.values())
    assert summary_line(out).endswith("; 1 of 1 spec boot-ready")
    assert ": not boot-ready: " not in captured.err
    # What each kind of node adopts from its image and what kiln installs on it.
    nodes = [line for line in captured.err.splitlines() if line.startswith(f"{QUICKSTART}: nodes: ")]
    assert [line.split(": nodes: ")[1].split(":")[0] for line in nodes] == ["login (m5.xlarge)", "gpu (g5.12xlarge)"]
    # kiln's estimate of each kind of node's setup at boot, against PCS's fixed deadline for the group.
    budget = [line.split(": boot budget: ")[1] for line in captured.err.splitlines() if ": boot budget: " in line]
    assert [line.split(":")[0] for line in budget] == ["login (m5.xlarge)", "gpu (g5.12xlarge)"]
    assert budget[1].endswith("; PCS's ResumeTimeout is 30 min")
    assert (
        "adopts nvidia_driver 590.48.01, efa_installer 1.47.0, pcs_agent, pcs_slurm from the AWS PCS sample AMI"
        in nodes[1]
    )
    # The resilience section: which checks run, what replaces a node and how jobs resume, each line naming the spec.
    section = out[out.index("resilience (which checks run, what replaces a node, how jobs resume):") + 1 :]
    assert [line.split(": ", 2)[1] for line in section] == ["checks", "replacement", "jobs", "source"]
    assert section[0].startswith(f"  {QUICKSTART}: checks: kiln-launch health on every compute node")


def test_report_refuses_unready_nodes_with_the_one_step_that_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _unready(tmp_path)
    assert main(["report", "--no-lint", str(path)]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert all(row["boot-ready"] == "NO (1)" for row in table(out).values())
    assert summary_line(out) == "1 spec: problems found; 0 of 1 spec boot-ready (details below)"
    [refused] = [line for line in captured.err.splitlines() if ": not boot-ready: " in line]
    assert all(name in refused for name in UNREADY_LOCKED)
    assert refused.endswith(
        f"run `kiln bootstrap lock --spec {path}` on a machine with internet "
        f"(it writes {tmp_path / 'quickstart.lock.json'})"
    )


def test_report_accepts_unready_nodes_only_when_asked_and_still_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["report", "--no-lint", "--accept-unready", str(_unready(tmp_path))]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    # --no-lint skips both scanners; the IAM wildcard review reads the templates and always runs.
    assert all(row["checkov pass/fail/skip"] == "skipped" for row in table(out).values())
    last = summary_line(out)
    assert last.startswith("1 spec, 3 stacks,") and "cfn-lint skipped" in last and "; checkov skipped; " in last
    assert "cdk-nag 0 open, 2 acknowledged with reasons" in last
    assert re.search(r"\d+ AWS-managed policy attachments?, each with its reason", last)
    assert last.endswith("0 of 1 spec boot-ready (accepted by --accept-unready)")
    assert captured.err.count(": not boot-ready: ") == 1


def test_report_calls_a_spec_with_every_digest_boot_ready(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _unready(tmp_path)
    needed = lockable_artifacts(config_from_spec(load_spec(path)))
    assert tuple(a.name for a in needed) == UNREADY_LOCKED
    entries = [LockedFile(name=a.name, version=a.version, url=a.url, sha256="a" * 64, size_bytes=1) for a in needed]
    (tmp_path / "quickstart.lock.json").write_text(lock_text(entries))
    assert main(["report", "--no-lint", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [row["boot-ready"] for row in table(out).values()] == ["yes"] * 3
    assert summary_line(out).endswith("; 1 of 1 spec boot-ready")


def test_report_marks_an_invalid_spec_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\n")
    assert main(["report", "--no-lint", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "(invalid spec)" in captured.out
    assert f"{bad}: compute: is required" in captured.err


def test_report_scans_every_template_with_checkov_and_reviews_every_iam_wildcard(capsys: pytest.CaptureFixture) -> None:
    assert main(["report", "-v", QUICKSTART]) == 0
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    rows = table(out)
    assert set(rows) == set(STACKS)
    totals = {"passed": 0, "skipped": 0, "wildcards": 0, "managed": 0}
    for stack, row in rows.items():
        # Every checkov check passed, or was skipped with the reason the template records.
        passed, failed, skipped = map(int, re.fullmatch(r"(\d+)/(\d+)/(\d+)", row["checkov pass/fail/skip"]).groups())
        assert passed > 0 and failed == 0
        skips = [
            line for line in err if line.startswith(f"{QUICKSTART}: checkov skipped CKV_") and f" on {stack} " in line
        ]
        assert len(skips) == skipped
        assert all(
            re.fullmatch(rf"\S+: checkov skipped CKV_\w+ on {stack} AWS::\w+::\w+\.\w+: \S.*", line) for line in skips
        )
        # Every wildcard pair is reviewed: the cell is a bare count, and each pair is in a line with its reason.
        assert row["IAM wildcards+managed"].isdigit()
        prefix = f"{QUICKSTART}: IAM wildcard in {stack} "
        pairs = 0
        for line in err:
            if line.startswith(prefix):
                _, grants, reason = line.removeprefix(prefix).split(": ", 2)
                assert reason.strip() and all(" on " in grant for grant in grants.split(", "))
                pairs += len(grants.split(", "))
                # An AWS-managed policy's attachment, reviewed like a wildcard.
                totals["managed"] += sum(grant.startswith("policy/") for grant in grants.split(", "))
        assert pairs == int(row["IAM wildcards+managed"])
        totals["passed"] += passed
        totals["skipped"] += skipped
        totals["wildcards"] += pairs
    assert not [line for line in err if " failed on " in line or "unreviewed IAM wildcard" in line]
    # The flow logs' key policy and the access-log bucket's policy grant on wildcards, for reasons.
    assert int(rows["quickstart-network"]["IAM wildcards+managed"]) > 0
    access_logs = rf"{re.escape(QUICKSTART)}: IAM wildcard in quickstart-storage \w+: s3:PutObject on <\w+\.Arn>/"
    assert any(re.match(access_logs, line) for line in err)
    assert (
        f"; checkov {totals['passed']} passed, 0 failed, {totals['skipped']} skipped with reasons; "
        f"{totals['wildcards'] - totals['managed']} IAM wildcards and {totals['managed']} AWS-managed policy "
        f"attachment{'s' * (totals['managed'] != 1)}, each with its reason; 1 of 1 spec boot-ready" in summary_line(out)
    )
    # The login and compute nodes' role attaches AWS's policies (PCS's and Session Manager's, as the platform
    # documents them), each reviewed.
    assert totals["managed"] > 0


def _synthesizes(monkeypatch: pytest.MonkeyPatch, resources: dict) -> None:
    """Let the report's synthesis write one hand-written template, quickstart-compute, instead of the spec's stacks."""

    def synthesize(spec: object, outdir: Path, ci: object = None, context: object = None) -> tuple[None, Path]:
        (outdir / "quickstart-compute.template.json").write_text(json.dumps({"Resources": resources}))
        return None, outdir

    monkeypatch.setattr("kiln.review.report.synthesize", synthesize)


def test_an_unreviewed_iam_wildcard_fails_the_report_and_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _synthesizes(monkeypatch, {"Open": OPEN_S3})
    assert main(["report", "--no-lint", QUICKSTART]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert table(out)["quickstart-compute"]["IAM wildcards+managed"] == "1 (1 unreviewed)"
    assert summary_line(out) == "1 spec: problems found; 1 of 1 spec boot-ready"
    assert (
        f"{QUICKSTART}: unreviewed IAM wildcard in quickstart-compute Open: s3:* on *; narrow it or add a "
        "WildcardGrant with its reason to kiln/constructs/acknowledgements.py"
    ) in captured.err.splitlines()


def test_a_missing_checkov_is_an_error_in_every_row_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _synthesizes(monkeypatch, {"Topic": {"Type": "AWS::SNS::Topic"}})
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert main(["report", QUICKSTART]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert table(out)["quickstart-compute"]["checkov pass/fail/skip"] == "error"
    assert table(out)["quickstart-compute"]["IAM wildcards+managed"] == "0"
    assert summary_line(out) == "1 spec: problems found; 1 of 1 spec boot-ready"
    assert captured.err.splitlines().count(f"kiln report: {MISSING}") == 1


def test_wildcard_review_groups_reviewed_grants_by_resource_and_reason() -> None:
    reviews = {
        "reads and writes the data bucket's objects": [
            ("s3:GetObject", "arn:aws:s3:::data/*"),
            ("s3:PutObject", "arn:aws:s3:::data/*"),
        ],
        "log streams are named at run time": [("logs:CreateLogStream", "*")],
    }
    statements = [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::data/*"},
        {"Effect": "Allow", "Action": "logs:CreateLogStream", "Resource": "*"},
        {"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
    ]
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {"Policies": [{"PolicyName": "node", "PolicyDocument": {"Statement": statements}}]},
        "Metadata": {REVIEW_METADATA: review_metadata(reviews)},
    }
    review = wildcard_review("c.yaml", "c-compute", list(template_wildcards({"Resources": {"NodeRole": role}})))
    # The unreviewed grant is a problem, always printed; the reviewed ones are reasons, printed with --verbose.
    assert review == Review(
        "4 (1 unreviewed)",
        (f"c.yaml: unreviewed IAM wildcard in c-compute NodeRole: ec2:Describe* on *; {UNREVIEWED_REMEDY}",),
        1,
        (
            "c.yaml: IAM wildcard in c-compute NodeRole: s3:GetObject on arn:aws:s3:::data/*, "
            "s3:PutObject on arn:aws:s3:::data/*: reads and writes the data bucket's objects",
            "c.yaml: IAM wildcard in c-compute NodeRole: logs:CreateLogStream on *: log streams are named at run time",
        ),
    )
    assert wildcard_review("c.yaml", "c-network", []) == Review("0")


def test_checkov_review_fails_on_a_failed_check_and_lists_skips_with_reasons() -> None:
    failed = CheckovFinding("CKV_AWS_21", "Ensure the S3 bucket has versioning enabled", "AWS::S3::Bucket.Logs")
    skipped = CheckovFinding(
        "CKV_AWS_18", "Ensure the S3 bucket has access logging enabled", "AWS::S3::Bucket.Logs", "it is the log"
    )
    review = checkov_review("c.yaml", "c-storage", CheckovResult(passed=30, failed=(failed,), skipped=(skipped,)))
    assert review == Review(
        "30/1/1",
        (
            "c.yaml: checkov CKV_AWS_21 failed on c-storage AWS::S3::Bucket.Logs: "
            "Ensure the S3 bucket has versioning enabled",
        ),
        1,
        ("c.yaml: checkov skipped CKV_AWS_18 on c-storage AWS::S3::Bucket.Logs: it is the log",),
    )
    assert checkov_review("c.yaml", "c-storage", CheckovResult(passed=3)) == Review("3/0/0")


def test_an_aws_managed_policy_without_a_reason_fails_the_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {"Statement": []},
            "ManagedPolicyArns": [
                {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AdministratorAccess"]]}
            ],
        },
    }
    _synthesizes(monkeypatch, {"Admin": role})
    assert main(["report", "--no-lint", QUICKSTART]) == 1
    captured = capsys.readouterr()
    assert table(captured.out.splitlines())["quickstart-compute"]["IAM wildcards+managed"] == "1 (1 unreviewed)"
    assert any(
        "unreviewed IAM wildcard in quickstart-compute Admin: policy/AdministratorAccess on" in line
        for line in captured.err.splitlines()
    )


def test_a_nested_stack_of_aws_is_named_as_not_scanned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    nested = {"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": "https://example.com/t.yaml"}}
    _synthesizes(monkeypatch, {"Provider": nested})
    assert main(["report", "--no-lint", QUICKSTART]) == 0
    captured = capsys.readouterr()
    assert "1 nested stack of AWS's templates not scanned (details below)" in summary_line(captured.out.splitlines())
    assert any(
        "quickstart-compute Provider: a nested stack from https://example.com/t.yaml" in line
        for line in captured.err.splitlines()
    )


def test_report_without_verbose_keeps_the_reasons_to_their_totals(capsys: pytest.CaptureFixture) -> None:
    """The demo's report: stderr holds only what needs acting on; what passed with a reason is counted, and listed
    with --verbose."""
    assert main(["report", "--no-lint", QUICKSTART]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    lines = quiet.out.splitlines()
    summary = summary_line(lines)
    # The hint follows the totals; the resilience section (what keeps training going) comes after both.
    hint = lines[lines.index(summary) + 1]
    assert lines[lines.index(hint) + 2] == RESILIENCE_TITLE
    assert "cdk-nag 0 open, 2 acknowledged with reasons" in summary
    wildcards = re.search(
        r"; (\d+) IAM wildcards and (\d+) AWS-managed policy attachments?, each with its reason;", summary
    )
    assert wildcards and int(wildcards[1]) > 0 and int(wildcards[2]) > 0
    assert hint == VERBOSE_HINT
    assert main(["report", "--no-lint", "--verbose", QUICKSTART]) == 0
    verbose = capsys.readouterr()
    # The same totals, and no hint: the lines it points to follow.
    assert summary_line(verbose.out.splitlines()) == summary
    assert VERBOSE_HINT not in verbose.out
    err = verbose.err.splitlines()
    assert sum(line.startswith(f"{QUICKSTART}: cdk-nag acknowledged AwsSolutions") for line in err) == 2
    # Every reviewed grant is on one line with its reason: as many grants as the summary counts.
    grants = [line.split(": ")[2] for line in err if line.startswith(f"{QUICKSTART}: IAM wildcard in ")]
    assert sum(len(g.split(", ")) for g in grants) == int(wildcards[1]) + int(wildcards[2])
    assert any(line.startswith(f"{QUICKSTART}: nodes: ") for line in err)
    assert any(line.startswith(f"{QUICKSTART}: boot budget: ") for line in err)


def test_a_problem_is_printed_without_verbose_and_the_reasons_are_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _synthesizes(monkeypatch, {"Open": OPEN_S3})
    assert main(["report", "--no-lint", QUICKSTART]) == 1
    captured = capsys.readouterr()
    assert [line for line in captured.err.splitlines() if line.startswith(QUICKSTART)] == [
        f"{QUICKSTART}: unreviewed IAM wildcard in quickstart-compute Open: s3:* on *; {UNREVIEWED_REMEDY}"
    ]
    lines = captured.out.splitlines()
    assert lines[lines.index(summary_line(lines)) + 1] == VERBOSE_HINT


@pytest.mark.parametrize(
    ("count", "words"),
    [
        (
            1,
            "1 spec, 1 stack, 1 resource; cfn-lint 1 error, 1 warning; cdk-nag 0 open, 1 acknowledged with its reason; "
            "checkov 1 passed, 0 failed, 1 skipped with its reason; 1 IAM wildcard and 1 AWS-managed policy "
            "attachment, each with its reason; 1 of 1 spec boot-ready; 1 nested stack of AWS's templates not "
            "scanned (details below)",
        ),
        (
            2,
            "2 specs, 2 stacks, 2 resources; cfn-lint 2 errors, 2 warnings; cdk-nag 0 open, 2 acknowledged with "
            "reasons; checkov 2 passed, 0 failed, 2 skipped with reasons; 2 IAM wildcards and 2 AWS-managed policy "
            "attachments, each with its reason; 2 of 2 specs boot-ready; 2 nested stacks of AWS's templates not "
            "scanned (details below)",
        ),
    ],
)
def test_the_summary_says_one_of_each_in_the_singular(count: int, words: str) -> None:
    keys = ("stacks", "resources", "errors", "warnings", "acknowledged", "passed", "skipped", "wildcards", "managed")
    totals = Counter({key: count for key in (*keys, "nested", "boot_ready")})
    assert _summary(count, totals, lint=True, accept_unready=False, worst=0) == f"\n{words}"
    specs = words.split(",")[0]  # "1 spec" or "2 specs"
    problems = _summary(count, totals, lint=True, accept_unready=False, worst=1)
    assert problems == f"\n{specs}: problems found; {count} of {specs} boot-ready"
