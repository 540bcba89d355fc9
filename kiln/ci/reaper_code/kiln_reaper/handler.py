"""The TTL reaper's Lambda entry point: delete this environment's stacks, or come back later to go on.

A teardown that keeps failing is not retried in silence: the reaper counts failed invocations in its schedule's
event and publishes to its alarm topic (KILN_ALARM_TOPIC) at the first failure and every ALARM_EVERY after, and when
the function itself breaks.
"""

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
# A failing teardown alarms at its first failed invocation, then every this many (4 hours at 30 minutes each).
ALARM_EVERY = 8


def main(event: dict, context: Any) -> dict:
    """Advance the teardown of KILN_ENVIRONMENT within this invocation; reschedule itself when not done."""
    environment = os.environ["KILN_ENVIRONMENT"]
    try:
        return _advance(environment, event, context)
    except Exception as exc:
        # The schedule's retry policy redelivers the event; say so where someone listens.
        alarm(environment, f"the reaper of {environment} failed: {type(exc).__name__}: {exc}")
        raise


def _advance(environment: str, event: dict, context: Any) -> dict:
    schedule = os.environ["KILN_SCHEDULE_NAME"]
    own_stack = os.environ["KILN_REAPER_STACK"]
    clients = Clients(cloudformation=boto3.client("cloudformation"), s3=boto3.client("s3"))
    budget_s = context.get_remaining_time_in_millis() / 1000 - _RESERVE_S
    try:
        done = teardown(clients, environment, progress=print, budget_s=budget_s, not_waiting_for=own_stack)
    except TeardownFailed as exc:
        failures = int(event.get("failures", 0)) + 1
        print(f"reaper {environment}: {exc}; failed {failures} times; trying again in {_RETRY_FAILED_AFTER}")
        if failures == 1 or failures % ALARM_EVERY == 0:
            alarm(
                environment,
                f"the teardown of {environment} has failed {failures} times (the last: {exc}); the reaper tries "
                f"again every {int(_RETRY_FAILED_AFTER.total_seconds() // 60)} minutes. Fix what blocks it, or "
                f"run `kiln ci down` for the environment.",
            )
        reschedule(
            boto3.client("scheduler"),
            schedule,
            _now() + _RETRY_FAILED_AFTER,
            SCHEDULE_GROUP,
            event={"environment": environment, "failures": failures},
        )
        return {"environment": environment, "done": False, "error": str(exc), "failures": failures}
    if done is None:
        reschedule(
            boto3.client("scheduler"),
            schedule,
            _now() + _AGAIN_AFTER,
            SCHEDULE_GROUP,
            event={"environment": environment},
        )
        print(f"reaper {environment}: not finished; going on at the next invocation")
        return {"environment": environment, "done": False}
    return {"environment": environment, "done": True, "deleted": done.deleted}


def alarm(environment: str, message: str) -> bool:
    """Publish MESSAGE to the reaper's alarm topic; return whether it went out (an alarm never stops the teardown)."""
    topic = os.environ.get("KILN_ALARM_TOPIC")
    if not topic:
        return False
    try:
        boto3.client("sns").publish(TopicArn=topic, Subject=f"kiln reaper: {environment}"[:100], Message=message)
    except Exception as exc:  # noqa: BLE001 - an alarm that cannot go out is logged, the teardown goes on
        print(f"reaper {environment}: could not publish the alarm: {exc}")
        return False
    return True


def _now() -> datetime:
    return datetime.now(timezone.utc)
