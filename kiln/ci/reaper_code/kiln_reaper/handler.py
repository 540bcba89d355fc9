"""The TTL reaper's Lambda entry point: delete this environment's stacks, or come back later to go on."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3

from .contract import SCHEDULE_GROUP
from .teardown import Clients, TeardownFailed, reschedule, teardown

# Leave this much of the invocation for rescheduling; come back this soon to go on, or this late after a failure.
_RESERVE_S = 60
_AGAIN_AFTER = timedelta(minutes=2)
_RETRY_FAILED_AFTER = timedelta(minutes=30)


def main(event: dict, context: Any) -> dict:
    """Advance the teardown of KILN_ENVIRONMENT within this invocation; reschedule itself when not done."""
    environment = os.environ["KILN_ENVIRONMENT"]
    schedule = os.environ["KILN_SCHEDULE_NAME"]
    own_stack = os.environ["KILN_REAPER_STACK"]
    clients = Clients(cloudformation=boto3.client("cloudformation"), s3=boto3.client("s3"))
    budget_s = context.get_remaining_time_in_millis() / 1000 - _RESERVE_S
    try:
        done = teardown(clients, environment, progress=print, budget_s=budget_s, not_waiting_for=own_stack)
    except TeardownFailed as exc:
        print(f"reaper {environment}: {exc}; trying again in {_RETRY_FAILED_AFTER}")
        reschedule(boto3.client("scheduler"), schedule, _now() + _RETRY_FAILED_AFTER, SCHEDULE_GROUP)
        return {"environment": environment, "done": False, "error": str(exc)}
    if done is None:
        reschedule(boto3.client("scheduler"), schedule, _now() + _AGAIN_AFTER, SCHEDULE_GROUP)
        print(f"reaper {environment}: not finished; going on at the next invocation")
        return {"environment": environment, "done": False}
    return {"environment": environment, "done": True, "deleted": done.deleted}


def _now() -> datetime:
    return datetime.now(timezone.utc)
