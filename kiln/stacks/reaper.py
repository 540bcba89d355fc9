"""ReaperStack: a short-lived environment's TTL, deployed first and deleted last."""

from __future__ import annotations

from datetime import timezone
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.constructs.reaper import EnvironmentReaper, EnvironmentReaperProps
from kiln.contracts.environment import BUCKET_PURPOSES
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.errors import UnbuildableSpec


class ReaperStack(cdk.Stack):
    """The environment's reaper: its schedule fires at the end of the TTL, even when no CI is left to call down."""

    def __init__(self, scope: Construct, construct_id: str, *, ci: CiEnvironment, **kwargs: Any) -> None:
        if ci.delete_at is None:
            raise UnbuildableSpec(f"ci.ttl_hours: environment {ci.name!r} has none; a reaper needs a TTL")
        delete_at = ci.delete_at.astimezone(timezone.utc)
        super().__init__(
            scope,
            construct_id,
            description=f"kiln {ci.name}: TTL reaper (deletes at {delete_at:%Y-%m-%d %H:%M} UTC)",
            **kwargs,
        )
        self.reaper = EnvironmentReaper(
            self,
            "Reaper",
            EnvironmentReaperProps(
                environment=ci.name,
                delete_at=ci.delete_at,
                # Retained data buckets outlive the environment: the reaper may not empty them.
                bucket_names=[
                    ci.bucket_name(purpose)
                    for purpose in BUCKET_PURPOSES
                    if not (ci.retain_data and purpose.startswith("data"))
                ],
            ),
        )
        cdk.CfnOutput(self, "DeleteAt", value=delete_at.isoformat())
        cdk.CfnOutput(self, "ScheduleName", value=self.reaper.schedule_name)
        # Subscribe to hear of a teardown that keeps failing (aws sns subscribe --topic-arn ... --protocol email).
        cdk.CfnOutput(self, "AlarmTopicArn", value=self.reaper.alarm_topic.topic_arn)
