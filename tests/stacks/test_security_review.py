"""checkov and the wildcard review over every template kiln makes: examples, CI environments, the CI identity.

checkov runs twice over the same templates, once per test run (the xdist workers share it): as synthesized,
where nothing may fail and every skip must be a reviewed exception; and with kiln's checkov metadata stripped,
where exactly the skipped checks must fail, so no exception outlives its need.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kiln.constructs import acknowledgements
from kiln.constructs.acknowledgements import CheckovSkip, WildcardGrant
from kiln.constructs.ci_identity import GithubDeployIdentityProps
from kiln.contracts.iam_wildcards import template_wildcards
from kiln.review.scan import CheckovFinding, CheckovResult, run_checkov
from kiln.spec import load_spec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.ci_identity import build_identity
from kiln.stacks.ci_mode import CiEnvironment
from tests.conftest import ROOT, built_once

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

CREATED_AT = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
# Short-lived environments add the reaper, buckets emptied on deletion and an EKS admin entry.
CI_ENVIRONMENTS = {
    "quickstart": CiEnvironment(name="quickstart-pr1", cluster="quickstart", created_at=CREATED_AT, ttl_hours=2),
    "p5-hyperpod-eks": CiEnvironment(
        name="llm-hp-eks-pr1",
        cluster="llm-hp-eks",
        created_at=CREATED_AT,
        ttl_hours=4,
        admin_role_arn="arn:aws:iam::111111111111:role/kiln-ci-deploy",
    ),
    # Every backend once as an environment: kiln's permissions boundary on every role (test_permissions_boundary.py).
    "p5-parallelcluster": CiEnvironment(
        name="llm-pcluster-pr1", cluster="llm-pcluster", created_at=CREATED_AT, ttl_hours=2
    ),
    "p5-hyperpod-slurm": CiEnvironment(name="llm-hp-slurm-pr1", cluster="llm-hp-slurm", created_at=CREATED_AT),
    "p5-eks": CiEnvironment(
        name="llm-eks-pr1",
        cluster="llm-eks",
        created_at=CREATED_AT,
        admin_role_arn="arn:aws:iam::111111111111:role/kiln-ci-deploy",
    ),
}


@dataclass(frozen=True)
class Scanned:
    templates: dict[str, dict]  # by template file name
    as_made: dict[str, CheckovResult]
    stripped: dict[str, CheckovResult]


def _ci_templates(outdir: Path) -> list[Path]:
    app = new_app(str(outdir))
    for stem, environment in CI_ENVIRONMENTS.items():
        build_cluster(app, load_spec(ROOT / "examples" / f"{stem}.yaml"), ci=environment)
    build_identity(app, GithubDeployIdentityProps(repository="acme/train", cluster_names=["quickstart", "llm-hp-eks"]))
    app.synth()
    return sorted(outdir.glob("*.template.json"))


def _stripped(template: dict) -> dict:
    bare = copy.deepcopy(template)
    for resource in bare.get("Resources", {}).values():
        resource.get("Metadata", {}).pop("checkov", None)
    return bare


def _by_name(results: dict[Path, CheckovResult]) -> dict[str, dict]:
    return {path.name: asdict(result) for path, result in results.items()}


def _result(data: dict) -> CheckovResult:
    return CheckovResult(
        passed=data["passed"],
        failed=tuple(CheckovFinding(**f) for f in data["failed"]),
        skipped=tuple(CheckovFinding(**f) for f in data["skipped"]),
    )


def _scan(examples: list[Path]) -> Callable[[Path], None]:
    def scan(base: Path) -> None:
        paths = examples + _ci_templates(base / "ci")
        assert len({p.name for p in paths}) == len(paths)
        (base / "made").mkdir()
        (base / "stripped").mkdir()
        for path in paths:
            template = json.loads(path.read_text())
            (base / "made" / path.name).write_text(json.dumps(template))
            (base / "stripped" / path.name).write_text(json.dumps(_stripped(template)))
        # One checkov process per pass, over every template.
        scans = {kind: _by_name(run_checkov(sorted((base / kind).glob("*.json")))) for kind in ("made", "stripped")}
        (base / "scans.json").write_text(json.dumps(scans))

    return scan


@pytest.fixture(scope="session")
def scanned(example_assemblies, tmp_path_factory: pytest.TempPathFactory) -> Scanned:
    examples = [p for a in example_assemblies.values() for p in sorted(a.outdir.glob("*.template.json"))]
    base = built_once(tmp_path_factory, "security-scan", _scan(examples))
    scans = json.loads((base / "scans.json").read_text())
    return Scanned(
        templates={p.name: json.loads(p.read_text()) for p in sorted((base / "made").glob("*.json"))},
        as_made={name: _result(data) for name, data in scans["made"].items()},
        stripped={name: _result(data) for name, data in scans["stripped"].items()},
    )


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
