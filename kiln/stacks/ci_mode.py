"""Short-lived environments: what changes when a spec is deployed by `kiln ci up` or carries ci.ttl_hours."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import aws_cdk as cdk

from kiln.catalog.limits import ttl_problem
from kiln.contracts.environment import environment_bucket_name
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT, TAG_PART, TAG_TTL_HOURS
from kiln.spec import ClusterSpec, Problem, SpecError


@dataclass(frozen=True, kw_only=True)
class CiEnvironment:
    """One short-lived environment of a cluster spec.

    name: the environment's name (the stacks' and the backend cluster's); cluster: the spec's own name.
    created_at: when it was first deployed (`kiln ci up` keeps the time of an existing environment; a spec's own
        TTL deployed by `cdk deploy` counts from that deploy); ttl_hours: delete it this long after, by its
        reaper; None: no reaper. Not a tag: a tag that changed at every synthesis would update every resource
        (and replace those whose tags are fixed at creation).
    retain_data: keep the bucket and a persistent file system on deletion (only when the spec says so).
    admin_role_arn: an IAM role given cluster-admin on EKS (the CI role, so `kiln ci run` reaches the cluster).
    """

    name: str
    cluster: str
    created_at: datetime
    ttl_hours: float | None = None
    retain_data: bool = False
    admin_role_arn: str | None = None

    @property
    def delete_at(self) -> datetime | None:
        """Return when the reaper deletes the environment, or None without a TTL."""
        if self.ttl_hours is None:
            return None
        return self.created_at + timedelta(hours=self.ttl_hours)

    def tags(self, part: str) -> dict[str, str]:
        """Return the tags every resource of the environment's PART stack carries."""
        tags = {
            TAG_CLUSTER: self.cluster,
            TAG_ENVIRONMENT: self.name,
            TAG_PART: part,
        }
        if self.ttl_hours is not None:
            tags[TAG_TTL_HOURS] = f"{self.ttl_hours:g}"
        return tags

    def bucket_name(self, purpose: str) -> str:
        """Return the name of the environment's PURPOSE bucket (one of BUCKET_PURPOSES), unique per account."""
        return environment_bucket_name(self.name, purpose, cdk.Aws.ACCOUNT_ID)


def own_tags(spec: ClusterSpec, ci: CiEnvironment | None, part: str) -> dict[str, str]:
    """Return kiln's own tags on the PART stack of SPEC and on each of its resources: a short-lived environment CI's,
    else kiln:cluster."""
    return ci.tags(part) if ci is not None else {TAG_CLUSTER: spec.name}


def retains_data(spec: ClusterSpec) -> bool:
    """Return whether a short-lived environment of SPEC keeps its data: only when the spec sets retain itself."""
    bucket = spec.storage.bucket
    return "retain" in bucket.model_fields_set and bucket.retain


def ci_environment(
    spec: ClusterSpec,
    *,
    name: str | None = None,
    created_at: datetime | None = None,
    ttl_hours: float | None = None,
    admin_role_arn: str | None = None,
) -> CiEnvironment | None:
    """Return the environment SPEC deploys as: one `kiln ci up` NAMEs, else SPEC's own when it sets ci.ttl_hours.

    TTL_HOURS (`kiln ci up --ttl`) overrides the spec's and is held to the bounds the spec's is (limits.ttl_problem):
    a SpecError line before anything is synthesized or deployed.
    """
    if ttl_hours is not None and (why := ttl_problem(ttl_hours)):
        raise SpecError("--ttl", [Problem(path=("ci", "ttl_hours"), message=f"{why}; --ttl sets it for this deploy")])
    ttl = ttl_hours if ttl_hours is not None else spec.ci.ttl_hours
    if name is None and ttl is None:
        return None
    return CiEnvironment(
        name=name or spec.name,
        cluster=spec.name,
        created_at=created_at or datetime.now(timezone.utc).replace(microsecond=0),
        ttl_hours=ttl,
        retain_data=retains_data(spec),
        admin_role_arn=admin_role_arn,
    )


def environment_spec(spec: ClusterSpec, ci: CiEnvironment) -> ClusterSpec:
    """Return SPEC as environment CI builds it: CI's name, kiln-named buckets, data kept only when asked."""
    bucket = spec.storage.bucket.model_copy(update={"name": None, "retain": ci.retain_data})
    storage = spec.storage.model_copy(update={"bucket": bucket})
    return spec.model_copy(update={"name": ci.name, "storage": storage})
