"""EnvironmentReaper: its function and code, exactly what its roles may do, its one-time schedule, its reviews."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from kiln.constructs import acknowledgements
from kiln.constructs import reaper as reaper_module
from kiln.constructs.reaper import HANDLER, REAPER_CODE, EnvironmentReaper, EnvironmentReaperProps
from kiln.stacks.app import new_app
from kiln.stacks.synth import nag_report
from tests.support.constructs import (
    ENV,
    get_att,
    logical_id,
    policy_rows,
    ref,
    role_policies,
    stack,
    synth_as_kiln,
    trust_statements,
)

ACCOUNT = ENV.account
ENVIRONMENT = "llm-pr7"
STACK_NAME = f"{ENVIRONMENT}-reaper"
# 22:04:05 at UTC-5 is 03:04:05 UTC the next day.
DELETE_AT = datetime(2030, 1, 2, 22, 4, 5, tzinfo=timezone(timedelta(hours=-5)))
BUCKETS = (f"{ENVIRONMENT}-data-{ACCOUNT}", f"{ENVIRONMENT}-lifecycle-{ACCOUNT}")
PARTS = ("compute", "storage", "network", "reaper")


@dataclass(frozen=True)
class Built:
    reaper: EnvironmentReaper
    template: Template
    outdir: Path

    def resource(self, construct) -> dict:
        return self.template.to_json()["Resources"][logical_id(construct)]


def _build(outdir: Path, **props) -> Built:
    app = new_app(str(outdir))
    st = stack(STACK_NAME, app)
    reaper = EnvironmentReaper(
        st, "Reaper", EnvironmentReaperProps(environment=ENVIRONMENT, delete_at=DELETE_AT, **props)
    )
    (template,) = synth_as_kiln(app, outdir, [st]).values()
    return Built(reaper=reaper, template=template, outdir=outdir)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A reaper of two buckets alone in its stack, synthesized once with cdk-nag."""
    return _build(tmp_path_factory.mktemp("reaper"), bucket_names=BUCKETS)


@pytest.fixture(scope="module")
def from_a_used_checkout(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A reaper without buckets, its code taken from a copy of REAPER_CODE that Python has run from."""
    code = tmp_path_factory.mktemp("checkout") / "reaper_code"
    shutil.copytree(REAPER_CODE, code, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (code / "kiln_reaper" / "__pycache__").mkdir()
    (code / "kiln_reaper" / "__pycache__" / "handler.cpython-314.pyc").write_bytes(b"\x00bytecode")
    (code / "kiln_reaper" / "contract.pyc").write_bytes(b"\x00bytecode")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reaper_module, "REAPER_CODE", code)
        return _build(tmp_path_factory.mktemp("reaper-bare"))


# --- the function and its code -------------------------------------------------------------------------------


def test_the_function_runs_the_reaper_for_up_to_15_minutes_and_knows_its_alarm_topic(built: Built) -> None:
    reaper = built.reaper
    function = built.resource(reaper.function.node.default_child)
    properties = function["Properties"]
    assert {k: v for k, v in properties.items() if k != "Code"} == {
        "Runtime": "python3.14",
        "Handler": "kiln_reaper.handler.main",
        "Timeout": 900,
        "MemorySize": 256,
        "Role": get_att(reaper.role.node.default_child, "Arn"),
        "LoggingConfig": {"LogGroup": ref(reaper.log_group.node.default_child)},
        "Description": f"kiln reaper of {ENVIRONMENT}",
        "Environment": {
            "Variables": {
                "KILN_ENVIRONMENT": ENVIRONMENT,
                "KILN_SCHEDULE_NAME": f"{ENVIRONMENT}-reaper",
                "KILN_REAPER_STACK": STACK_NAME,
                "KILN_ALARM_TOPIC": ref(reaper.alarm_topic.node.default_child),
            }
        },
    }
    assert properties["Handler"] == HANDLER
    logs = built.resource(reaper.log_group.node.default_child)
    assert logs["Properties"] == {"RetentionInDays": 365}
    assert (logs["DeletionPolicy"], logs["UpdateReplacePolicy"]) == ("Delete", "Delete")


def _staged(built: Built) -> tuple[str, set[str]]:
    """Return the function's asset hash and the files staged for it, relative to the asset's root."""
    code = built.resource(built.reaper.function.node.default_child)["Properties"]["Code"]
    digest = code["S3Key"].removesuffix(".zip")
    assets = json.loads((built.outdir / f"{STACK_NAME}.assets.json").read_text())
    source = assets["files"][digest]["source"]
    assert source["packaging"] == "zip"
    root = built.outdir / source["path"]
    return digest, {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_the_asset_is_only_the_kiln_reaper_package(built: Built) -> None:
    package = REAPER_CODE / "kiln_reaper"
    sources = {f"kiln_reaper/{p.name}" for p in package.glob("*.py")}
    assert {"kiln_reaper/__init__.py", "kiln_reaper/handler.py"} <= sources
    _, files = _staged(built)
    # Lambda imports kiln_reaper from the asset's root: nothing else belongs beside it.
    assert files == sources


def test_bytecode_never_reaches_the_asset_nor_changes_it(built: Built, from_a_used_checkout: Built) -> None:
    digest, files = _staged(from_a_used_checkout)
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    # The same code hashes the same, so a checkout that has run the tests redeploys nothing.
    assert digest == _staged(built)[0]


# --- what the roles may do -----------------------------------------------------------------------------------


def test_the_reaper_role_may_delete_only_its_environment(built: Built) -> None:
    reaper = built.reaper
    role = reaper.role.node.default_child
    (document,) = role_policies(built.template, role)
    arn = f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack"
    passed = json.dumps({"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}, sort_keys=True)
    expected = {
        (action, f"{arn}/{ENVIRONMENT}-{part}/*", None)
        for action in acknowledgements.REAPER_STACK_ACTIONS
        for part in PARTS
    }
    for bucket in BUCKETS:
        expected |= {
            (a, f"arn:aws:s3:::{bucket}", None)
            for a in ("s3:GetBucketTagging", "s3:ListBucket", "s3:ListBucketVersions")
        }
        expected |= {(a, f"arn:aws:s3:::{bucket}/*", None) for a in ("s3:DeleteObject", "s3:DeleteObjectVersion")}
    schedule = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/default/{ENVIRONMENT}-reaper"
    expected |= {(a, schedule, None) for a in ("scheduler:GetSchedule", "scheduler:UpdateSchedule")}
    expected = {(a, json.dumps(r), c) for a, r, c in expected}
    invoke_role = json.dumps(get_att(reaper.invoke_role.node.default_child, "Arn"), sort_keys=True)
    expected.add(("iam:PassRole", invoke_role, passed))
    # GetAtt Arn of a log group is arn:...:log-group:<name>:*, its streams and nothing else.
    log_group = json.dumps(get_att(reaper.log_group.node.default_child, "Arn"), sort_keys=True)
    expected |= {(a, log_group, None) for a in ("logs:CreateLogStream", "logs:PutLogEvents")}
    # Its alarm topic, and no other.
    expected.add(("sns:Publish", json.dumps(ref(reaper.alarm_topic.node.default_child)), None))
    assert policy_rows(document) == expected
    assert acknowledgements.REAPER_STACK_ACTIONS == (
        "cloudformation:DeleteStack",
        "cloudformation:DescribeStackEvents",
        "cloudformation:DescribeStacks",
        "cloudformation:GetTemplate",
        "cloudformation:ListStackResources",
    )
    properties = built.resource(role)["Properties"]
    assert properties["RoleName"] == f"{ENVIRONMENT}-reaper"
    assert not {"ManagedPolicyArns", "Policies", "PermissionsBoundary"} & properties.keys()
    assert trust_statements(built.template, role) == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]


def test_without_buckets_the_reaper_may_touch_no_bucket(from_a_used_checkout: Built) -> None:
    (document,) = role_policies(from_a_used_checkout.template, from_a_used_checkout.reaper.role.node.default_child)
    assert not [row for row in policy_rows(document) if row[0].startswith("s3:")]


def test_only_the_scheduler_of_this_account_may_invoke_the_function(built: Built) -> None:
    reaper = built.reaper
    role = reaper.invoke_role.node.default_child
    assert trust_statements(built.template, role) == [
        {
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
        }
    ]
    (document,) = role_policies(built.template, role)
    function = json.dumps(get_att(reaper.function.node.default_child, "Arn"), sort_keys=True)
    assert policy_rows(document) == {("lambda:InvokeFunction", function, None)}
    properties = built.resource(role)["Properties"]
    assert properties["RoleName"] == f"{ENVIRONMENT}-reaper-invoke"
    assert not {"ManagedPolicyArns", "Policies", "PermissionsBoundary"} & properties.keys()
    # Two roles, two policies, and no resource policy on the function beside them.
    assert len(built.template.find_resources("AWS::IAM::Role")) == 2
    assert len(built.template.find_resources("AWS::IAM::Policy")) == 2
    assert not built.template.find_resources("AWS::Lambda::Permission")


# --- the schedule --------------------------------------------------------------------------------------------


def test_the_schedule_fires_once_at_delete_at_in_utc(built: Built) -> None:
    reaper = built.reaper
    assert reaper.schedule_name == f"{ENVIRONMENT}-reaper"
    # The construct's main L1 is its schedule.
    assert logical_id(reaper.node.default_child) == logical_id(reaper.schedule)
    schedule = built.resource(reaper.schedule)
    assert schedule["Type"] == "AWS::Scheduler::Schedule"
    assert schedule["Properties"] == {
        "Name": f"{ENVIRONMENT}-reaper",
        "GroupName": "default",
        "Description": f"Delete kiln environment {ENVIRONMENT} at the end of its TTL",
        "ScheduleExpression": "at(2030-01-03T03:04:05)",
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED",
        "Target": {
            "Arn": get_att(reaper.function.node.default_child, "Arn"),
            "RoleArn": get_att(reaper.invoke_role.node.default_child, "Arn"),
            "Input": json.dumps({"environment": ENVIRONMENT}),
            "RetryPolicy": {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185},
        },
    }


# --- reviews -------------------------------------------------------------------------------------------------


def _checkov_skips(resource: dict) -> list[tuple[str, str]]:
    return [(skip["id"], skip["comment"]) for skip in resource["Metadata"]["checkov"]["skip"]]


def test_checkov_skips_are_recorded_with_their_reasons(built: Built) -> None:
    function = built.resource(built.reaper.function.node.default_child)
    logs = built.resource(built.reaper.log_group.node.default_child)
    listed = {
        (s.resource_type, s.check): s.reason for s in acknowledgements.CHECKOV_SKIPS if "Reaper/" in " ".join(s.paths)
    }
    assert _checkov_skips(function) == [(c, listed["AWS::Lambda::Function", c]) for c, _ in _checkov_skips(function)]
    assert _checkov_skips(logs) == [("CKV_AWS_158", listed["AWS::Logs::LogGroup", "CKV_AWS_158"])]
    assert [c for c, _ in _checkov_skips(function)] == ["CKV_AWS_115", "CKV_AWS_117", "CKV_AWS_116", "CKV_AWS_173"]
    assert [c for c, _ in _checkov_skips(logs)] == ["CKV_AWS_158"]
    assert all(reason.strip() for _, reason in _checkov_skips(function) + _checkov_skips(logs))


def test_cdk_nag_is_clean_and_every_acknowledgement_is_a_reviewed_grant(built: Built) -> None:
    report = nag_report(built.outdir)
    assert report.violations == []
    reviewed = {grant.reason for grant in acknowledgements.REAPER_GRANTS}
    assert {reason for _, reason in report.acknowledged} <= reviewed
    stacks = f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack"
    assert sorted(rule for rule, _ in report.acknowledged) == sorted(
        [f"AwsSolutions::AwsSolutions-IAM5[Resource::{stacks}/{ENVIRONMENT}-{part}/*]" for part in PARTS]
        + [f"AwsSolutions::AwsSolutions-IAM5[Resource::arn:aws:s3:::{bucket}/*]" for bucket in BUCKETS]
    )


# --- props ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Llm-pr7", "llm_pr7", "7llm", "", "a" * 32])
def test_a_bad_environment_name_is_refused(name: str) -> None:
    with pytest.raises(
        ValueError, match=r"^EnvironmentReaperProps\.environment: got .*; allowed: a lowercase letter, then up to 30 "
    ):
        EnvironmentReaperProps(environment=name, delete_at=DELETE_AT)


def test_a_naive_delete_at_is_refused() -> None:
    naive = datetime(2030, 1, 2, 3, 4, 5)
    with pytest.raises(
        ValueError,
        match=r"^EnvironmentReaperProps\.delete_at: got datetime\.datetime\(2030, 1, 2, 3, 4, 5\); "
        r"allowed: a timezone-aware time$",
    ):
        EnvironmentReaperProps(environment=ENVIRONMENT, delete_at=naive)


def test_the_alarm_topic_is_the_environments_encrypted_and_tls_only(built: Built) -> None:
    reaper = built.reaper
    topic = built.resource(reaper.alarm_topic.node.default_child)["Properties"]
    assert topic["TopicName"] == f"{ENVIRONMENT}-reaper-alarm"
    assert topic["KmsMasterKeyId"].endswith(":alias/aws/sns")
    [policy] = [r for r in built.template.find_resources("AWS::SNS::TopicPolicy").values()]
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
