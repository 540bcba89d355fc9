"""Find kiln's short-lived environments by their tags, and which of them are past their time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.aws.errors import ACCESS_DENIED, error_code
from kiln.ci.reaper_code.kiln_reaper.teardown import describe_stack, tags_of
from kiln.contracts.environment import DELETE_ORDER, SCHEDULE_GROUP, parse_at_expression, schedule_name, stack_name
from kiln.contracts.tags import TAG_ENVIRONMENT, TAG_PART, TAG_TTL_HOURS

if TYPE_CHECKING:
    from kiln.aws.session import CloudFormationClient, EventBridgeSchedulerClient, StackStatus

LIVE_STATUSES: tuple[StackStatus, ...] = (
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_COMPLETE",
    "UPDATE_FAILED",
    "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED",
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_ROLLBACK_COMPLETE",
    "IMPORT_IN_PROGRESS",
    "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED",
    "IMPORT_ROLLBACK_COMPLETE",
)


@dataclass(frozen=True)
class FoundEnvironment:
    """One environment kiln's tags name, when it is due, and why then."""

    name: str
    stacks: tuple[str, ...]
    created_at: datetime | None
    due_at: datetime | None
    due_because: str

    def expired(self, now: datetime) -> bool:
        return self.due_at is not None and self.due_at <= now


def environments_by_tag(cfn: CloudFormationClient) -> dict[str, list[dict[str, Any]]]:
    """Return every live stack that carries kiln:environment, grouped by that environment.

    Lists stack names first (ListStacks takes no resource scope) and describes only those named like an
    environment's part, one by one: the CI role may describe only its own clusters' stacks, and a stack it may
    not read is not one it may delete.
    """
    names = [
        summary["StackName"]
        for page in cfn.get_paginator("list_stacks").paginate(StackStatusFilter=list(LIVE_STATUSES))
        for summary in page["StackSummaries"]
        if summary["StackName"].rsplit("-", 1)[-1] in DELETE_ORDER
    ]
    found: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(set(names)):
        try:
            stack = describe_stack(cfn, name)
        except ClientError as exc:
            if error_code(exc) in ACCESS_DENIED:
                continue
            raise
        if stack is None:
            continue
        environment = tags_of(stack).get(TAG_ENVIRONMENT)
        if environment and name == stack_name(environment, tags_of(stack).get(TAG_PART, "")):
            found.setdefault(environment, []).append(stack)
    return found


def scheduled_deletion(scheduler: EventBridgeSchedulerClient, environment: str) -> datetime | None:
    """Return when ENVIRONMENT's reaper schedule fires (moved by `kiln ci extend`), or None without one."""
    try:
        schedule = scheduler.get_schedule(Name=schedule_name(environment), GroupName=SCHEDULE_GROUP)
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise
    return parse_at_expression(schedule.get("ScheduleExpression", ""))


def judge(
    environment: str, stacks: Iterable[dict[str, Any]], *, scheduled: datetime | None, older_than: timedelta
) -> FoundEnvironment:
    """Return when ENVIRONMENT is due: its reaper's schedule, else creation + TTL tag, else creation + OLDER_THAN.

    Creation is the earliest CreationTime of its stacks.
    """
    stacks = list(stacks)
    names = tuple(sorted(s["StackName"] for s in stacks))
    created = min((s["CreationTime"] for s in stacks if s.get("CreationTime")), default=None)
    if scheduled is not None:
        return FoundEnvironment(environment, names, created, scheduled, "its reaper's schedule")
    if created is None:
        return FoundEnvironment(environment, names, None, None, "no creation time; left alone")
    created = created.astimezone(timezone.utc)
    ttl = next((tags_of(s)[TAG_TTL_HOURS] for s in stacks if TAG_TTL_HOURS in tags_of(s)), None)
    try:
        hours = float(ttl) if ttl is not None else None
    except ValueError:
        hours = None
    if hours is not None:
        return FoundEnvironment(environment, names, created, created + timedelta(hours=hours), f"TTL {ttl} h")
    return FoundEnvironment(environment, names, created, created + older_than, "no TTL; --older-than")


def find_environments(
    cfn: CloudFormationClient, scheduler: EventBridgeSchedulerClient, *, older_than: timedelta
) -> list[FoundEnvironment]:
    """Return every environment kiln's tags name in this region, with when each is due."""
    return [
        judge(name, stacks, scheduled=scheduled_deletion(scheduler, name), older_than=older_than)
        for name, stacks in sorted(environments_by_tag(cfn).items())
    ]
