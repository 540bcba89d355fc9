"""Delete one environment's stacks in dependency order, emptying its non-retained buckets first.

Shared by the TTL reaper (a Lambda function) and `kiln ci down/sweep`, so both delete the same way. Nothing is
touched that does not carry the environment's tag: a stack or bucket with the right name but another (or no)
`kiln:environment` tag is left alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from .contract import DELETE_ORDER, SCHEDULE_GROUP, TAG_ENVIRONMENT, at_expression, stack_name

# CloudFormation keeps resources with these policies; a bucket with any other is deleted with its stack.
RETAINING_POLICIES = ("Retain", "RetainExceptOnCreate", "Snapshot")
# A stack whose deletion failed is emptied and tried again, this many deletions in all, before teardown gives up.
MAX_DELETE_ATTEMPTS = 3
_DELETE_BATCH = 1000


class TeardownFailed(Exception):
    """A stack would not delete; the message is one line naming it and CloudFormation's reason."""


@dataclass(frozen=True)
class Clients:
    """The boto3 clients teardown needs, for one region."""

    cloudformation: Any
    s3: Any


@dataclass
class Teardown:
    """Where the deletion of one environment stands: what went, how often each stack was asked to go."""

    environment: str
    deleted: list[str] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    emptied: dict[str, int] = field(default_factory=dict)


def tags_of(stack: dict) -> dict[str, str]:
    """Return a described stack's tags as a dict."""
    return {tag["Key"]: tag["Value"] for tag in stack.get("Tags", [])}


def error_code(exc: ClientError) -> str:
    """Return the AWS error code of EXC."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def describe_stack(cfn: Any, name: str) -> dict | None:
    """Return the live stack NAME, or None when there is none (deleted stacks count as none)."""
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if error_code(exc) == "ValidationError" and "does not exist" in str(exc):
            return None
        raise
    live = [s for s in stacks if s["StackStatus"] != "DELETE_COMPLETE"]
    return live[0] if live else None


def environment_stacks(cfn: Any, environment: str, skipped: Callable[[str], None] | None = None) -> list[dict]:
    """Return ENVIRONMENT's live stacks in delete order; only those tagged as ENVIRONMENT's."""
    found = []
    for part in DELETE_ORDER:
        stack = describe_stack(cfn, stack_name(environment, part))
        if stack is None:
            continue
        if tags_of(stack).get(TAG_ENVIRONMENT) != environment:
            if skipped is not None:
                skipped(f"{stack['StackName']}: not tagged {TAG_ENVIRONMENT}={environment}; left alone")
            continue
        found.append(stack)
    return found


def _template(cfn: Any, stack_id: str) -> dict:
    body = cfn.get_template(StackName=stack_id, TemplateStage="Original")["TemplateBody"]
    return json.loads(body) if isinstance(body, str) else dict(body)


def deletable_buckets(cfn: Any, stack: dict) -> list[str]:
    """Return the names of the buckets STACK deletes with itself (retained ones excluded)."""
    resources = _template(cfn, stack["StackId"]).get("Resources", {})
    names = []
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack["StackId"]):
        for item in page["StackResourceSummaries"]:
            if item["ResourceType"] != "AWS::S3::Bucket" or not item.get("PhysicalResourceId"):
                continue
            if item.get("ResourceStatus") == "DELETE_COMPLETE":
                continue
            policy = resources.get(item["LogicalResourceId"], {}).get("DeletionPolicy", "Delete")
            if policy not in RETAINING_POLICIES:
                names.append(item["PhysicalResourceId"])
    return names


def bucket_environment(s3: Any, bucket: str) -> str | None:
    """Return BUCKET's kiln:environment tag, or None (no such bucket, no tags)."""
    try:
        tag_set = s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
    except ClientError as exc:
        if error_code(exc) in ("NoSuchTagSet", "NoSuchBucket"):
            return None
        raise
    return {tag["Key"]: tag["Value"] for tag in tag_set}.get(TAG_ENVIRONMENT)


def empty_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker in BUCKET; return how many went."""
    removed = 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            keys = [
                {"Key": item["Key"], "VersionId": item["VersionId"]}
                for item in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            for start in range(0, len(keys), _DELETE_BATCH):
                batch = keys[start : start + _DELETE_BATCH]
                s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
                removed += len(batch)
    except ClientError as exc:
        if error_code(exc) != "NoSuchBucket":
            raise
    return removed


def _failure_reason(cfn: Any, stack: dict) -> str:
    try:
        events = cfn.describe_stack_events(StackName=stack["StackId"])["StackEvents"]
    except ClientError:
        events = []
    for event in events:
        if event.get("ResourceStatus") == "DELETE_FAILED" and event.get("ResourceStatusReason"):
            return f"{event['LogicalResourceId']}: {event['ResourceStatusReason']}"
    return stack.get("StackStatusReason") or "no reason given"


def advance(clients: Clients, state: Teardown, *, progress: Callable[[str], None]) -> dict | None:
    """Take the next step of the teardown; return the stack now in the way, or None when none is left.

    Stacks go one at a time, each only after the one before it is gone: a stack cannot be deleted while a
    later one still imports its outputs.
    """
    stacks = environment_stacks(clients.cloudformation, state.environment, progress)
    live = {s["StackName"] for s in stacks}
    for name in state.attempts:
        if name not in live and name not in state.deleted:
            state.deleted.append(name)
            progress(f"{name}: deleted")
    if not stacks:
        return None
    stack = stacks[0]
    name, status = stack["StackName"], stack["StackStatus"]
    if status.endswith("_IN_PROGRESS") and status != "REVIEW_IN_PROGRESS":
        return stack  # being deleted, or still being created or updated: wait for it to settle
    if status == "DELETE_FAILED" and state.attempts.get(name, 0) >= MAX_DELETE_ATTEMPTS:
        reason = _failure_reason(clients.cloudformation, stack)
        raise TeardownFailed(f"{name}: deletion failed {state.attempts[name]} times: {reason}")
    for bucket in deletable_buckets(clients.cloudformation, stack):
        if bucket_environment(clients.s3, bucket) != state.environment:
            progress(f"{name}: bucket {bucket} is not tagged {TAG_ENVIRONMENT}={state.environment}; not emptied")
            continue
        removed = empty_bucket(clients.s3, bucket)
        state.emptied[bucket] = state.emptied.get(bucket, 0) + removed
        if removed:
            progress(f"{name}: emptied bucket {bucket} ({removed} objects)")
    state.attempts[name] = state.attempts.get(name, 0) + 1
    progress(f"{name}: deleting{' again' if status == 'DELETE_FAILED' else ''} (was {status})")
    clients.cloudformation.delete_stack(StackName=stack["StackId"])
    still = describe_stack(clients.cloudformation, name)
    # Gone at once (nothing slow in it): go on to the next stack without waiting a poll.
    return still if still is not None else advance(clients, state, progress=progress)


def teardown(
    clients: Clients,
    environment: str,
    *,
    progress: Callable[[str], None],
    budget_s: float | None = None,
    not_waiting_for: str | None = None,
    poll_s: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Teardown | None:
    """Delete ENVIRONMENT's stacks in order; return what was done, or None when BUDGET_S ran out first.

    NOT_WAITING_FOR names a stack whose deletion teardown starts but does not wait for: the reaper's own
    stack, which deletes the function running this. Raises TeardownFailed when a stack keeps failing.
    """
    state = Teardown(environment=environment)
    started = clock()
    while True:
        blocking = advance(clients, state, progress=progress)
        if blocking is None:
            return state
        if blocking["StackName"] == not_waiting_for and (
            not_waiting_for in state.attempts or blocking["StackStatus"] == "DELETE_IN_PROGRESS"
        ):
            return state
        if budget_s is not None and clock() - started + poll_s > budget_s:
            return None
        sleep(poll_s)


_KEPT_SCHEDULE_FIELDS = ("Target", "FlexibleTimeWindow", "State", "Description", "ActionAfterCompletion", "KmsKeyArn")


def reschedule(
    scheduler: Any, name: str, when: datetime, group: str = SCHEDULE_GROUP, *, event: dict | None = None
) -> None:
    """Move the one-time schedule NAME to WHEN, keeping its target and everything else it had (the target's input
    replaced by EVENT when given)."""
    current = scheduler.get_schedule(Name=name, GroupName=group)
    kept = {key: current[key] for key in _KEPT_SCHEDULE_FIELDS if current.get(key) is not None}
    if event is not None:
        kept["Target"] = {**kept["Target"], "Input": json.dumps(event)}
    scheduler.update_schedule(
        Name=name, GroupName=group, ScheduleExpression=at_expression(when), ScheduleExpressionTimezone="UTC", **kept
    )
