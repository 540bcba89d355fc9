"""Short-lived environments: names, tags, what is deleted with them, their reaper, and their outputs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from kiln.constructs import acknowledgements
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP
from kiln.contracts.environment import BUCKET_PURPOSES
from kiln.contracts.tags import TAG_EKS_CLUSTER, TAG_ENVIRONMENT, TAG_NODE_GROUP
from kiln.spec import ClusterSpec, SpecError, load_spec, parse_spec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.ci_mode import CiEnvironment, ci_environment, environment_spec, retains_data
from kiln.stacks.network import NetworkStack
from kiln.stacks.synth import nag_report, stack_results
from kiln.stacks.synth import synthesize as kiln_synthesize
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

# kiln ci up of quickstart (PCS, login nodes, SCRATCH_2 Lustre): created at 01:45 UTC, seen from UTC-3.
PCS_ENV = "quickstart-pr7"
PCS_CREATED_AT = datetime(2030, 12, 31, 22, 45, tzinfo=timezone(timedelta(hours=-3)))
PCS_TTL_HOURS = 2.5
# HyperPod-Slurm with ci.ttl_hours and storage.bucket.retain set: an environment of itself, as app.py builds it.
HP_SPEC = "llm-hp-slurm"
HP_CREATED_AT = datetime(2030, 1, 2, 23, 30, tzinfo=timezone.utc)
# EKS by `kiln ci up` without a TTL, with the CI role as cluster admin.
EKS_ENV = "llm-eks-pr3"
ADMIN_ROLE = "arn:aws:iam::111111111111:role/kiln-ci-deploy"
EKS_CREATED_AT = datetime(2030, 6, 1, 12, 0, 59, tzinfo=timezone.utc)

PARTS = ("compute", "network", "reaper", "storage")


def _example(stem: str, *, ci: dict | None = None, bucket: dict | None = None) -> ClusterSpec:
    """Return an example spec, with CI settings and storage.bucket set as given."""
    data = yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())
    if ci is not None:
        data["ci"] = ci
    if bucket is not None:
        data.setdefault("storage", {})["bucket"] = bucket
    return parse_spec(data)


def _account_join(prefix: str) -> dict:
    """Return PREFIX<account> as CloudFormation builds it."""
    return {"Fn::Join": ["", [prefix, {"Ref": "AWS::AccountId"}]]}


def _lid(construct: Any) -> str:
    """Return the logical id of CONSTRUCT (an L1) in its stack."""
    return cdk.Stack.of(construct).get_logical_id(construct)


@dataclass(frozen=True)
class Built:
    """One environment synthesized into its own assembly: the stack objects, templates and manifest."""

    app: cdk.App
    outdir: Path
    ci: CiEnvironment
    manifest: dict

    def stack(self, name: str) -> Any:
        return self.app.node.find_child(name)

    def template(self, name: str) -> Template:
        return Template.from_json(self.raw(name))

    def raw(self, name: str) -> dict:
        return json.loads((self.outdir / f"{name}.template.json").read_text())

    def stack_artifacts(self) -> dict[str, dict]:
        artifacts = self.manifest["artifacts"].items()
        return {name: a for name, a in artifacts if a["type"] == "aws:cloudformation:stack"}

    def dependencies(self) -> dict[str, list[str]]:
        """Each stack's stack dependencies (its asset manifests left out)."""
        stacks = self.stack_artifacts()
        return {name: sorted(d for d in a.get("dependencies", []) if d in stacks) for name, a in stacks.items()}

    def tags(self) -> dict[str, dict[str, str]]:
        return {name: a["properties"].get("tags", {}) for name, a in self.stack_artifacts().items()}


def _built(app: cdk.App, outdir: Path, ci: CiEnvironment) -> Built:
    return Built(app=app, outdir=outdir, ci=ci, manifest=json.loads((outdir / "manifest.json").read_text()))


@pytest.fixture(scope="module")
def pcs(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """quickstart as `kiln ci up` synthesizes it: through kiln.stacks.synth, with cdk-nag."""
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    ci = ci_environment(spec, name=PCS_ENV, created_at=PCS_CREATED_AT, ttl_hours=PCS_TTL_HOURS)
    assert ci is not None
    app, outdir = kiln_synthesize(spec, tmp_path_factory.mktemp("ci-pcs") / "out", ci=ci)
    return _built(app, outdir, ci)


@pytest.fixture(scope="module")
def hyperpod(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A HyperPod-Slurm spec with ci.ttl_hours and retain: true, built as app.py builds it."""
    spec = _example("p5-hyperpod-slurm", ci={"ttl_hours": 2}, bucket={"retain": True})
    ci = ci_environment(spec, created_at=HP_CREATED_AT)
    assert ci is not None
    outdir = tmp_path_factory.mktemp("ci-hyperpod")
    app = new_app(str(outdir))
    build_cluster(app, spec, nag=False, ci=ci)
    app.synth()
    return _built(app, outdir, ci)


@pytest.fixture(scope="module")
def eks(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """p5-eks by `kiln ci up` with a name and the CI role, but no TTL."""
    spec = load_spec(ROOT / "examples" / "p5-eks.yaml")
    ci = ci_environment(spec, name=EKS_ENV, created_at=EKS_CREATED_AT, admin_role_arn=ADMIN_ROLE)
    assert ci is not None
    outdir = tmp_path_factory.mktemp("ci-eks")
    app = new_app(str(outdir))
    build_cluster(app, spec, nag=False, ci=ci)
    app.synth()
    return _built(app, outdir, ci)


# --- the environment itself ----------------------------------------------------------------------------------


def test_an_environment_is_made_only_by_a_name_or_a_ttl() -> None:
    spec = _example("quickstart")
    assert ci_environment(spec) is None
    named = ci_environment(spec, name="quickstart-pr1", created_at=PCS_CREATED_AT)
    assert named is not None
    assert (named.name, named.cluster, named.ttl_hours, named.delete_at) == ("quickstart-pr1", "quickstart", None, None)
    own = ci_environment(_example("quickstart", ci={"ttl_hours": 3}), created_at=HP_CREATED_AT)
    assert own is not None
    assert (own.name, own.cluster, own.ttl_hours) == ("quickstart", "quickstart", 3)
    assert own.delete_at == datetime(2030, 1, 3, 2, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("ttl", [1e-300, 0.0, 0.49, 720.5, float("nan")])
def test_a_ttl_given_beside_the_spec_is_held_to_the_specs_bounds(ttl: float) -> None:
    with pytest.raises(SpecError) as caught:
        ci_environment(_example("quickstart"), name="quickstart-pr1", ttl_hours=ttl)
    [line] = caught.value.lines_out()
    assert line.startswith("--ttl: ci.ttl_hours: must be at ") and line.endswith("; --ttl sets it for this deploy")


def test_the_shortest_ttl_deletes_the_environment_half_an_hour_after_deploy() -> None:
    ci = ci_environment(_example("quickstart"), name="quickstart-pr1", created_at=HP_CREATED_AT, ttl_hours=0.5)
    assert ci is not None and ci.delete_at == HP_CREATED_AT + timedelta(minutes=30)


def test_data_is_kept_only_when_the_spec_sets_retain_itself() -> None:
    assert not retains_data(_example("quickstart"))  # the spec's default (True) does not count
    assert retains_data(_example("quickstart", bucket={"retain": True}))
    assert not retains_data(_example("quickstart", bucket={"retain": False}))
    spec = _example("quickstart", bucket={"retain": True})
    ci = ci_environment(spec, name="quickstart-pr1", created_at=PCS_CREATED_AT)
    assert ci is not None and ci.retain_data
    built = environment_spec(spec, ci)
    assert (built.name, built.storage.bucket.name, built.storage.bucket.retain) == ("quickstart-pr1", None, True)


def test_bucket_names_are_only_of_known_purposes() -> None:
    ci = CiEnvironment(name="e-pr1", cluster="e", created_at=HP_CREATED_AT)
    with pytest.raises(
        ValueError, match=r"^purpose: got 'scratch'; allowed: data, data-logs, lifecycle, lifecycle-logs$"
    ):
        ci.bucket_name("scratch")


def test_a_ttl_with_a_bucket_name_is_one_problem_on_the_bucket_name(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "name: t\n"
        "storage:\n"
        "  bucket:\n"
        "    name: my-data-bucket\n"
        "compute:\n"
        "  backend: pcs\n"
        "  groups: [{name: gpu, instance_type: p5.48xlarge, max_count: 2}]\n"
        "ci: {ttl_hours: 2}\n"
    )
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.lines_out() == [
        f"{path}:4: storage.bucket.name: got 'my-data-bucket' with ci.ttl_hours: a short-lived environment names "
        "its own buckets (<name>-data-<account>) so its reaper can empty them; remove storage.bucket.name"
    ]


# --- stacks, order and tags ----------------------------------------------------------------------------------


def test_stacks_are_named_after_the_environment_and_the_reaper_goes_first(pcs: Built) -> None:
    assert sorted(pcs.stack_artifacts()) == [f"{PCS_ENV}-{part}" for part in PARTS]
    assert pcs.dependencies() == {
        f"{PCS_ENV}-reaper": [],
        f"{PCS_ENV}-network": [f"{PCS_ENV}-reaper"],
        f"{PCS_ENV}-storage": [f"{PCS_ENV}-network"],
        f"{PCS_ENV}-compute": [f"{PCS_ENV}-network", f"{PCS_ENV}-storage"],
    }


def test_a_spec_with_a_ttl_is_an_environment_of_itself_with_its_own_reaper(hyperpod: Built) -> None:
    assert sorted(hyperpod.stack_artifacts()) == [f"{HP_SPEC}-{part}" for part in PARTS]
    assert hyperpod.dependencies()[f"{HP_SPEC}-network"] == [f"{HP_SPEC}-reaper"]
    (schedule,) = hyperpod.template(f"{HP_SPEC}-reaper").find_resources("AWS::Scheduler::Schedule").values()
    assert schedule["Properties"]["Name"] == f"{HP_SPEC}-reaper"


def test_without_a_ttl_there_is_no_reaper(eks: Built) -> None:
    assert eks.dependencies() == {
        f"{EKS_ENV}-network": [],
        f"{EKS_ENV}-storage": [f"{EKS_ENV}-network"],
        f"{EKS_ENV}-compute": [f"{EKS_ENV}-network", f"{EKS_ENV}-storage"],
    }
    for name in eks.stack_artifacts():
        assert not eks.template(name).find_resources("AWS::Scheduler::Schedule")
        assert not eks.template(name).find_resources(
            "AWS::Lambda::Function", {"Properties": {"Handler": "kiln_reaper.handler.main"}}
        )


def test_every_stack_carries_exactly_the_environment_tags_and_its_resources_the_spec_tags(
    pcs: Built, hyperpod: Built, eks: Built
) -> None:
    # No creation time among them: a tag that changed at every synthesis would update (or replace) every resource.
    # The spec's tags, which change, go on the resources, never on the stacks (kiln.stacks.app, STACK_TAG_TYPE).
    def expected(env: str, cluster: str, part: str, ttl: str | None) -> dict:
        tags = {"kiln:cluster": cluster, "kiln:environment": env, "kiln:part": part}
        return tags | ({"kiln:ttl-hours": ttl} if ttl else {})

    assert pcs.tags() == {f"{PCS_ENV}-{part}": expected(PCS_ENV, "quickstart", part, "2.5") for part in PARTS}
    assert hyperpod.tags() == {f"{HP_SPEC}-{part}": expected(HP_SPEC, HP_SPEC, part, "2") for part in PARTS}
    assert eks.tags() == {
        f"{EKS_ENV}-{part}": expected(EKS_ENV, "llm-eks", part, None) for part in ("compute", "network", "storage")
    }
    # The resources carry both: the VPC has the network stack's tags and the spec's.
    vpc = pcs.stack(f"{PCS_ENV}-network").training_vpc.vpc.node.default_child
    vpc_tags = {
        t["Key"]: t["Value"] for t in pcs.raw(f"{PCS_ENV}-network")["Resources"][_lid(vpc)]["Properties"]["Tags"]
    }
    assert (pcs.tags()[f"{PCS_ENV}-network"] | {"team": "ml", "purpose": "quickstart"}).items() <= vpc_tags.items()


# --- what is deleted with the environment --------------------------------------------------------------------


def _auto_deleted(template: dict) -> set[str]:
    """The logical ids of the buckets CDK's auto-delete custom resource empties."""
    return {
        r["Properties"]["BucketName"]["Ref"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::S3AutoDeleteObjects"
    }


def _bucket(template: dict, construct: Any) -> dict:
    return template["Resources"][_lid(construct)]


def test_default_buckets_are_named_by_the_environment_and_deleted_with_it(pcs: Built) -> None:
    storage = pcs.stack(f"{PCS_ENV}-storage")
    template = pcs.raw(f"{PCS_ENV}-storage")
    data, logs = storage.bucket.bucket.node.default_child, storage.bucket.access_log_bucket.node.default_child
    for construct, purpose in ((data, "data"), (logs, "data-logs")):
        bucket = _bucket(template, construct)
        assert bucket["Properties"]["BucketName"] == _account_join(f"{PCS_ENV}-{purpose}-")
        assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Delete", "Delete")
    assert _auto_deleted(template) == {_lid(data), _lid(logs)}
    # SCRATCH_2 Lustre has no durable copy and goes too.
    assert template["Resources"][_lid(storage.lustre.file_system.node.default_child)]["DeletionPolicy"] == "Delete"


def test_buckets_are_kept_when_the_spec_says_retain_itself(hyperpod: Built) -> None:
    storage = hyperpod.stack(f"{HP_SPEC}-storage")
    template = hyperpod.raw(f"{HP_SPEC}-storage")
    data, logs = storage.bucket.bucket.node.default_child, storage.bucket.access_log_bucket.node.default_child
    for construct, purpose in ((data, "data"), (logs, "data-logs")):
        bucket = _bucket(template, construct)
        assert bucket["Properties"]["BucketName"] == _account_join(f"{HP_SPEC}-{purpose}-")
        assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert _auto_deleted(template) == set()


def test_hyperpod_lifecycle_buckets_are_named_by_the_environment_and_always_deleted(hyperpod: Built) -> None:
    compute = hyperpod.stack(f"{HP_SPEC}-compute")
    template = hyperpod.raw(f"{HP_SPEC}-compute")
    lifecycle = compute.node.find_child("LifecycleBucket")
    data, logs = lifecycle.bucket.node.default_child, lifecycle.access_log_bucket.node.default_child
    for construct, purpose in ((data, "lifecycle"), (logs, "lifecycle-logs")):
        bucket = _bucket(template, construct)
        assert bucket["Properties"]["BucketName"] == _account_join(f"{HP_SPEC}-{purpose}-")
        assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Delete", "Delete")
    assert _auto_deleted(template) == {_lid(data), _lid(logs)}


def test_parallelclusters_bootstrap_script_goes_to_the_environments_lifecycle_bucket(tmp_path: Path) -> None:
    """In an environment, the bucket of ParallelCluster's OnNodeConfigured script is the environment's lifecycle
    bucket: named for the reaper, deleted with the environment, and written by the stack's deployment alone."""
    spec = _example("p5-parallelcluster", ci={"ttl_hours": 2})
    ci = ci_environment(spec, created_at=HP_CREATED_AT)
    assert ci is not None
    app = new_app(str(tmp_path))
    stacks = build_cluster(app, spec, nag=False, ci=ci)
    app.synth()
    cluster = stacks.compute.backend.construct
    lifecycle = stacks.compute.node.find_child("LifecycleBucket")
    assert cluster.bootstrap_bucket is lifecycle.bucket
    template = json.loads((tmp_path / f"{stacks.compute.stack_name}.template.json").read_text())
    bucket = _bucket(template, lifecycle.bucket.node.default_child)
    assert bucket["Properties"]["BucketName"] == _account_join(f"{spec.name}-lifecycle-")
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Delete", "Delete")
    (config,) = [
        r["Properties"]["ClusterConfiguration"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::PclusterCluster"
    ]
    script = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"]
    assert script["Fn::Join"][1][1] == {"Ref": _lid(lifecycle.bucket.node.default_child)}


def _flow_log_policy(network: NetworkStack, template: dict) -> str:
    group = network.training_vpc.node.find_child("FlowLogs").node.default_child
    return template["Resources"][_lid(group)]["DeletionPolicy"]


def test_flow_logs_go_with_an_environment_but_stay_outside_one(pcs: Built, hyperpod: Built) -> None:
    assert _flow_log_policy(pcs.stack(f"{PCS_ENV}-network"), pcs.raw(f"{PCS_ENV}-network")) == "Delete"
    # An environment that keeps its data keeps the record of its traffic too.
    assert _flow_log_policy(hyperpod.stack(f"{HP_SPEC}-network"), hyperpod.raw(f"{HP_SPEC}-network")) == "Retain"
    outside = NetworkStack(new_app(), "quickstart-network", spec=_example("quickstart"))
    assert _flow_log_policy(outside, Template.from_stack(outside).to_json()) == "Retain"


# --- the reaper ----------------------------------------------------------------------------------------------


def test_the_schedule_fires_at_created_at_plus_ttl_in_utc(pcs: Built, hyperpod: Built) -> None:
    for built, env, at in (
        (pcs, PCS_ENV, "at(2031-01-01T04:15:00)"),
        (hyperpod, HP_SPEC, "at(2030-01-03T01:30:00)"),
    ):
        reaper = built.stack(f"{env}-reaper").reaper
        schedule = built.raw(f"{env}-reaper")["Resources"][_lid(reaper.schedule)]["Properties"]
        assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"]) == (at, "UTC")
        outputs = built.raw(f"{env}-reaper")["Outputs"]
        assert datetime.fromisoformat(outputs["DeleteAt"]["Value"]) == built.ci.delete_at
        assert outputs["ScheduleName"]["Value"] == f"{env}-reaper"


def test_the_reaper_may_empty_exactly_the_environments_buckets(pcs: Built) -> None:
    policies = pcs.template(f"{PCS_ENV}-reaper").find_resources("AWS::IAM::Policy")
    resources = [
        resource
        for policy in policies.values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == ["s3:DeleteObject", "s3:DeleteObjectVersion"]
        for resource in statement["Resource"]
    ]
    assert resources == [
        {
            "Fn::Join": [
                "",
                ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{PCS_ENV}-{purpose}-", {"Ref": "AWS::AccountId"}, "/*"],
            ]
        }
        for purpose in BUCKET_PURPOSES
    ]


# --- outputs and access --------------------------------------------------------------------------------------


def _outputs(built: Built, name: str) -> dict[str, Any]:
    return {key: value["Value"] for key, value in built.raw(name)["Outputs"].items()}


def _get_att(construct: Any, attribute: str) -> dict:
    return {"Fn::GetAtt": [_lid(construct), attribute]}


def test_compute_outputs_have_the_fixed_keys(pcs: Built, hyperpod: Built, eks: Built) -> None:
    compute = pcs.stack(f"{PCS_ENV}-compute")
    outputs = _outputs(pcs, f"{PCS_ENV}-compute")
    assert {
        k: outputs[k] for k in ("Backend", "Orchestrator", "ClusterName", "PcsClusterId", "PcsLoginNodeGroupId")
    } == {
        "Backend": "pcs",
        "Orchestrator": "none",
        "ClusterName": PCS_ENV,
        "PcsClusterId": _get_att(compute.backend.construct.cluster, "Id"),
        "PcsLoginNodeGroupId": _get_att(compute.backend.construct.login_group, "Id"),
    }
    assert not {"HyperPodClusterArn", "EksClusterName"} & outputs.keys()

    compute = hyperpod.stack(f"{HP_SPEC}-compute")
    outputs = _outputs(hyperpod, f"{HP_SPEC}-compute")
    assert {k: outputs[k] for k in ("Backend", "Orchestrator", "ClusterName", "HyperPodClusterArn")} == {
        "Backend": "hyperpod",
        "Orchestrator": "slurm",
        "ClusterName": HP_SPEC,
        "HyperPodClusterArn": _get_att(compute.backend.construct.cluster, "ClusterArn"),
    }
    assert not {"PcsClusterId", "PcsLoginNodeGroupId", "EksClusterName"} & outputs.keys()

    compute = eks.stack(f"{EKS_ENV}-compute")
    outputs = _outputs(eks, f"{EKS_ENV}-compute")
    cluster = compute.backend.construct.cluster.node.default_child
    assert {k: outputs[k] for k in ("Backend", "Orchestrator", "ClusterName", "EksClusterName")} == {
        "Backend": "eks",
        "Orchestrator": "none",
        "ClusterName": EKS_ENV,
        "EksClusterName": {"Ref": _lid(cluster)},
    }
    assert not {"PcsClusterId", "PcsLoginNodeGroupId", "HyperPodClusterArn"} & outputs.keys()


def test_the_eks_system_nodes_carry_the_environment_kiln_ci_run_may_open_sessions_on(eks: Built) -> None:
    compute = eks.stack(f"{EKS_ENV}-compute").backend.construct
    template = eks.raw(f"{EKS_ENV}-compute")
    data = template["Resources"][_lid(compute.node.find_child("SystemLaunchTemplate"))]["Properties"]
    specs = data["LaunchTemplateData"]["TagSpecifications"]
    assert [spec["ResourceType"] for spec in specs] == ["instance", "volume", "network-interface"]
    tags = {tag["Key"]: tag["Value"] for tag in specs[0]["Tags"]}
    assert all(spec["Tags"] == specs[0]["Tags"] for spec in specs)
    # The environment's own tags with the spec's, and the two `kiln ci run` finds a system node by.
    expected = {
        TAG_ENVIRONMENT: EKS_ENV,
        TAG_EKS_CLUSTER: {"Ref": _lid(compute.cluster.node.default_child)},
        TAG_NODE_GROUP: EKS_SYSTEM_NODE_GROUP,
    }
    assert tags.items() >= expected.items()


def test_the_ci_role_is_cluster_admin_on_eks(eks: Built) -> None:
    entries = eks.template(f"{EKS_ENV}-compute").find_resources(
        "AWS::EKS::AccessEntry", {"Properties": {"PrincipalArn": ADMIN_ROLE}}
    )
    (entry,) = entries.values()
    cluster = eks.stack(f"{EKS_ENV}-compute").backend.construct.cluster.node.default_child
    assert entry["Properties"]["ClusterName"] == {"Ref": _lid(cluster)}
    assert entry["Properties"]["AccessPolicies"] == [
        {
            "AccessScope": {"Type": "cluster"},
            "PolicyArn": {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"],
                ]
            },
        }
    ]
    assert "Type" not in entry["Properties"]  # STANDARD: an IAM role, not a node role


# --- linters -------------------------------------------------------------------------------------------------


def test_the_environment_passes_cfn_lint_without_errors_or_warnings(pcs: Built) -> None:
    results = stack_results(pcs.outdir, region=None)
    assert sorted(r.name for r in results) == [f"{PCS_ENV}-{part}" for part in PARTS]
    assert {r.name: (r.cfn_lint_errors, r.cfn_lint_warnings) for r in results} == {r.name: ([], []) for r in results}


def test_the_environment_has_no_open_cdk_nag_findings_and_the_reaper_is_reviewed(pcs: Built) -> None:
    report = nag_report(pcs.outdir)
    assert report.violations == []
    assert all(reason.strip() for _, reason in report.acknowledged)
    raw = json.loads((pcs.outdir / "validation-report.json").read_text())
    (plugin,) = [p for p in raw["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    reviewed = {grant.reason for grant in acknowledgements.REAPER_GRANTS}
    in_reaper = [
        item["reason"]
        for item in plugin["suppressedViolations"]
        if any(w["constructPath"].startswith(f"{PCS_ENV}-reaper/") for w in item["violatingConstructs"])
    ]
    assert in_reaper, "the reaper's stack and bucket wildcards are acknowledged"
    assert set(in_reaper) <= reviewed
