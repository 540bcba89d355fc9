"""A stand-in for the CDK CLI in `kiln ci up` tests: records each call and 'deploys' into a moto server.

`--version` answers the pinned version. `deploy STACK --app DIR ... --outputs-file F` appends its argv to
$FAKE_CDK_LOG, fails when STACK is $FAKE_CDK_FAIL_STACK, and otherwise creates STACK in the moto server that
$AWS_ENDPOINT_URL names: a CloudFormation stack with the real template's buckets (names, tags, deletion
policy) and schedules, the manifest's stack tags, and the real outputs (a token's value stands in as
fake-<key>), which it also writes to F as the real CLI does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import boto3

from kiln.ci.deploy import CDK_CLI_VERSION


def _value(value: object, key: str) -> str:
    return value if isinstance(value, str) else f"fake-{key}"


def _deploy(stack: str, assembly: Path, outputs_file: Path) -> int:
    template = json.loads((assembly / f"{stack}.template.json").read_text())
    manifest = json.loads((assembly / "manifest.json").read_text())
    tags = manifest["artifacts"][stack]["properties"].get("tags", {})
    resources: dict = {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}
    schedules = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::S3::Bucket":
            properties = {k: resource["Properties"][k] for k in ("BucketName", "Tags") if k in resource["Properties"]}
            resources[logical_id] = {
                "Type": "AWS::S3::Bucket",
                "DeletionPolicy": resource.get("DeletionPolicy", "Delete"),
                "Properties": properties,
            }
        elif resource["Type"] == "AWS::Scheduler::Schedule":
            schedules.append(resource["Properties"])
    outputs = {key: _value(spec["Value"], key) for key, spec in template.get("Outputs", {}).items()}
    body = {"Resources": resources, "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    cfn = boto3.client("cloudformation")
    arguments = {
        "StackName": stack,
        "TemplateBody": json.dumps(body),
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }
    existing = [
        s
        for s in cfn.list_stacks()["StackSummaries"]
        if s["StackName"] == stack and s["StackStatus"] != "DELETE_COMPLETE"
    ]
    (cfn.update_stack if existing else cfn.create_stack)(**arguments)
    scheduler = boto3.client("scheduler")
    for schedule in schedules:
        # An update sets the schedule to the new template's at(), as CloudFormation would.
        made = {s["Name"] for s in scheduler.list_schedules(GroupName=schedule["GroupName"])["Schedules"]}
        (scheduler.update_schedule if schedule["Name"] in made else scheduler.create_schedule)(
            Name=schedule["Name"],
            GroupName=schedule["GroupName"],
            ScheduleExpression=schedule["ScheduleExpression"],
            ScheduleExpressionTimezone=schedule["ScheduleExpressionTimezone"],
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:lambda:us-east-1:123456789012:function:reaper",
                "RoleArn": "arn:aws:iam::123456789012:role/reaper-invoke",
                "Input": schedule["Target"]["Input"],
            },
        )
    outputs_file.write_text(json.dumps({stack: outputs}))
    print(f" ✅  {stack} (fake)")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(f"{CDK_CLI_VERSION} (build fake)")
        return 0
    with open(os.environ["FAKE_CDK_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:1] != ["deploy"]:
        print(f"fake cdk: unexpected {argv}", file=sys.stderr)
        return 64
    stack = argv[1]
    if stack == os.environ.get("FAKE_CDK_FAIL_STACK"):
        print(f" ❌  {stack} failed: Resource handler returned message: capacity not available", file=sys.stderr)
        return 1
    return _deploy(stack, Path(argv[argv.index("--app") + 1]), Path(argv[argv.index("--outputs-file") + 1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
