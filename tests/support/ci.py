"""Builders for the `kiln ci` tests: environments made of tiny stacks in moto, recording clients, fake clocks."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3

from kiln.contracts.tags import TAG_ENVIRONMENT, TAG_PART, TAG_TTL_HOURS
from tests.support.fake_aws import ACCOUNT, REGION

FAKE_AMI = "ami-12345678"  # moto runs any image id; listing its catalog takes seconds


def running(pids: list[int], wait_s: float = 5.0) -> list[int]:
    """Return those of PIDS still running (not gone, not a zombie nobody reaped yet), after up to WAIT_S."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def hyperpod_instance_group(name: str, count: int) -> dict[str, Any]:
    """Return a HyperPod instance group of COUNT ml.m5.xlarge named NAME, as CreateCluster takes it in moto."""
    return {
        "InstanceGroupName": name,
        "InstanceType": "ml.m5.xlarge",
        "InstanceCount": count,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/kiln", "OnCreate": "on_create.sh"},
        "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hyperpod",
        "ThreadsPerCore": 1,
    }


class Recorder:
    """A boto3 client that records the calls named in WATCHED, in order, and passes everything on."""

    def __init__(self, client: Any, watched: Sequence[str], calls: list[tuple[str, dict]]) -> None:
        self._client, self._watched, self.calls = client, set(watched), calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name not in self._watched:
            return attribute

        def recorded(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return attribute(**kwargs)

        return recorded


def tags(environment: str, part: str, *, ttl: str | None = "2") -> list[dict]:
    values = {TAG_ENVIRONMENT: environment, TAG_PART: part}
    if ttl is not None:
        values[TAG_TTL_HOURS] = ttl
    return [{"Key": k, "Value": v} for k, v in values.items()]


def bucket_resource(name: str, environment: str | None, *, retain: bool = False, versioned: bool = True) -> dict:
    properties: dict[str, Any] = {"BucketName": name}
    if environment is not None:
        properties["Tags"] = [{"Key": TAG_ENVIRONMENT, "Value": environment}]
    if versioned:
        properties["VersioningConfiguration"] = {"Status": "Enabled"}
    return {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain" if retain else "Delete", "Properties": properties}


def make_stack(
    session: boto3.Session,
    name: str,
    stack_tags: list[dict],
    resources: dict | None = None,
    outputs: dict[str, str] | None = None,
) -> None:
    """Create a small real stack in moto: a wait-condition handle, RESOURCES, and literal OUTPUTS."""
    template: dict[str, Any] = {
        "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}, **(resources or {})}
    }
    if outputs:
        template["Outputs"] = {key: {"Value": value} for key, value in outputs.items()}
    session.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template), Tags=stack_tags)


def make_environment(session: boto3.Session, environment: str, **tag_options: Any) -> dict[str, str]:
    """Create ENVIRONMENT's four stacks as `kiln ci up` leaves them; return its bucket names by purpose."""
    buckets = {purpose: f"{environment}-{purpose}-{ACCOUNT}" for purpose in ("data", "data-logs")}
    make_stack(session, f"{environment}-reaper", tags(environment, "reaper", **tag_options))
    make_stack(session, f"{environment}-network", tags(environment, "network", **tag_options))
    make_stack(
        session,
        f"{environment}-storage",
        tags(environment, "storage", **tag_options),
        {
            "Data": bucket_resource(buckets["data"], environment),
            "Logs": bucket_resource(buckets["data-logs"], environment),
        },
    )
    make_stack(
        session,
        f"{environment}-compute",
        tags(environment, "compute", **tag_options),
        outputs={"Backend": "pcs", "Orchestrator": "slurm", "ClusterName": environment},
    )
    return buckets


def put_versions(session: boto3.Session, bucket: str, count: int = 3) -> None:
    """Write COUNT versions of one key and a delete marker, as a versioned data bucket collects them."""
    s3 = session.client("s3")
    # moto's CloudFormation does not apply VersioningConfiguration; S3 itself does.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for i in range(count):
        s3.put_object(Bucket=bucket, Key="checkpoints/step-1.pt", Body=f"v{i}".encode())
    s3.delete_object(Bucket=bucket, Key="checkpoints/step-1.pt")


def live_stacks(session: boto3.Session) -> set[str]:
    cfn = session.client("cloudformation")
    return {s["StackName"] for s in cfn.describe_stacks()["Stacks"] if s["StackStatus"] != "DELETE_COMPLETE"}


def object_count(session: boto3.Session, bucket: str) -> int:
    page = session.client("s3").list_object_versions(Bucket=bucket)
    return len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))


class FakeSession:
    """A boto3 session whose client for a service can be replaced (by a Stubber's), the rest real (moto)."""

    profile_name = "default"

    def __init__(self, base: boto3.Session | None = None, **clients: Any) -> None:
        self.base = base or boto3.Session(region_name=REGION)
        self.clients = clients

    def client(self, service: str, region_name: str | None = None) -> Any:
        return self.clients.get(service) or self.base.client(service, region_name=region_name)


class Clock:
    """A clock that moves only when something sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class CommandWith:
    """Matches Run Command parameters whose script contains TEXT (for Stubber's expected_params)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and any(self.text in line for line in other.get("commands", []))

    def __repr__(self) -> str:
        return f"CommandWith({self.text!r})"


def launch(tags: dict[str, str], *, state: str = "running") -> str:
    ec2 = boto3.client("ec2", region_name=REGION)
    instance = ec2.run_instances(
        ImageId=FAKE_AMI,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )["Instances"][0]["InstanceId"]
    if state == "stopped":
        ec2.stop_instances(InstanceIds=[instance])
    return instance


SPEC = """\
name: ci-smoke
region: us-east-1
availability_zone: us-east-1a
storage:
  lustre: {deployment: SCRATCH_2, storage_gib: 1200}
compute:
  backend: pcs
  login_nodes: {instance_type: m5.xlarge, count: 1}
  groups:
    - {name: gpu, instance_type: g5.12xlarge, min_count: 1, max_count: 2}
ci: {ttl_hours: 2}
"""
