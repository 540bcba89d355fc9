"""EnvironmentReaper: a one-time schedule and a function that delete a short-lived environment when its TTL ends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from constructs import Construct

from kiln.catalog.names import CLUSTER_NAME, CLUSTER_NAME_RULE
from kiln.constructs._checks import require
from kiln.constructs.acknowledgements import (
    OBJECT_DELETES,
    PASS_ROLE,
    REAPER_GRANTS,
    REAPER_STACK_ACTIONS,
    RESCHEDULE_ACTIONS,
    TEARDOWN_BUCKET_READS,
)
from kiln.constructs.functions import kiln_function
from kiln.constructs.review import acknowledge_wildcards
from kiln.contracts.environment import (
    DELETE_ORDER,
    SCHEDULE_GROUP,
    alarm_topic_name,
    at_expression,
    invoke_role_name,
    reaper_role_name,
    schedule_name,
)

REAPER_CODE = Path(__file__).resolve().parent.parent / "ci" / "reaper_code"
HANDLER = "kiln_reaper.handler.main"
# One invocation's limit; the function reschedules itself when deleting takes longer (EKS, HyperPod, FSx).
TIMEOUT = cdk.Duration.minutes(15)
# SNS's AWS-managed key: the alarm topic is encrypted at rest, and only the reaper (in this account) publishes.
SNS_MANAGED_KEY = "alias/aws/sns"


@dataclass(frozen=True, kw_only=True)
class EnvironmentReaperProps:
    """Props for EnvironmentReaper.

    environment: the environment's name; its stacks are <environment>-compute, -storage, -network and
        -reaper (kiln.ci contract), its roles <environment>-reaper and <environment>-reaper-invoke.
    delete_at: when the environment goes (timezone-aware).
    bucket_names: the buckets the reaper may empty before their stacks delete them (names, tokens allowed);
        default none: it empties no bucket. It empties only those whose stack deletes them and that carry the
        environment's tag.
    log_retention: how long the reaper's log lines are kept; default one year.
    """

    environment: str
    delete_at: datetime
    bucket_names: Sequence[str] = ()
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR

    def __post_init__(self) -> None:
        require(
            self, bool(CLUSTER_NAME.fullmatch(self.environment)), "environment", self.environment, CLUSTER_NAME_RULE
        )
        require(self, self.delete_at.tzinfo is not None, "delete_at", self.delete_at, "a timezone-aware time")


class EnvironmentReaper(Construct):
    """Deletes its environment's stacks in order (compute, storage, network), then its own, at delete_at; publishes
    to its alarm topic (`alarm_topic`, <environment>-reaper-alarm) when that keeps failing."""

    def __init__(self, scope: Construct, construct_id: str, props: EnvironmentReaperProps) -> None:
        super().__init__(scope, construct_id)
        env = props.environment
        stack = cdk.Stack.of(self)
        self.schedule_name = schedule_name(env)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=props.log_retention, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "Role",
            role_name=reaper_role_name(env),
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"kiln reaper of {env}: deletes its stacks and empties their non-retained buckets",
        )
        self.alarm_topic = sns.Topic(
            self,
            "Alarm",
            topic_name=alarm_topic_name(env),
            display_name=f"kiln reaper {env}"[:100],
            master_key=kms.Alias.from_alias_name(self, "AlarmKey", SNS_MANAGED_KEY),
            enforce_ssl=True,
        )
        self.function = kiln_function(
            self,
            "Function",
            code_dir=REAPER_CODE,
            handler=HANDLER,
            role=self.role,
            timeout=TIMEOUT,
            log_group=self.log_group,
            description=f"kiln reaper of {env}",
            environment={
                "KILN_ENVIRONMENT": env,
                "KILN_SCHEDULE_NAME": self.schedule_name,
                "KILN_REAPER_STACK": stack.stack_name,
                "KILN_ALARM_TOPIC": self.alarm_topic.topic_arn,
            },
        )
        self.invoke_role = iam.Role(
            self,
            "InvokeRole",
            role_name=invoke_role_name(env),
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
            description=f"EventBridge Scheduler invokes the kiln reaper of {env}",
        )
        self.invoke_role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
        )
        self.schedule = scheduler.CfnSchedule(
            self,
            "Resource",
            name=self.schedule_name,
            group_name=SCHEDULE_GROUP,
            description=f"Delete kiln environment {env} at the end of its TTL",
            schedule_expression=at_expression(props.delete_at),
            schedule_expression_timezone="UTC",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.function.function_arn,
                role_arn=self.invoke_role.role_arn,
                input=json.dumps({"environment": env}),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_event_age_in_seconds=24 * 3600, maximum_retry_attempts=185
                ),
            ),
        )
        self._grant(props, stack)
        acknowledge_wildcards(self, REAPER_GRANTS, environment=env)

    def _grant(self, props: EnvironmentReaperProps, stack: cdk.Stack) -> None:
        env = props.environment
        stacks = [
            stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{env}-{part}/*")
            for part in DELETE_ORDER
        ]
        self.role.add_to_policy(iam.PolicyStatement(actions=list(REAPER_STACK_ACTIONS), resources=stacks))
        if props.bucket_names:
            buckets = [f"arn:{stack.partition}:s3:::{name}" for name in props.bucket_names]
            self.role.add_to_policy(iam.PolicyStatement(actions=list(TEARDOWN_BUCKET_READS), resources=buckets))
            self.role.add_to_policy(
                iam.PolicyStatement(actions=list(OBJECT_DELETES), resources=[f"{b}/*" for b in buckets])
            )
        schedule_arn = stack.format_arn(
            service="scheduler", resource="schedule", resource_name=f"{SCHEDULE_GROUP}/{self.schedule_name}"
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=list(RESCHEDULE_ACTIONS), resources=[schedule_arn]))
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=list(PASS_ROLE),
                resources=[self.invoke_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
        self.log_group.grant_write(self.role)
        self.role.add_to_policy(iam.PolicyStatement(actions=["sns:Publish"], resources=[self.alarm_topic.topic_arn]))
