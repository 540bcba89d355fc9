"""The teardown the reaper and `kiln ci down/sweep` share, and the reaper's Lambda handler, against moto."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from kiln.ci.reaper_code.kiln_reaper import handler
from kiln.ci.reaper_code.kiln_reaper.teardown import (
    MAX_DELETE_ATTEMPTS,
    Clients,
    Teardown,
    TeardownFailed,
    advance,
    reschedule,
    teardown,
)
from kiln.contracts.environment import at_expression, parse_at_expression
from tests.support.ci import (
    Recorder,
    bucket_resource,
    live_stacks,
    make_environment,
    make_stack,
    object_count,
    put_versions,
    tags,
)
from tests.support.fake_aws import ACCOUNT, REGION

ENV = "ci-smoke-r42"
# The slow tier (`make test-slow`): about 10 s of moto CloudFormation stacks.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning"),
]


def recording_clients(session: boto3.Session, calls: list) -> Clients:
    return Clients(
        cloudformation=Recorder(session.client("cloudformation"), ["delete_stack"], calls),
        s3=Recorder(session.client("s3"), ["delete_objects"], calls),
    )


def test_stacks_go_in_dependency_order_after_their_buckets_are_emptied(moto: boto3.Session) -> None:
    buckets = make_environment(moto, ENV)
    for bucket in buckets.values():
        put_versions(moto, bucket)
    calls: list = []
    lines: list[str] = []
    done = teardown(recording_clients(moto, calls), ENV, progress=lines.append, sleep=lambda s: None)
    assert done is not None
    deleted = [kw["StackName"].split("/")[1] for name, kw in calls if name == "delete_stack"]
    assert deleted == [f"{ENV}-compute", f"{ENV}-storage", f"{ENV}-network", f"{ENV}-reaper"]
    # Both storage buckets were emptied before the storage stack was asked to go.
    storage_delete = next(
        i for i, (name, kw) in enumerate(calls) if name == "delete_stack" and "storage" in kw["StackName"]
    )
    emptied = {kw["Bucket"] for name, kw in calls[:storage_delete] if name == "delete_objects"}
    assert emptied == set(buckets.values())
    assert done.emptied == {bucket: 4 for bucket in buckets.values()}  # 3 versions + 1 delete marker each
    assert live_stacks(moto) == set()
    assert f"{ENV}-storage: emptied bucket {buckets['data']} (4 objects)" in lines


def test_nothing_without_the_environment_tag_is_touched(moto: boto3.Session) -> None:
    make_environment(moto, ENV)
    # Same name shape, another environment's tag / no tag: left alone.
    make_stack(moto, "ci-smoke-r4-network", tags("ci-smoke-r4", "network"))
    other = "ci-smoke-r42-x-data-" + ACCOUNT
    make_stack(moto, "ci-smoke-r42-x-storage", [], {"Data": bucket_resource(other, None)})
    put_versions(moto, other)
    teardown(Clients(moto.client("cloudformation"), moto.client("s3")), ENV, progress=lambda s: None)
    assert live_stacks(moto) == {"ci-smoke-r4-network", "ci-smoke-r42-x-storage"}
    assert object_count(moto, other) == 4


def test_a_stack_with_the_name_but_not_the_tag_is_left_alone_and_said_so(moto: boto3.Session) -> None:
    make_stack(moto, f"{ENV}-network", tags("someone-else", "network"))
    lines: list[str] = []
    done = teardown(Clients(moto.client("cloudformation"), moto.client("s3")), ENV, progress=lines.append)
    assert done is not None and done.deleted == []
    assert live_stacks(moto) == {f"{ENV}-network"}
    assert lines == [f"{ENV}-network: not tagged kiln:environment={ENV}; left alone"]


def test_a_retained_bucket_and_a_bucket_of_another_environment_are_not_emptied(moto: boto3.Session) -> None:
    kept, foreign = f"{ENV}-data-{ACCOUNT}", f"{ENV}-data-logs-{ACCOUNT}"
    make_stack(
        moto,
        f"{ENV}-storage",
        tags(ENV, "storage"),
        {"Kept": bucket_resource(kept, ENV, retain=True), "Foreign": bucket_resource(foreign, "other-env")},
    )
    for bucket in (kept, foreign):
        put_versions(moto, bucket)
    lines: list[str] = []
    teardown(Clients(moto.client("cloudformation"), moto.client("s3")), ENV, progress=lines.append)
    assert object_count(moto, kept) == 4 and object_count(moto, foreign) == 4
    assert f"{ENV}-storage: bucket {foreign} is not tagged kiln:environment={ENV}; not emptied" in lines


def test_a_second_teardown_finds_nothing_and_changes_nothing(moto: boto3.Session) -> None:
    make_environment(moto, ENV)
    clients = Clients(moto.client("cloudformation"), moto.client("s3"))
    teardown(clients, ENV, progress=lambda s: None)
    calls: list = []
    again = teardown(recording_clients(moto, calls), ENV, progress=lambda s: None)
    assert again is not None and again.deleted == [] and calls == []


class _StuckStack:
    """A CloudFormation stand-in whose one stack stays as STATUS whatever is asked of it."""

    def __init__(self, status: str) -> None:
        self.status, self.deletes = status, 0

    def describe_stacks(self, StackName: str) -> dict:
        stack = {"StackName": StackName, "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{StackName}/1"}
        if not StackName.endswith("-compute"):
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "ValidationError", "Message": "does not exist"}}, "DescribeStacks")
        return {"Stacks": [stack | {"StackStatus": self.status, "Tags": tags(ENV, "compute")}]}

    def get_template(self, **_: object) -> dict:
        return {"TemplateBody": json.dumps({"Resources": {}})}

    def get_paginator(self, name: str) -> object:
        class Pages:
            def paginate(self, **_: object) -> list:
                return [{"StackResourceSummaries": []}]

        return Pages()

    def delete_stack(self, StackName: str) -> None:
        self.deletes += 1

    def describe_stack_events(self, StackName: str) -> dict:
        return {
            "StackEvents": [
                {"LogicalResourceId": "Cluster", "ResourceStatus": "DELETE_FAILED", "ResourceStatusReason": "in use"}
            ]
        }


def test_a_stack_that_keeps_failing_to_delete_stops_teardown_with_its_reason() -> None:
    cfn = _StuckStack("DELETE_FAILED")
    with pytest.raises(TeardownFailed, match=rf"{ENV}-compute: deletion failed 3 times: Cluster: in use"):
        teardown(Clients(cfn, None), ENV, progress=lambda s: None, sleep=lambda s: None)
    assert cfn.deletes == MAX_DELETE_ATTEMPTS


def test_teardown_returns_none_when_its_budget_runs_out_while_a_stack_is_deleting() -> None:
    cfn = _StuckStack("DELETE_IN_PROGRESS")
    ticks = iter(range(0, 10_000, 15))
    slept: list[float] = []
    result = teardown(
        Clients(cfn, None),
        ENV,
        progress=lambda s: None,
        budget_s=60,
        poll_s=15,
        sleep=slept.append,
        clock=lambda: next(ticks),
    )
    assert result is None and cfn.deletes == 0 and slept  # it waited, and never re-asked a deleting stack


def test_the_reaper_does_not_wait_for_its_own_stack() -> None:
    cfn = _StuckStack("CREATE_COMPLETE")
    state = Teardown(environment=ENV)
    blocking = advance(Clients(cfn, None), state, progress=lambda s: None)
    assert blocking is not None and cfn.deletes == 1
    done = teardown(Clients(cfn, None), ENV, progress=lambda s: None, not_waiting_for=f"{ENV}-compute")
    assert done is not None


def test_at_expressions_round_trip_in_utc() -> None:
    when = datetime(2026, 11, 23, 12, 30, 5, tzinfo=timezone.utc)
    assert at_expression(when) == "at(2026-11-23T12:30:05)"
    assert parse_at_expression(at_expression(when)) == when
    assert parse_at_expression("rate(5 minutes)") is None and parse_at_expression("at(soon)") is None


def _schedule(session: boto3.Session) -> None:
    session.client("scheduler").create_schedule(
        Name=f"{ENV}-reaper",
        ScheduleExpression="at(2026-11-23T12:00:00)",
        ScheduleExpressionTimezone="UTC",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:reaper",
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{ENV}-reaper-invoke",
            "Input": json.dumps({"environment": ENV}),
        },
        Description="keep me",
    )


def test_reschedule_moves_the_time_and_keeps_the_target(moto: boto3.Session) -> None:
    _schedule(moto)
    scheduler = moto.client("scheduler")
    reschedule(scheduler, f"{ENV}-reaper", datetime(2026, 11, 24, 8, 0, tzinfo=timezone.utc))
    after = scheduler.get_schedule(Name=f"{ENV}-reaper", GroupName="default")
    assert after["ScheduleExpression"] == "at(2026-11-24T08:00:00)"
    assert after["Target"]["Input"] == json.dumps({"environment": ENV})
    assert after["Target"]["RoleArn"].endswith(f"role/{ENV}-reaper-invoke") and after["Description"] == "keep me"


class _Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def reaper_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_ENVIRONMENT", ENV)
    monkeypatch.setenv("KILN_SCHEDULE_NAME", f"{ENV}-reaper")
    monkeypatch.setenv("KILN_REAPER_STACK", f"{ENV}-reaper")


def test_the_reaper_deletes_the_environment_and_then_itself(moto: boto3.Session, reaper_env: None) -> None:
    buckets = make_environment(moto, ENV)
    put_versions(moto, buckets["data"])
    _schedule(moto)
    result = handler.main({"environment": ENV}, _Context(900_000))
    assert result["done"] is True
    assert result["deleted"][:3] == [f"{ENV}-compute", f"{ENV}-storage", f"{ENV}-network"]
    assert live_stacks(moto) == set()


def test_a_reaper_out_of_time_comes_back_by_rescheduling_itself(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _schedule(moto)
    budgets: list[float] = []

    def unfinished(clients: Clients, environment: str, **options: float) -> None:
        budgets.append(options["budget_s"])  # a stack still deleting when the budget ran out

    monkeypatch.setattr(handler, "teardown", unfinished)
    before = datetime.now(timezone.utc)
    result = handler.main({"environment": ENV}, _Context(900_000))
    after = datetime.now(timezone.utc)
    assert result == {"environment": ENV, "done": False}
    assert budgets == [840.0]  # the invocation's time less the reserve for rescheduling
    moved = parse_at_expression(moto.client("scheduler").get_schedule(Name=f"{ENV}-reaper")["ScheduleExpression"])
    # Whole seconds: up to one second before the exact time.
    assert (
        moved is not None
        and before + handler._AGAIN_AFTER - timedelta(seconds=1) <= moved <= after + handler._AGAIN_AFTER
    )


def test_a_reaper_whose_teardown_fails_reports_it_and_tries_again_later(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _schedule(moto)

    def failing(clients: Clients, environment: str, **options: float) -> None:
        raise TeardownFailed(f"{ENV}-storage: deletion failed 3 times: Data: bucket not empty")

    monkeypatch.setattr(handler, "teardown", failing)
    before = datetime.now(timezone.utc)
    result = handler.main({"environment": ENV}, _Context(900_000))
    assert result["done"] is False and "bucket not empty" in result["error"]
    moved = parse_at_expression(moto.client("scheduler").get_schedule(Name=f"{ENV}-reaper")["ScheduleExpression"])
    assert moved is not None and moved >= before + handler._RETRY_FAILED_AFTER - timedelta(seconds=1)


def _alarm_topic(moto: boto3.Session, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Create the alarm topic and an SQS queue subscribed to it; return the topic ARN and the queue URL."""
    sns, sqs = moto.client("sns"), moto.client("sqs")
    topic = sns.create_topic(Name=f"{ENV}-reaper-alarm")["TopicArn"]
    queue = sqs.create_queue(QueueName="alarms")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    monkeypatch.setenv("KILN_ALARM_TOPIC", topic)
    return topic, queue


def _alarms(moto: boto3.Session, queue: str) -> list[str]:
    messages = moto.client("sqs").receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"])["Message"] for m in messages]


def test_a_failing_teardown_alarms_at_first_and_then_every_few_failures(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _schedule(moto)
    _, queue = _alarm_topic(moto, monkeypatch)

    def failing(clients: Clients, environment: str, **options: float) -> None:
        raise TeardownFailed(f"{ENV}-storage: deletion failed 3 times: Data: bucket not empty")

    monkeypatch.setattr(handler, "teardown", failing)
    event: dict = {"environment": ENV}
    alarmed = []
    for _ in range(handler.ALARM_EVERY):
        result = handler.main(event, _Context(900_000))
        # The count travels in the schedule's own event, the one the next invocation receives.
        target = moto.client("scheduler").get_schedule(Name=f"{ENV}-reaper")["Target"]
        event = json.loads(target["Input"])
        assert event == {"environment": ENV, "failures": result["failures"]}
        alarmed.extend((result["failures"], m) for m in _alarms(moto, queue))
    assert [count for count, _ in alarmed] == [1, handler.ALARM_EVERY]
    assert all("bucket not empty" in message and "kiln ci down" in message for _, message in alarmed)


def test_a_reaper_that_breaks_alarms_and_lets_the_schedule_retry(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, queue = _alarm_topic(moto, monkeypatch)

    def broken(clients: Clients, environment: str, **options: float) -> None:
        raise RuntimeError("throttled")

    monkeypatch.setattr(handler, "teardown", broken)
    with pytest.raises(RuntimeError, match="throttled"):
        handler.main({"environment": ENV}, _Context(900_000))
    [message] = _alarms(moto, queue)
    assert "RuntimeError: throttled" in message


def test_progress_resets_the_failure_count(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _schedule(moto)
    monkeypatch.setattr(handler, "teardown", lambda clients, environment, **options: None)
    handler.main({"environment": ENV, "failures": 5}, _Context(900_000))
    target = moto.client("scheduler").get_schedule(Name=f"{ENV}-reaper")["Target"]
    assert json.loads(target["Input"]) == {"environment": ENV}


def test_an_alarm_that_cannot_go_out_never_stops_the_teardown(
    moto: boto3.Session, reaper_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_ALARM_TOPIC", f"arn:aws:sns:us-east-1:123456789012:{ENV}-missing")
    assert handler.alarm(ENV, "x") is False
