"""Which HyperPod nodes run lifecycle scripts older than those in S3, and UpdateClusterSoftware to rerun them.

HyperPod runs an instance group's lifecycle scripts when it provisions a node; UpdateCluster runs them only for new
instance groups, UpdateClusterSoftware on every node of the groups it names (platforms.json,
hyperpod.lifecycle_reruns). kiln keeps each group's SourceS3Uri fixed, so a deploy that changes the scripts
rewrites the objects under it and nothing else: a node whose launch and last software update are both older than
the newest object there booted with older scripts. A node provisioned while the deploy wrote them counts as older
too: rerunning the scripts on a node that has them costs time, skipping one that lacks them costs correctness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import aws_call, error_code, explain, one_line, raise_if_no_credentials
from kiln.contracts.errors import Failure, InputError

if TYPE_CHECKING:
    from kiln.aws.session import S3Client, SageMakerClient

# The cluster state UpdateClusterSoftware starts from (ClusterStatus of DescribeCluster).
READY_STATUS = "InService"


class SoftwareError(Failure):
    """What stops the check or the update; str() is one line: what is wrong and what to do."""


class GroupNotFound(InputError):
    """--group names an instance group the cluster does not have."""


@dataclass(frozen=True)
class GroupState:
    """One instance group: where its scripts are, when they were last written, and its nodes that predate that."""

    name: str
    scripts: str
    written: datetime
    nodes: int
    older: tuple[str, ...]
    image_id: str | None

    @property
    def current(self) -> bool:
        return not self.older


@dataclass(frozen=True)
class SoftwarePlan:
    """What UpdateClusterSoftware would rerun the lifecycle scripts on."""

    cluster: str
    status: str
    groups: tuple[GroupState, ...]

    @property
    def to_update(self) -> tuple[GroupState, ...]:
        """Return the groups with a node that booted before its scripts were last written."""
        return tuple(g for g in self.groups if not g.current)


def _call(what: str, call: Any, **kwargs: Any) -> Any:
    """Return CALL(**KWARGS); any AWS refusal becomes a SoftwareError naming WHAT."""
    with aws_call(what, SoftwareError):
        return call(**kwargs)


def _pages(paginate: Callable[..., Iterable[Mapping[str, Any]]], what: str, key: str, **kwargs: Any) -> Iterable[Any]:
    """Yield every KEY item of the pages PAGINATE (a paginator's paginate) returns for KWARGS; any AWS refusal
    becomes a SoftwareError naming WHAT."""
    with aws_call(what, SoftwareError):
        for page in paginate(**kwargs):
            yield from page.get(key, [])


def split_s3_uri(uri: str) -> tuple[str, str]:
    """Return the bucket and key prefix of s3://BUCKET/PREFIX."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise SoftwareError(f"lifecycle scripts at {uri!r}: not an s3://bucket/prefix address")
    return bucket, prefix


def scripts_written(s3: S3Client, uri: str) -> datetime:
    """Return when the newest object under URI was written (s3:ListBucket on its bucket)."""
    bucket, prefix = split_s3_uri(uri)
    stamps: list[datetime] = [
        o["LastModified"]
        for o in _pages(
            s3.get_paginator("list_objects_v2").paginate,
            f"s3:ListBucket {bucket}",
            "Contents",
            Bucket=bucket,
            Prefix=prefix,
        )
    ]
    if not stamps:
        raise SoftwareError(f"no lifecycle scripts under {uri}: deploy the spec again to write them")
    return max(stamps)


def describe(sagemaker: SageMakerClient, cluster: str, region: str) -> Mapping[str, Any]:
    """Return DescribeCluster of CLUSTER; one line when it does not exist."""
    try:
        return sagemaker.describe_cluster(ClusterName=cluster)
    except ClientError as error:
        raise_if_no_credentials(error)
        if error_code(error) in ("ResourceNotFound", "ValidationException"):
            raise SoftwareError(f"no HyperPod cluster {cluster} in {region}: deploy the spec first") from None
        raise SoftwareError(explain(f"sagemaker:DescribeCluster {cluster}", error)) from None
    except BotoCoreError as error:
        raise_if_no_credentials(error)
        raise SoftwareError(f"sagemaker:DescribeCluster {cluster}: {one_line(str(error))}") from None


def booted(node: dict[str, Any]) -> datetime:
    """Return when NODE last took its lifecycle scripts: its launch, or its last software update if later."""
    launched: datetime = node["LaunchTime"]
    updated: datetime | None = node.get("LastSoftwareUpdateTime")
    return max(launched, updated) if updated else launched


def plan_update(
    sagemaker: SageMakerClient, s3: S3Client, cluster: str, region: str, only: Sequence[str] = ()
) -> SoftwarePlan:
    """Return, for CLUSTER's instance groups (ONLY those, when given), the nodes older than their scripts."""
    described = describe(sagemaker, cluster, region)
    groups = {g["InstanceGroupName"]: g for g in described.get("InstanceGroups", [])}
    unknown = [name for name in only if name not in groups]
    if unknown:
        raise GroupNotFound(
            f"--group {', '.join(unknown)}: cluster {cluster} has the groups {', '.join(groups) or 'none'}"
        )
    nodes: dict[str, list[dict[str, Any]]] = {}
    for node in _pages(
        sagemaker.get_paginator("list_cluster_nodes").paginate,
        f"sagemaker:ListClusterNodes {cluster}",
        "ClusterNodeSummaries",
        ClusterName=cluster,
    ):
        nodes.setdefault(node["InstanceGroupName"], []).append(node)
    states = []
    written_at: dict[str, datetime] = {}  # groups usually share one place
    for name, group in groups.items():
        if only and name not in only:
            continue
        scripts = group.get("LifeCycleConfig", {}).get("SourceS3Uri")
        if not scripts:
            raise SoftwareError(f"instance group {name} of {cluster} names no lifecycle scripts (SourceS3Uri)")
        if scripts not in written_at:
            written_at[scripts] = scripts_written(s3, scripts)
        written = written_at[scripts]
        members = nodes.get(name, [])
        older = tuple(sorted(n["InstanceId"] for n in members if booted(n) < written))
        states.append(
            GroupState(
                name=name,
                scripts=scripts,
                written=written,
                nodes=len(members),
                older=older,
                image_id=group.get("CurrentImageId"),
            )
        )
    return SoftwarePlan(cluster=cluster, status=described.get("ClusterStatus", ""), groups=tuple(states))


def update_request(plan: SoftwarePlan) -> dict[str, Any]:
    """Return the UpdateClusterSoftware request that reruns the scripts on PLAN's groups with older nodes.

    Each group keeps the image it runs: a group on a custom AMI must be given one (platforms.json,
    hyperpod.update_software), and without one HyperPod moves the groups to its newest image, more than was asked.
    """
    groups = plan.to_update
    if not groups:
        raise SoftwareError("every node runs the lifecycle scripts in S3: nothing to update")
    if plan.status != READY_STATUS:
        raise SoftwareError(f"cluster {plan.cluster} is {plan.status}: wait until it is {READY_STATUS}, then run again")
    images = {g.image_id for g in groups}
    if len(images) > 1:
        shown = ", ".join(f"{g.name} ({g.image_id or 'HyperPod default'})" for g in groups)
        raise SoftwareError(
            f"the groups boot different images: {shown}; update one image's groups at a time with --group"
        )
    request: dict[str, Any] = {
        "ClusterName": plan.cluster,
        "InstanceGroups": [{"InstanceGroupName": g.name} for g in groups],
    }
    (image,) = images
    if image:
        request["ImageId"] = image
    return request


def start_update(sagemaker: SageMakerClient, plan: SoftwarePlan) -> str:
    """Start UpdateClusterSoftware on PLAN's groups with older nodes; return the cluster's ARN."""
    request = update_request(plan)
    answer = _call(f"sagemaker:UpdateClusterSoftware {plan.cluster}", sagemaker.update_cluster_software, **request)
    return str(answer["ClusterArn"])
