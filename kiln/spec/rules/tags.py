"""tags: AWS's limits and the prefixes AWS, the platforms and kiln reserve."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.limits import (
    KILN_ADDED_TAGS_MAX,
    MAX_SPEC_TAGS,
    MAX_TAGS_PER_RESOURCE,
    PARALLELCLUSTER_MAX_CONFIG_TAGS,
    TAG_KEY_MAX,
    TAG_VALUE_MAX,
)
from kiln.catalog.names import TAG_RULE, is_tag_text
from kiln.catalog.platforms import service_fact
from kiln.contracts.tags import KILN_TAG_PREFIX
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import key_part, problem_at


def _reserved_tag_prefix(key: str) -> str | None:
    """Return why KEY may not be a spec tag's key: it begins, white space trimmed and in any case (as AWS compares
    aws:), with a prefix AWS or a platform reserves or kiln's IAM relies on (services.ec2 reserved_tag_prefixes), or
    with kiln's own."""
    folded = key.strip().casefold()
    reserved = {
        **service_fact("ec2", "reserved_tag_prefixes").value,
        KILN_TAG_PREFIX: {"reason": "kiln's own tags, such as kiln:cluster"},
    }
    for prefix, entry in reserved.items():
        if folded.startswith(prefix.casefold()):
            return f"tag keys must not start with {prefix!r} ({entry['reason']}), in any case or after spaces"
    return None


def _tag_problem(key: str, value: str) -> str | None:
    if why := _reserved_tag_prefix(key):
        return why
    if not 1 <= len(key) <= TAG_KEY_MAX:
        return f"tag keys are 1-{TAG_KEY_MAX} characters (got {len(key)})"
    if not is_tag_text(key):
        return f"tag keys may hold {TAG_RULE} only (got {shown(key)})"
    if len(value) > TAG_VALUE_MAX:
        return f"tag values are at most {TAG_VALUE_MAX} characters (got {len(value)})"
    if not is_tag_text(value):
        return f"tag values may hold {TAG_RULE} only (got {shown(value)})"
    return None


def tags(spec: ClusterSpec) -> Iterator[Problem]:
    """Tags follow AWS limits and stay out of the namespaces AWS, the platforms and kiln reserve."""
    if len(spec.tags) > MAX_SPEC_TAGS:
        yield problem_at(
            ("tags",),
            f"at most {MAX_SPEC_TAGS} tags (got {len(spec.tags)}): every node carries them, EC2 allows "
            f"{MAX_TAGS_PER_RESOURCE} per resource and a ParallelCluster node up to {KILN_ADDED_TAGS_MAX} of "
            f"ParallelCluster's and kiln's own beside them, and ParallelCluster takes at most "
            f"{PARALLELCLUSTER_MAX_CONFIG_TAGS} in its configuration, kiln's and its provider's included",
        )
    for key, value in spec.tags.items():
        if why := _tag_problem(key, value):
            yield problem_at(("tags", key_part(key)), why)
