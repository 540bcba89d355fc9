"""checkov and the wildcard review over every template kiln makes: examples, CI environments, the CI identity.

checkov runs twice over the same templates, once per test run (the xdist workers share it): as synthesized,
where nothing may fail and every skip must be a reviewed exception; and with kiln's checkov metadata stripped,
where exactly the skipped checks must fail, so no exception outlives its need.
"""

from __future__ import annotations

import pytest

from kiln.constructs import acknowledgements
from kiln.constructs.acknowledgements import CheckovSkip, WildcardGrant
from kiln.contracts.iam_wildcards import template_wildcards
from kiln.review.scan import CheckovResult
from tests.support.security_scan import (
    Scanned,
)

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow


def test_every_kind_of_stack_is_scanned(scanned: Scanned) -> None:
    names = set(scanned.templates)
    for part in ("network", "storage", "compute", "image", "reaper"):
        assert any(n.endswith(f"-{part}.template.json") for n in names), part
    assert any(n.startswith("kiln-ci-identity-") for n in names)
    assert sum(r.passed for r in scanned.as_made.values()) > 1000


def test_checkov_finds_no_unsuppressed_finding_in_any_template(scanned: Scanned) -> None:
    failed = {
        name: [f"{f.check_id} on {f.resource}: {f.check_name}" for f in result.failed]
        for name, result in scanned.as_made.items()
        if result.failed
    }
    assert failed == {}


def _reviewed(skip: CheckovSkip) -> tuple[str, str]:
    return (skip.check, skip.reason)


def test_every_skip_is_a_reviewed_exception_with_its_reason(scanned: Scanned) -> None:
    reviewed = {_reviewed(skip) for skip in acknowledgements.CHECKOV_SKIPS}
    skipped = {(f.check_id, f.reason) for result in scanned.as_made.values() for f in result.skipped}
    assert skipped <= reviewed
    assert all(reason and reason.strip() for _, reason in skipped)


def test_without_its_skips_exactly_the_skipped_checks_fail(scanned: Scanned) -> None:
    # Each exception is needed where it applies: drop the metadata and checkov fails those checks, and only those.
    def findings(results: dict[str, CheckovResult], kind: str) -> set[tuple[str, str, str]]:
        return {(name, f.check_id, f.resource) for name, r in results.items() for f in getattr(r, kind)}

    assert findings(scanned.stripped, "failed") == findings(scanned.as_made, "skipped")
    assert findings(scanned.stripped, "skipped") == set()


def test_every_listed_exception_applies_somewhere(scanned: Scanned) -> None:
    skipped = {(f.check_id, f.reason) for result in scanned.as_made.values() for f in result.skipped}
    unused = [skip for skip in acknowledgements.CHECKOV_SKIPS if _reviewed(skip) not in skipped]
    assert unused == []


def _reviewed_grants() -> list[WildcardGrant]:
    grants = []
    for value in vars(acknowledgements).values():
        values = value if isinstance(value, tuple) else (value,)
        grants += [grant for grant in values if isinstance(grant, WildcardGrant)]
    return grants


def test_every_wildcard_grant_in_every_template_has_its_reviewed_reason(scanned: Scanned) -> None:
    uses = [(name, use) for name, template in scanned.templates.items() for use in template_wildcards(template)]
    assert {use.resource_type for _, use in uses} >= {"AWS::IAM::Policy", "AWS::S3::BucketPolicy", "AWS::KMS::Key"}
    unreviewed = [f"{name} {u.logical_id}: {u.action} on {u.resource}" for name, u in uses if u.reason is None]
    assert unreviewed == []
    reasons = {grant.reason for grant in _reviewed_grants()}
    assert {use.reason for _, use in uses} <= reasons
