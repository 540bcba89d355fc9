"""The CloudFormation execution policies `kiln ci identity` writes: they cover every resource type kiln's CI stacks hold
(as CloudFormation's own resource schemas list each type's handler calls), fit IAM's limits, and every wildcard is
reviewed."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from pathlib import Path

import pytest
import yaml

from kiln.constructs import GithubDeployIdentityProps, acknowledgements
from kiln.constructs.ci_identity import MAX_CI_CLUSTERS
from kiln.constructs.review import review_wildcards
from kiln.contracts import execution_policy
from kiln.contracts.execution_policy import (
    MANAGED_POLICY_MAX_CHARS,
    MAX_POLICIES,
    NOT_GRANTED,
    ExecutionPolicyError,
    execution_policies,
    execution_statements,
)
from kiln.contracts.iam_wildcards import nag_text, wildcard_pairs
from kiln.spec import parse_spec
from kiln.stacks.ci_identity import identity_execution_policies
from kiln.stacks.ci_mode import ci_environment
from kiln.stacks.synth import synthesize
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

CLUSTERS = ("ci-smoke", "llm")
# The most clusters one CI role takes, each with the longest name its environments allow.
LONGEST = tuple(f"cluster-{i}-abcdefgh" for i in range(MAX_CI_CLUSTERS))
# ParallelCluster's cluster provider and policies templates, nested stacks of kiln's compute stack (the policies
# template nested by the provider itself outside CI, by kiln with the boundary in CI) (aws-parallelcluster:
# cloudformation/custom_resource/cluster.yaml and cloudformation/policies/parallelcluster-policies.yaml):
# CloudFormation creates their resources with the same execution role. Not in kiln's templates, so listed here.
PCLUSTER_PROVIDER_TYPES = (
    "AWS::CloudFormation::CustomResource",
    "AWS::CloudFormation::Stack",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::Policy",
    "AWS::IAM::Role",
    "AWS::Lambda::Function",
    "AWS::Lambda::LayerVersion",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
)
HANDLERS = ("create", "read", "update", "delete")
# The IAM prefix of each CloudFormation namespace kiln's stacks use, where they differ.
SERVICE_OF = {"Logs": "logs", "PCS": "pcs", "SageMaker": "sagemaker", "APS": "aps", "Grafana": "grafana"}


@cache
def handler_permissions(resource_type: str) -> frozenset[str] | None:
    """Return the IAM actions CloudFormation's registry schema lists for RESOURCE_TYPE's handlers (cfn-lint's copy)."""
    schemas = resources.files("cfnlint.data.schemas")
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    if resource_type not in index:
        return None
    schema = json.loads((schemas / "resources" / f"{index[resource_type]}.json").read_text())
    handlers = schema.get("handlers") or {}
    found = {p for name in HANDLERS for p in handlers.get(name, {}).get("permissions", [])}
    return frozenset(found) if found else None


def _granted(clusters: tuple[str, ...] = CLUSTERS) -> set[str]:
    statements = execution_statements(clusters, qualifier="hnb659fds")
    return {action for s in statements if s["Effect"] == "Allow" for action in s["Action"]}


@pytest.fixture(scope="module")
def ci_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The quickstart spec as `kiln ci up` deploys it with a TTL: its reaper stack is CI's alone."""
    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text()))
    ci = ci_environment(spec, name="quickstart-pr7", created_at=datetime(2030, 1, 1, tzinfo=timezone.utc), ttl_hours=2)
    _, outdir = synthesize(spec, tmp_path_factory.mktemp("ci") / "assembly", ci=ci)
    return {path.name: json.loads(path.read_text()) for path in Path(outdir).glob("*.template.json")}


@pytest.fixture(scope="module")
def deployed_types(example_assemblies, ci_templates) -> dict[str, set[str]]:
    """Every resource type CI deploys, with where it comes from: the examples (but their image stacks: a spec that
    bakes is refused in CI, spec rule NO_BAKE_IN_CI), CI mode's own stacks, and ParallelCluster's provider."""
    found: dict[str, set[str]] = {}
    for stem, assembly in example_assemblies.items():
        assert assembly.returncode == 0, assembly.stderr
        for name, template in assembly.templates().items():
            if name.endswith("-image"):
                continue
            for resource in template["Resources"].values():
                found.setdefault(resource["Type"], set()).add(f"{stem}/{name}")
    for name, template in ci_templates.items():
        for resource in template["Resources"].values():
            found.setdefault(resource["Type"], set()).add(f"ci/{name}")
    for kind in PCLUSTER_PROVIDER_TYPES:
        found.setdefault(kind, set()).add("parallelcluster-provider")
    return found


def test_every_handler_call_of_every_deployed_type_is_granted_or_left_out_with_a_reason(deployed_types) -> None:
    granted = _granted()
    missing = {}
    for kind, where in sorted(deployed_types.items()):
        if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
            # CloudFormation calls a custom resource's provider function with the execution role.
            needed = {"lambda:InvokeFunction"}
        elif kind == "AWS::FSx::FileSystem":
            # No registry handler schema: the FileSystem API calls CloudFormation makes for it.
            needed = set(execution_policy.FSX_ACTIONS)
        else:
            needed = handler_permissions(kind)
            assert needed is not None, f"{kind} ({sorted(where)[0]}) has no handler schema: list its calls"
        uncovered = set(needed) - granted - set(NOT_GRANTED)
        if uncovered:
            missing[kind] = sorted(uncovered)
    assert missing == {}


def test_the_policies_reach_every_service_of_every_deployed_type(deployed_types) -> None:
    services = {action.split(":")[0] for action in _granted()}
    for kind in deployed_types:
        if kind.startswith("Custom::"):
            continue
        namespace = kind.split("::")[1]
        assert SERVICE_OF.get(namespace, namespace.lower()) in services, kind


def test_what_is_left_out_is_listed_by_some_handler_and_never_granted(deployed_types) -> None:
    listed = set().union(*(handler_permissions(kind) or () for kind in deployed_types))
    assert set(NOT_GRANTED) <= listed
    assert not set(NOT_GRANTED) & _granted()
    assert all(reason.strip() for reason in NOT_GRANTED.values())


def test_no_action_is_a_wildcard_and_iam_users_groups_and_boundaries_stay_out_of_reach() -> None:
    granted = _granted()
    assert not any("*" in action for action in granted)
    assert not {a for a in granted if a.startswith("iam:") and ("User" in a or "Group" in a)}
    # A boundary is only ever set (kiln's, tests/contracts/test_permissions_boundary.py), never removed.
    assert {a for a in granted if "Boundary" in a} == {"iam:PutRolePermissionsBoundary"}


def test_iam_is_confined_to_kiln_names_and_attaching_to_kilns_managed_policies() -> None:
    statements = {s["Sid"]: s for s in execution_statements(CLUSTERS, qualifier="hnb659fds") if s["Effect"] == "Allow"}
    iam_resources = {
        resource
        for s in statements.values()
        if any(a.startswith("iam:") for a in s["Action"])
        for resource in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
    }
    account = "arn:aws:iam::${aws:PrincipalAccount}:"
    assert iam_resources == {
        f"{account}role/ci-smoke-*",
        f"{account}role/llm-*",
        f"{account}role/aws-pcs/ci-smoke-*",
        f"{account}role/aws-pcs/llm-*",
        f"{account}role/ParallelClusterLambdaRole-*",
        f"{account}policy/ci-smoke-*",
        f"{account}policy/llm-*",
        f"{account}policy/parallelcluster/ci-smoke-*",
        f"{account}policy/parallelcluster/llm-*",
        f"{account}policy/ParallelCluster*",
        f"{account}policy/DefaultParallelClusterIamAdminPolicy-*",
        f"{account}instance-profile/ci-smoke-*",
        f"{account}instance-profile/llm-*",
        f"{account}instance-profile/aws-pcs/ci-smoke-*",
        f"{account}instance-profile/aws-pcs/llm-*",
        f"{account}role/aws-service-role/*",
        f"{account}role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*",
    }
    attachable = statements["AttachPolicies"]["Condition"]["ArnLike"]["iam:PolicyARN"]
    assert "arn:aws:iam::aws:policy/AdministratorAccess" not in attachable
    assert {arn for arn in attachable if ":iam::aws:" in arn} == {
        f"arn:aws:iam::aws:policy/{name}" for name in execution_policy.AWS_MANAGED_POLICIES
    }


def test_every_aws_managed_policy_kiln_attaches_is_attachable(example_assemblies, ci_templates) -> None:
    templates = [t for a in example_assemblies.values() for n, t in a.templates().items() if not n.endswith("-image")]
    used = {
        nag_text(arn).split(":iam::aws:policy/", 1)[1]
        for template in [*templates, *ci_templates.values()]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Role"
        for arn in resource["Properties"].get("ManagedPolicyArns", [])
        if ":iam::aws:policy/" in nag_text(arn)
    }
    assert used and used <= set(execution_policy.AWS_MANAGED_POLICIES)


def test_keys_of_other_owners_are_out_of_reach() -> None:
    (keys,) = [s for s in execution_statements(CLUSTERS, qualifier="q") if s["Sid"] == "Keys"]
    assert keys["Condition"] == {"StringLike": {"aws:ResourceTag/kiln:environment": ["ci-smoke-*", "llm-*"]}}


@pytest.mark.parametrize("clusters", [CLUSTERS, LONGEST])
def test_the_policies_fit_iams_size_limit_and_a_roles_policy_count(clusters: tuple[str, ...]) -> None:
    policies = execution_policies(clusters, qualifier="hnb659fds", name_base="kiln-ci-exec-o-r")
    assert 1 <= len(policies) <= MAX_POLICIES
    assert all(policy.size <= MANAGED_POLICY_MAX_CHARS for policy in policies)
    assert [p.name for p in policies] == [f"kiln-ci-exec-o-r-{n}" for n in range(1, len(policies) + 1)]
    # Packing keeps every statement, in order.
    sids = [s["Sid"] for p in policies for s in p.document["Statement"]]
    assert sids == [s["Sid"] for s in execution_statements(clusters, qualifier="hnb659fds")]


def test_every_wildcard_is_reviewed_and_every_review_is_used() -> None:
    props = GithubDeployIdentityProps(repository="octo-org/kiln", cluster_names=LONGEST, cdk_qualifier="abc")
    policies = identity_execution_policies(props, partition="aws-us-gov")
    pairs = [pair for policy in policies for pair in wildcard_pairs(policy.document)]
    review = review_wildcards(pairs, acknowledgements.CI_EXECUTION_GRANTS, {"qualifier": "abc"})
    assert review.unreviewed == []
    assert len(review.reviewed) == len(acknowledgements.CI_EXECUTION_GRANTS)
    grants = acknowledgements.CI_EXECUTION_GRANTS
    assert all(grant.reason.strip() and "*" not in "".join(grant.actions) for grant in grants)


def test_a_new_wildcard_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = execution_policy.execution_statements

    def with_admin(*args, **kwargs):
        return [*real(*args, **kwargs), {"Sid": "Oops", "Effect": "Allow", "Action": ["iam:PassRole"], "Resource": "*"}]

    monkeypatch.setattr(execution_policy, "execution_statements", with_admin)
    props = GithubDeployIdentityProps(repository="o/r", cluster_names=("ci",))
    refused = r"^unreviewed IAM wildcard in the execution policies: iam:PassRole on \*;"
    with pytest.raises(ExecutionPolicyError, match=refused):
        identity_execution_policies(props)


def test_the_bootstrap_command_names_every_policy_and_the_qualifier() -> None:
    policies = execution_policies(("ci",), qualifier="kilnci", name_base="kiln-ci-exec-o-r")
    command = execution_policy.bootstrap_command(policies, qualifier="kilnci")
    arns = ",".join(f"arn:aws:iam::ACCOUNT:policy/{p.name}" for p in policies)
    assert command == (
        f"npx cdk bootstrap aws://ACCOUNT/REGION --qualifier kilnci --cloudformation-execution-policies {arns}"
    )
