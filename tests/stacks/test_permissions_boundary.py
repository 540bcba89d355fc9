"""kiln's permissions boundary reaches every IAM role of every template a CI environment deploys (every backend, CDK's
handler roles included) and ParallelCluster's own roles; the boundary allows every action kiln's roles are given; a
spec's iam.permissions_boundary does the same outside CI; what CI deletes by tag is tagged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiln.catalog.platforms import service_fact
from kiln.cli.main import main
from kiln.contracts.cdk_bootstrap import DEFAULT_CDK_QUALIFIER
from kiln.contracts.execution_policy import PASSED_TO_SERVICES, execution_statements
from kiln.contracts.iam_wildcards import nag_text
from kiln.contracts.permissions_boundary import (
    ASSUME_ACTIONS,
    BOUNDARY_NAME,
    CLUSTER_ACCESS,
    FUNCTION_CHANGES,
    FUNCTION_INVOKES,
    FUNCTION_TAG_KEY,
    HYPERPOD_CHANGES,
    INSTANCE_CHANGES,
    INSTANCE_TAG_KEY,
    PASS_ROLE,
    ROLE_TAG_KEY,
    SEND_COMMAND,
    SERVICES,
    SESSION_TAG_KEY,
    STACK_CHANGES,
    START_SESSION,
    UNSCOPED_RUNS,
    boundary_document,
)
from kiln.contracts.tags import TAG_ENVIRONMENT
from kiln.spec import load_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.iam_eval import decision, like
from tests.support.paths import ROOT
from tests.support.security_scan import CI_ENVIRONMENTS, Scanned

# The slow tier: the shared security scan synthesizes every example and CI environment once per run.
pytestmark = pytest.mark.slow

ENVIRONMENTS = tuple(environment.name for environment in CI_ENVIRONMENTS.values())
IDENTITY_PREFIX = "kiln-ci-identity-"
POLICY_TYPES = ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role")
# What CI deletes by tag (kiln.contracts.execution_policy.DESTRUCTIVE_ACTIONS): the templates must tag them.
DESTROYED_TYPES = ("AWS::FSx::FileSystem", "AWS::SageMaker::Cluster", "AWS::EC2::Instance")


def _ci_templates(scanned: Scanned) -> dict[str, dict]:
    """The environments' templates: their stacks (<env>-<part>) and nested stacks (<env without dashes><part>...)."""
    prefixes = tuple(f"{e}-" for e in ENVIRONMENTS) + tuple(e.replace("-", "") for e in ENVIRONMENTS)
    return {name: t for name, t in scanned.templates.items() if name.startswith(prefixes)}


def _roles(templates: dict[str, dict]) -> dict[str, dict]:
    return {
        f"{name}/{logical}": resource
        for name, template in templates.items()
        for logical, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role"
    }


def _tags(resource: dict) -> dict[str, str]:
    tags = resource["Properties"].get("Tags", [])
    if isinstance(tags, dict):
        return tags
    return {tag["Key"]: tag["Value"] for tag in tags}


def test_every_backend_is_deployed_as_an_environment(scanned: Scanned) -> None:
    names = set(_ci_templates(scanned))
    for environment in ENVIRONMENTS:
        assert f"{environment}-compute.template.json" in names, environment


def test_every_role_of_every_environment_carries_kilns_boundary(scanned: Scanned) -> None:
    roles = _roles(_ci_templates(scanned))
    assert len(roles) > 20
    missing = [path for path, role in roles.items() if "PermissionsBoundary" not in role["Properties"]]
    assert missing == []
    named = {path: nag_text(role["Properties"]["PermissionsBoundary"]) for path, role in roles.items()}
    assert {path for path, text in named.items() if not text.endswith(f":policy/{BOUNDARY_NAME}")} == set()


def test_every_role_of_every_environment_is_tagged_with_it(scanned: Scanned) -> None:
    """The execution policies let CloudFormation create a role only with a kiln:environment tag of the environments."""
    for path, role in _roles(_ci_templates(scanned)).items():
        environment = _tags(role).get("kiln:environment")
        assert environment in ENVIRONMENTS, path


def test_the_ci_role_carries_the_boundary_its_stack_creates(scanned: Scanned) -> None:
    (name,) = [n for n in scanned.templates if n.startswith(IDENTITY_PREFIX)]
    resources = scanned.templates[name]["Resources"]
    (boundary,) = [k for k, r in resources.items() if r["Type"] == "AWS::IAM::ManagedPolicy"]
    assert resources[boundary]["Properties"]["ManagedPolicyName"] == BOUNDARY_NAME
    roles = [r for r in resources.values() if r["Type"] == "AWS::IAM::Role"]
    assert roles and all(r["Properties"]["PermissionsBoundary"] == {"Ref": boundary} for r in roles)


def test_parallelclusters_own_roles_carry_the_boundary(scanned: Scanned) -> None:
    clusters = [
        resource
        for template in _ci_templates(scanned).values()
        for resource in template["Resources"].values()
        if resource["Type"] == "Custom::PclusterCluster"
    ]
    assert len(clusters) == 1
    boundary = nag_text(clusters[0]["Properties"]["ClusterConfiguration"]["Iam"]["PermissionsBoundary"])
    assert boundary.endswith(f":policy/{BOUNDARY_NAME}")


PCLUSTER_ENVIRONMENT = CI_ENVIRONMENTS["p5-parallelcluster"]
ACCOUNT = "111122223333"
KILN_BOUNDARY = f"arn:aws:iam::{ACCOUNT}:policy/{BOUNDARY_NAME}"
# What ParallelCluster's templates (fetched, not synthesized) create, per aws-parallelcluster's
# cloudformation/custom_resource/cluster.yaml: its PclusterLambdaRole unless CustomLambdaRole is given, with no
# boundary, and then a nested stack of the policies template without a boundary; and
# cloudformation/policies/parallelcluster-policies.yaml: ParallelClusterLambdaRole-<stack id>, with the
# PermissionsBoundaryPolicy parameter as its boundary. CloudFormation tags both with their nested stack's Tags.
PROVIDER_TEMPLATE_END = "custom_resource/cluster.yaml"
POLICIES_TEMPLATE_END = "policies/policies.yaml"


def _resolved(value: Any) -> str:
    """An ARN of the synthesized template as IAM sees it in account ACCOUNT and partition aws."""
    return nag_text(value).replace("<AWS::Partition>", "aws").replace("<AWS::AccountId>", ACCOUNT)


def _pcluster_roles(scanned: Scanned) -> dict[str, tuple[str, str | None, str | None]]:
    """Every role CloudFormation creates for the ParallelCluster environment: path -> (ARN, boundary, its
    kiln:environment tag), the nested stacks' roles included. Generated role names begin with their stack's name."""
    roles = {}
    for name, template in _ci_templates(scanned).items():
        if not name.startswith(f"{PCLUSTER_ENVIRONMENT.name}-"):
            continue
        stack = name.removesuffix(".template.json")
        for logical, resource in template["Resources"].items():
            properties = resource.get("Properties", {})
            tag = _tags(resource).get("kiln:environment")
            boundary = properties.get("PermissionsBoundary")
            if resource["Type"] == "AWS::IAM::Role":
                arn = f"arn:aws:iam::{ACCOUNT}:role/{stack}-{logical[:20]}-1A2B3C4D5E6F"
                roles[f"{name}/{logical}"] = (arn, boundary and _resolved(boundary), tag)
            if resource["Type"] != "AWS::CloudFormation::Stack":
                continue
            url = properties["TemplateURL"]["Fn::Sub"]
            parameters = properties.get("Parameters", {})
            nested = f"{stack}-{logical}-1A2B3C4D5E6F"
            if url.endswith(PROVIDER_TEMPLATE_END) and not parameters.get("CustomLambdaRole"):
                arn = f"arn:aws:iam::{ACCOUNT}:role/{nested}-PclusterLambdaRole-1A2B3C4D5E6F"[:64]
                roles[f"{name}/{logical}/PclusterLambdaRole"] = (arn, None, tag)
                # ... and its PclusterPolicies stack, with no PermissionsBoundaryPolicy.
                arn = f"arn:aws:iam::{ACCOUNT}:role/ParallelClusterLambdaRole-9a8b7c6d"
                roles[f"{name}/{logical}/PclusterPolicies/ParallelClusterLambdaRole"] = (arn, None, tag)
            elif url.endswith(POLICIES_TEMPLATE_END):
                bounded = parameters.get("PermissionsBoundaryPolicy")
                arn = f"arn:aws:iam::{ACCOUNT}:role/ParallelClusterLambdaRole-8131d980"
                roles[f"{name}/{logical}/ParallelClusterLambdaRole"] = (arn, bounded and _resolved(bounded), tag)
    return roles


def test_parallelclusters_provider_runs_as_a_role_of_kilns_with_the_boundary(scanned: Scanned) -> None:
    """In CI the provider gets CustomLambdaRole, a role of the template carrying kiln's boundary and the environment's
    tag, and the policies stack whose policies it holds gets the boundary as PermissionsBoundaryPolicy."""
    (compute,) = [
        t for n, t in _ci_templates(scanned).items() if n == f"{PCLUSTER_ENVIRONMENT.name}-compute.template.json"
    ]
    resources = compute["Resources"]
    nested = {
        r["Properties"]["TemplateURL"]["Fn::Sub"].split("/templates/", 1)[1]: (logical, r["Properties"])
        for logical, r in resources.items()
        if r["Type"] == "AWS::CloudFormation::Stack"
    }
    assert set(nested) == {PROVIDER_TEMPLATE_END, POLICIES_TEMPLATE_END}
    policies_id, policies = nested[POLICIES_TEMPLATE_END]
    assert nag_text(policies["Parameters"]["PermissionsBoundaryPolicy"]).endswith(f":policy/{BOUNDARY_NAME}")
    assert policies["Parameters"]["EnableIamAdminAccess"] == "true"
    role_id, attribute = nested[PROVIDER_TEMPLATE_END][1]["Parameters"]["CustomLambdaRole"]["Fn::GetAtt"]
    role = resources[role_id]
    assert (role["Type"], attribute) == ("AWS::IAM::Role", "Arn")
    assert nag_text(role["Properties"]["PermissionsBoundary"]).endswith(f":policy/{BOUNDARY_NAME}")
    assert _tags(role)["kiln:environment"] == PCLUSTER_ENVIRONMENT.name
    outputs = service_fact("parallelcluster", "provider_custom_role").value["policy_outputs"]
    assert [{"Fn::GetAtt": [policies_id, f"Outputs.{name}"]} for name in outputs] == [
        arn for arn in role["Properties"]["ManagedPolicyArns"] if "Fn::GetAtt" in arn
    ]


def test_the_execution_policies_let_cloudformation_make_every_parallelcluster_role_and_none_unbounded(
    scanned: Scanned,
) -> None:
    """IAM's evaluation (tests/support/iam_eval) of the execution policies for every role the ParallelCluster
    environment's stacks and the ParallelCluster templates they nest create: each is allowed as made, with its
    boundary and tag, and none would be without kiln's boundary."""
    statements = execution_statements([PCLUSTER_ENVIRONMENT.cluster], qualifier=DEFAULT_CDK_QUALIFIER)
    variables = {"aws:PrincipalAccount": ACCOUNT}
    roles = _pcluster_roles(scanned)
    assert any(path.endswith("/ParallelClusterLambdaRole") for path in roles)
    refused = {}
    for path, (arn, boundary, tag) in roles.items():
        request = {"aws:RequestTag/kiln:environment": tag} if tag else {}
        made = request | ({"iam:PermissionsBoundary": boundary} if boundary else {})
        if decision(statements, "iam:CreateRole", arn, made, variables) != "Allow":
            refused[path] = (arn, boundary, tag)
        # Nothing unbounded: the same role without kiln's boundary, or with another, is refused.
        for other in ({}, {"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/PowerUser"}):
            assert decision(statements, "iam:CreateRole", arn, request | other, variables) != "Allow", path
    assert refused == {}
    # kiln's provider role gets its policies and is handed to Lambda.
    (provider,) = [path for path in roles if "/ParallelClusterProviderRole" in path]
    arn, boundary, tag = roles[provider]
    held = {"iam:PermissionsBoundary": boundary, "aws:ResourceTag/kiln:environment": tag}
    assert decision(statements, "iam:PutRolePolicy", arn, held, variables) == "Allow"
    for policy in (
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        f"arn:aws:iam::{ACCOUNT}:policy/ParallelClusterClusterPolicy1-8131d980",
        f"arn:aws:iam::{ACCOUNT}:policy/ParallelClusterClusterPolicy2-8131d980",
        f"arn:aws:iam::{ACCOUNT}:policy/DefaultParallelClusterIamAdminPolicy-8131d980",
    ):
        attach = held | {"iam:PolicyARN": policy}
        assert decision(statements, "iam:AttachRolePolicy", arn, attach, variables) == "Allow", policy
    passed = {"aws:ResourceTag/kiln:environment": tag, "iam:PassedToService": "lambda.amazonaws.com"}
    assert decision(statements, "iam:PassRole", arn, passed, variables) == "Allow"


def test_the_boundary_allows_what_parallelclusters_policies_give_the_provider() -> None:
    """The provider role's policies from ParallelCluster's policies template (recorded in platforms.json from the
    fetched template): every action is in a service the boundary allows, and none is denied by it on the environment's
    own resources (ParallelCluster tags what it makes with its stack's tags, kiln:environment among them) for a role
    that makes roles with the boundary."""
    actions = {
        action
        for listed in service_fact("parallelcluster", "provider_policies_actions").value.values()
        for action in listed
    }
    assert len(actions) > 100
    assert {a for a in actions if a.split(":")[0] not in SERVICES} == set()
    boundary = boundary_document(KILN_BOUNDARY)["Statement"]
    tag = PCLUSTER_ENVIRONMENT.name
    context = {"iam:PermissionsBoundary": KILN_BOUNDARY} | {
        f"{kind}Tag/kiln:environment": tag for kind in ("aws:Resource", "iam:Resource", "aws:Principal")
    }
    assert {a for a in actions if "*" not in a and decision(boundary, a, "*", context) != "Allow"} == set()


def _actions(document: Any) -> set[str]:
    statements = document.get("Statement", [])
    statements = statements if isinstance(statements, list) else [statements]
    found = set()
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action", [])
        found |= set(actions if isinstance(actions, list) else [actions])
    return found


def test_the_boundary_allows_every_action_kilns_roles_are_given(scanned: Scanned) -> None:
    """Every action any role policy kiln synthesizes grants (examples and environments alike) is in a service the
    boundary allows: the boundary never takes away what a role of kiln's needs."""
    granted: set[str] = set()
    for template in scanned.templates.values():
        for resource in template["Resources"].values():
            properties = resource.get("Properties", {})
            if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                if properties.get("ManagedPolicyName") == BOUNDARY_NAME:
                    continue
                granted |= _actions(properties["PolicyDocument"])
            elif resource["Type"] == "AWS::IAM::Role":
                for policy in properties.get("Policies", []):
                    granted |= _actions(policy["PolicyDocument"])
    assert len(granted) > 100
    assert {a for a in granted if a.split(":")[0] not in SERVICES} == set()
    # Nor does any of its Deny statements hit what a role is given on kiln's own resources (a role making a role does so
    # with the boundary; the pivots' rules are held on each grant's own resources below).
    boundary = boundary_document("arn:aws:iam::111111111111:policy/kiln-permissions-boundary")["Statement"]
    context = {"iam:PermissionsBoundary": "arn:aws:iam::111111111111:policy/kiln-permissions-boundary", **KILNS}
    assert {a for a in granted if "*" not in a and decision(boundary, a, "*", context) != "Allow"} == set()


# A resource of kiln's own, as the boundary's pivot rules see it: tagged as an environment under every key they read.
KILNS = {key: "quickstart-pr1" for key in (ROLE_TAG_KEY, FUNCTION_TAG_KEY, INSTANCE_TAG_KEY, SESSION_TAG_KEY)}
PIVOTS = (
    *PASS_ROLE,
    *ASSUME_ACTIONS,
    *FUNCTION_CHANGES,
    *FUNCTION_INVOKES,
    *SEND_COMMAND,
    *START_SESSION,
    *INSTANCE_CHANGES,
    *UNSCOPED_RUNS,
    *CLUSTER_ACCESS,
    *HYPERPOD_CHANGES,
    *STACK_CHANGES,
)
PSEUDO = {"<AWS::Partition>": "aws", "<AWS::AccountId>": "111111111111", "<AWS::Region>": "us-east-1"}


def _text(value: Any) -> str:
    text = nag_text(value)
    for pseudo, filled in PSEUDO.items():
        text = text.replace(pseudo, filled)
    return text


def _named_roles(templates: dict[str, dict]) -> set[str]:
    """The ARNs of the roles TEMPLATES create by a name of kiln's (RoleName), tagged as an environment in CI."""
    return {
        f"arn:aws:iam::111111111111:role{_text(r['Properties'].get('Path', '/'))}{_text(r['Properties']['RoleName'])}"
        for template in templates.values()
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Role" and "RoleName" in r["Properties"]
    }


def _bounded_role_policies(templates: dict[str, dict]) -> list[tuple[str, dict[str, str], list[dict]]]:
    """Every role of TEMPLATES that carries a boundary: its path, its tags (aws:PrincipalTag/<key> to IAM when it acts)
    and the statements of its policies (inline, and AWS::IAM::Policy or ManagedPolicy resources naming it)."""
    found = []
    for name, template in templates.items():
        resources = template["Resources"]
        for logical, role in resources.items():
            if role["Type"] != "AWS::IAM::Role" or "PermissionsBoundary" not in role["Properties"]:
                continue
            documents = [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
            documents += [
                r["Properties"]["PolicyDocument"]
                for r in resources.values()
                if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                and {"Ref": logical} in r["Properties"].get("Roles", [])
            ]
            statements = [s for d in documents for s in _listed(d.get("Statement", []))]
            principal = {f"aws:PrincipalTag/{key}": value for key, value in _tags(role).items()}
            found.append((f"{name}/{logical}", principal, statements))
    return found


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _pivot_grants(templates: dict[str, dict]) -> list[tuple[str, dict[str, str], str, str, bool]]:
    """Every (role, its tags, action, resource, kiln's) a bounded role of TEMPLATES is granted among the boundary's
    pivot actions: the resource as text (pseudo parameters filled in), and whether it is kiln's: a resource of the
    template itself (a Ref or GetAtt, tagged in an environment), a role kiln names, or one the statement reaches only by
    kiln:environment."""
    named = _named_roles(templates)
    found = []
    for role, principal, statements in _bounded_role_policies(templates):
        for statement in statements:
            if statement.get("Effect") != "Allow":
                continue
            actions = [a for a in _listed(statement.get("Action", [])) if a in PIVOTS]
            by_tag = TAG_ENVIRONMENT in json.dumps(statement.get("Condition", {}))
            for target in _listed(statement.get("Resource", [])):
                text = _text(target)
                ours = by_tag or "<" in text or any(like(text, r) for r in named)
                found += [(role, principal, action, text, ours) for action in actions]
    return found


def test_the_boundary_leaves_every_pivot_grant_kilns_roles_are_given(scanned: Scanned) -> None:
    """The inventory of what kiln's bounded roles pass, assume, change, invoke and run commands on: each grant reaches
    kiln's own resources (tagged in an environment) or, for sts:AssumeRole, the roles of `cdk bootstrap` the CI role
    deploys through; and the boundary allows every one of them to the role, with the role's own tags."""
    boundary = boundary_document("arn:aws:iam::111111111111:policy/kiln-permissions-boundary")["Statement"]
    ci = {name: t for name, t in scanned.templates.items() if name.startswith(IDENTITY_PREFIX)}
    grants = _pivot_grants({**_ci_templates(scanned), **ci})
    assert len({role for role, *_ in grants}) >= 3
    assumed = {text for _, _, action, text, ours in grants if action in ASSUME_ACTIONS and not ours}
    assert assumed, "the CI role assumes CDK's bootstrap roles"
    assert {text.split(":role/")[1].split("-")[2] for text in assumed} <= {"deploy", "file", "image", "lookup"}
    assert {action for _, _, action, _, _ in grants} >= {"sts:AssumeRole", "iam:PassRole"}
    denied = [
        (role, action, text)
        for role, principal, action, text, ours in grants
        if decision(boundary, action, text, {**principal, **(KILNS if ours else {})}, principal) != "Allow"
    ]
    assert denied == []
    # What a role passes is kiln's: a role of the template itself, a role kiln names, or one reached by its tag.
    assert [g for g in grants if g[2] in PASS_ROLE and not g[4]] == []


def test_what_ci_deletes_by_tag_is_tagged_with_its_environment(scanned: Scanned) -> None:
    found = 0
    for name, template in _ci_templates(scanned).items():
        for logical, resource in template["Resources"].items():
            if resource["Type"] in DESTROYED_TYPES:
                found += 1
                assert _tags(resource).get("kiln:environment") in ENVIRONMENTS, f"{name}/{logical}"
    assert found >= 3


def test_a_specs_boundary_reaches_every_role_outside_ci(tmp_path) -> None:
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    spec = spec.model_copy(
        update={"iam": spec.iam.model_copy(update={"permissions_boundary": "arn:aws:iam::123456789012:policy/org/pb"})}
    )
    app = new_app(str(tmp_path))
    build_cluster(app, spec, nag=False)
    app.synth()
    templates = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.template.json")}
    roles = _roles(templates)
    assert roles
    assert {path: r["Properties"].get("PermissionsBoundary") for path, r in roles.items()} == {
        path: "arn:aws:iam::123456789012:policy/org/pb" for path in roles
    }


def test_a_boundary_that_is_no_customer_policy_stops_at_validate_in_one_line(tmp_path, capsys) -> None:
    text = (ROOT / "examples" / "quickstart.yaml").read_text()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(text + '\niam:\n  permissions_boundary: "arn:aws:iam::aws:policy/AdministratorAccess"\n')
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "iam.permissions_boundary" in err and "customer managed policy" in err


def test_every_service_an_environments_role_trusts_may_be_handed_it(scanned: Scanned) -> None:
    """CloudFormation passes a role only to PASSED_TO_SERVICES (iam:PassedToService): each service a CI role trusts."""
    trusted = set()
    for role in _roles(_ci_templates(scanned)).values():
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            services = statement.get("Principal", {}).get("Service", [])
            trusted |= set(services if isinstance(services, list) else [services])
    assert {"ec2.amazonaws.com", "lambda.amazonaws.com", "scheduler.amazonaws.com"} <= trusted
    assert trusted - set(PASSED_TO_SERVICES) == set()
