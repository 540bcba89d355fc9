"""The security review's scan: every example, CI environment and the CI identity, synthesized once and scanned by
checkov; the session fixture scanned is re-exported by tests/stacks/conftest.py."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kiln.constructs.ci_identity import GithubDeployIdentityProps
from kiln.review.scan import CheckovFinding, CheckovResult, run_checkov
from kiln.spec import load_spec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.ci_identity import build_identity
from kiln.stacks.ci_mode import CiEnvironment
from tests.support.build_once import built_once
from tests.support.paths import ROOT

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
