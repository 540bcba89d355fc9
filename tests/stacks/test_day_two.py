"""Day two (issue 33, items 4 and 6): what a changed spec does on deploy, decided from the resource schemas'
create-only properties, and `kiln diff`, which says it in one line per change before anything is deployed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from kiln.catalog.platforms import service_fact
from kiln.changes import (
    CUSTOM_NAME_RULE,
    EXPORT_RULE,
    STATEFUL,
    actions,
    blocked_exports,
    collisions,
    create_only,
    documented_replacements,
    has_handlers,
    name_properties,
    plan,
    references,
    removals,
    replacements,
    scope_properties,
)
from kiln.stacks import FEATURE_FLAGS
from kiln.stacks.app import FIXED_TAG_TYPES
from tests.support.day_two import assert_refused, assert_updates, deploy_plan, example, templates
from tests.support.specs import DELETE, MINIMAL_SPEC, changed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

STRENGTH = "@aws-cdk/core:defaultCrossStackReferences"


def _template(resources: dict[str, Any], outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"Resources": resources, **({"Outputs": outputs} if outputs else {})}


def _fsx(deployment: str = "PERSISTENT_2", throughput: int = 250, group: str = "Sg", **policies: str) -> dict:
    lustre = {"DeploymentType": deployment, "PerUnitStorageThroughput": throughput}
    properties = {
        "FileSystemType": "LUSTRE",
        "StorageCapacity": 2400,
        "SubnetIds": ["subnet-1"],
        "SecurityGroupIds": [{"Fn::GetAtt": [group, "GroupId"]}],
        "LustreConfiguration": lustre,
    }
    return {"Type": "AWS::FSx::FileSystem", "Properties": properties, **policies}


def _group(description: str = "clients") -> dict:
    return {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": description, "VpcId": "vpc-1"}}


# The comparison itself, on small templates: fast, and each rule on its own.


def test_a_create_only_change_replaces_and_any_other_change_updates() -> None:
    before = _template({"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}}})
    assert replacements(before, _template({"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {}}})) == []
    renamed = _template({"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/kiln/x"}}})
    (replaced,) = replacements(before, renamed, stack="s")
    assert (replaced.logical_id, replaced.because, replaced.stateful) == ("Logs", ("LogGroupName",), "log group")
    # A new name is what replacing a named resource takes: nothing to refuse.
    assert not replaced.refused
    assert replaced.line() == (
        "s Logs (log group) is replaced (LogGroupName is create-only): the new one starts empty and the old one is "
        "deleted with its data"
    )


def test_a_replaced_resource_takes_what_refers_to_it_in_a_create_only_property_along() -> None:
    before = _template({"Sg": _group(), "Fs": _fsx()})
    after = _template({"Sg": _group("members mount Lustre"), "Fs": _fsx()})
    found = {r.logical_id: r for r in replacements(before, after)}
    assert found["Sg"].because == ("GroupDescription",)
    assert found["Fs"].because == ("SecurityGroupIds (Sg is replaced)",)
    assert found["Fs"].stateful == "file system"


def test_the_file_systems_nested_create_only_properties_come_from_the_data() -> None:
    # FSx's schema has no handlers: its createOnlyProperties stop at the top level, and AWS documents more.
    assert not has_handlers("AWS::FSx::FileSystem") and has_handlers("AWS::PCS::ComputeNodeGroup")
    assert "/properties/LustreConfiguration/DeploymentType" in create_only("AWS::FSx::FileSystem")
    before = _template({"Sg": _group(), "Fs": _fsx()})
    (replaced,) = replacements(before, _template({"Sg": _group(), "Fs": _fsx(deployment="SCRATCH_2")}))
    assert replaced.because == ("LustreConfiguration/DeploymentType",)
    # Throughput changes in place (UpdateFileSystem).
    assert replacements(before, _template({"Sg": _group(), "Fs": _fsx(throughput=500)})) == []


def test_a_replacement_that_keeps_a_custom_name_is_refused() -> None:
    def group(instance_type: str, name: str = "gpu") -> dict:
        properties = {"Name": name, "ClusterId": "pcs_1", "InstanceConfigs": [{"InstanceType": instance_type}]}
        return _template({"Group": {"Type": "AWS::PCS::ComputeNodeGroup", "Properties": properties}})

    (kept,) = replacements(group("p5.48xlarge"), group("p5en.48xlarge"), stack="c")
    assert kept.refused and kept.custom_name == "gpu"
    assert kept.line().startswith("c Group (AWS::PCS::ComputeNodeGroup) would be replaced (InstanceConfigs is ")
    assert CUSTOM_NAME_RULE in kept.line()
    (renamed,) = replacements(group("p5.48xlarge"), group("p5en.48xlarge", name="gpu-p5en"))
    assert not renamed.refused and renamed.because == ("Name", "InstanceConfigs")
    assert plan({"c": group("p5.48xlarge")}, {"c": group("p5en.48xlarge")}).refused


def test_a_new_resource_under_the_name_a_dropped_one_holds_is_refused() -> None:
    def group(logical_id: str, cluster: str = "Pcs") -> dict:
        properties = {"Name": "gpu", "ClusterId": {"Fn::GetAtt": [cluster, "Id"]}, "InstanceConfigs": []}
        return {logical_id: {"Type": "AWS::PCS::ComputeNodeGroup", "Properties": properties}}

    before = {"c": _template(group("GroupA"))}
    result = plan(before, {"c": _template(group("GroupB"))})
    assert result.refused and [c.line() for c in result.collisions] == [
        "c GroupB (AWS::PCS::ComputeNodeGroup) would be created as gpu, which GroupA still holds: CloudFormation "
        "creates a resource before it deletes the one it replaces or a template drops, so the create fails (already "
        "exists) and rolls the deploy back; give it another name, or free the name in a deploy of its own first"
    ]
    # The same name in another cluster is another name.
    assert plan(before, {"c": _template(group("GroupB", cluster="Other"))}).collisions == ()
    # A resource that stays holds its name as well.
    (kept,) = collisions(_template(group("GroupA")), _template(group("GroupA") | group("GroupB")))
    assert (kept.logical_id, kept.holder, kept.replacing) == ("GroupB", "GroupA", False)


def _pcs(size: str = "SMALL", group_name: str = "gpu", group_type: str = "p5.48xlarge", old_name: str = "old") -> dict:
    cluster = {"Type": "AWS::PCS::Cluster", "Properties": {"Size": size, "Networking": {"SubnetIds": ["subnet-1"]}}}
    in_cluster = {"Fn::GetAtt": ["Pcs", "Id"]}
    group = {"Name": group_name, "ClusterId": in_cluster, "InstanceConfigs": [{"InstanceType": group_type}]}
    other = {"Name": old_name, "ClusterId": in_cluster, "InstanceConfigs": [{"InstanceType": "c5.large"}]}
    serves = [{"ComputeNodeGroupId": {"Fn::GetAtt": ["Group", "Id"]}}]
    queue = {"Name": "q", "ClusterId": in_cluster, "ComputeNodeGroupConfigurations": serves}
    return _template(
        {
            "Pcs": cluster,
            "Group": {"Type": "AWS::PCS::ComputeNodeGroup", "Properties": group},
            "Other": {"Type": "AWS::PCS::ComputeNodeGroup", "Properties": other},
            "Queue": {"Type": "AWS::PCS::Queue", "Properties": queue},
        }
    )


def test_each_resource_is_created_updated_replaced_kept_or_deleted() -> None:
    after = _pcs(group_name="gpu-2", group_type="p5en.48xlarge")
    del after["Resources"]["Other"]
    after["Resources"]["Extra"] = _pcs()["Resources"]["Other"]
    # The replaced group has a new id, so the queue that lists it updates (its configurations are not create-only).
    assert actions(_pcs(), after) == {
        "Pcs": "same",
        "Group": "replace",
        "Queue": "update",
        "Other": "delete",
        "Extra": "create",
    }


def test_a_name_kept_in_a_replacement_cluster_is_another_scope() -> None:
    # A new size replaces the cluster; its groups and queues follow (ClusterId is create-only) and are created in the
    # new cluster, where no name is taken yet: a replacement, not a refusal.
    result = plan({"c": _pcs()}, {"c": _pcs(size="MEDIUM")})
    assert result.actions["c"] == {"Pcs": "replace", "Group": "replace", "Other": "replace", "Queue": "replace"}
    assert {r.logical_id: r.because for r in result.replacements}["Group"] == ("ClusterId (Pcs is replaced)",)
    assert not result.refused and result.collisions == ()


def test_a_replacement_under_the_name_another_resource_holds_is_refused() -> None:
    # Group takes the name Other holds, in the same cluster, while Other goes: the new Group comes first.
    after = _pcs(group_name="old", old_name="gone")
    (taken,) = collisions(_pcs(), after, stack="c")
    assert (taken.holder, taken.name, taken.replacing) == ("Other", "old", True)
    assert taken.line().startswith("c Group (AWS::PCS::ComputeNodeGroup) would be replaced by one named old, which ")
    assert plan({"c": _pcs()}, {"c": after}).refused


def test_the_name_scopes_are_create_only_properties_of_named_types() -> None:
    scopes = service_fact("cloudformation", "name_scopes").value
    assert set(scopes) == {"AWS::PCS::ComputeNodeGroup", "AWS::PCS::Queue"}
    for resource_type, paths in scopes.items():
        assert name_properties(resource_type) and tuple(paths) == scope_properties(resource_type)
        assert set(paths) <= set(create_only(resource_type)), resource_type


def test_a_name_is_the_whole_primary_identifier() -> None:
    def entry(logical_id: str, principal: str) -> dict:
        properties = {"ClusterName": "c", "PrincipalArn": principal}
        return {logical_id: {"Type": "AWS::EKS::AccessEntry", "Properties": properties}}

    # Another principal in the same cluster is another access entry; the same one is taken.
    before = _template(entry("Admin", "arn:aws:iam::1:role/admin"))
    assert collisions(before, _template(entry("Ci", "arn:aws:iam::1:role/ci"))) == []
    (taken,) = collisions(before, _template(entry("Ci", "arn:aws:iam::1:role/admin")))
    assert (taken.logical_id, taken.holder) == ("Ci", "Admin")

    # A route's identifier ends in a read-only CidrBlock: its route table alone names nothing.
    def route(logical_id: str, destination: str) -> dict:
        properties = {"RouteTableId": "rtb-1", "DestinationCidrBlock": destination, "GatewayId": "igw-1"}
        return {logical_id: {"Type": "AWS::EC2::Route", "Properties": properties}}

    assert name_properties("AWS::EC2::Route") == ()
    assert (
        collisions(
            _template(route("Out", "0.0.0.0/0")), _template(route("Out", "0.0.0.0/0") | route("Peer", "10.1.0.0/16"))
        )
        == []
    )


def test_an_update_that_bumps_a_version_moves_what_reads_it_in_a_create_only_property() -> None:
    def stack(data: str) -> dict:
        template = {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {"UserData": data}}}
        version = {"Fn::GetAtt": ["Template", "LatestVersionNumber"]}
        # A stand-in consumer: an image recipe's create-only Description reads the template's latest version.
        recipe = {"Type": "AWS::ImageBuilder::ImageRecipe", "Properties": {"Name": "r", "Description": version}}
        return _template({"Template": template, "Recipe": recipe})

    (replaced,) = replacements(stack("a"), stack("b"))
    assert replaced.because == ("Description (Template.LatestVersionNumber changes with the update)",)
    assert replaced.refused and replaced.custom_name == "r"


def test_what_a_line_says_follows_the_retention_policies() -> None:
    kept = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    before = _template({"Sg": _group(), "Fs": _fsx(**kept)})
    (replaced,) = replacements(before, _template({"Sg": _group(), "Fs": _fsx(deployment="SCRATCH_2", **kept)}))
    assert replaced.line().endswith("the new one starts empty and the old one stays behind outside the stack")
    (dropped,) = removals(before, _template({"Sg": _group()}), stack="st")
    assert dropped.kept and dropped.line() == (
        "st Fs (file system) leaves the stack: it stays behind, outside the stack (DeletionPolicy Retain)"
    )
    (deleted,) = removals(_template({"Fs": _fsx()}), _template({}))
    assert not deleted.kept and deleted.line().endswith("it is deleted with its data")
    # Only stateful resources are worth a line when they go.
    assert removals(_template({"Sg": _group()}), _template({})) == []


def _producer(group: dict, *, export: bool = True) -> dict:
    outputs = {
        "ExportsOutputSg": {"Value": {"Fn::GetAtt": ["Sg", "GroupId"]}, "Export": {"Name": "net:ExportsOutputSg"}}
    }
    return _template({"Sg": group}, outputs if export else None)


def _consumer() -> dict:
    properties = {"GroupDescription": "nodes", "VpcId": {"Fn::ImportValue": "net:ExportsOutputSg"}}
    return _template({"Nodes": {"Type": "AWS::EC2::SecurityGroup", "Properties": properties}})


def test_an_export_in_use_blocks_a_change_of_its_value_and_its_removal() -> None:
    before = {"net": _producer(_group()), "app": _consumer()}
    (changed_value,) = blocked_exports(before, {"net": _producer(_group("other")), "app": _consumer()})
    assert changed_value.line() == (
        "net export net:ExportsOutputSg would change value (Sg is replaced: GroupDescription create-only) while app "
        f"imports it: {EXPORT_RULE}, and rolls the deploy back; deploy it once app no longer imports it "
        "(`npx cdk destroy app` removes the import, with whatever depends on it), or leave this change out"
    )
    (removed,) = blocked_exports(before, {"net": _producer(_group(), export=False), "app": _consumer()})
    assert removed.reason == "would be removed"
    # Nobody imports it: CloudFormation lets it change.
    assert blocked_exports({"net": _producer(_group())}, {"net": _producer(_group("other"))}) == []
    # An importer kiln did not make counts the same (`imported_by`, as CloudFormation's ListImports gives it).
    foreign = blocked_exports(
        {"net": _producer(_group())}, {"net": _producer(_group("other"))}, imported_by={"net:ExportsOutputSg": ["x"]}
    )
    assert [b.importers for b in foreign] == [("x",)]


def test_a_weak_reference_carries_a_replacement_into_its_reader() -> None:
    read = {"Fn::GetStackOutput": {"StackName": "net", "OutputName": "SgId"}}
    reader = _template(
        {"Nodes": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "n", "VpcId": read}}}
    )

    def producer(group: dict) -> dict:
        return _template({"Sg": group}, {"SgId": {"Value": {"Fn::GetAtt": ["Sg", "GroupId"]}}})

    result = plan({"net": producer(_group()), "app": reader}, {"net": producer(_group("other")), "app": reader})
    assert [(r.stack, r.logical_id, r.because) for r in result.replacements] == [
        ("net", "Sg", ("GroupDescription",)),
        ("app", "Nodes", ("VpcId (net SgId changes)",)),
    ]
    assert not result.refused


def test_references_are_what_ref_getatt_and_sub_name() -> None:
    value = {
        "A": {"Ref": "Bucket"},
        "B": {"Fn::GetAtt": "Role.Arn"},
        "C": {"Fn::Sub": "${Key.Arn}/${AWS::Region}/${!Literal}/${Var}"},
        "D": {"Fn::Sub": ["${Var}", {"Var": {"Ref": "Topic"}}]},
        "E": {"Ref": "AWS::StackName"},
    }
    # ${Var} of D is its own variable; ${Var} of C names a resource.
    assert references(value) == {"Bucket", "Role", "Key", "Var", "Topic"}


def test_every_type_without_handlers_in_the_examples_has_its_documented_replacements(example_assemblies) -> None:
    types = {
        resource["Type"]
        for assembly in example_assemblies.values()
        for template in assembly.templates().values()
        for resource in template.get("Resources", {}).values()
    }
    legacy = {t for t in types if not t.startswith("Custom::") and not has_handlers(t)}
    assert legacy == {"AWS::FSx::FileSystem"} and legacy <= set(documented_replacements())
    assert set(STATEFUL) - {"AWS::Grafana::Workspace", "AWS::SageMaker::Cluster"} <= types


# The changes the issue lists, synthesized before and after.


@pytest.fixture(scope="module")
def quickstart() -> dict[str, Any]:
    return example("quickstart")


def test_a_tags_change_deploys_as_an_update(quickstart) -> None:
    after = changed(quickstart, tags={"team": "research", "cost-center": "42"})
    assert_updates(quickstart, after)
    # The placement group, whose Tags are create-only (a change would replace it), carries kiln's tag only.
    (group,) = [r for r in templates(after)["quickstart-compute"]["Resources"].values() if r["Type"] in FIXED_TAG_TYPES]
    assert group["Properties"]["Tags"] == [{"Key": "kiln:cluster", "Value": "quickstart"}]


def test_no_resource_whose_tags_are_create_only_carries_the_specs_tags(example_assemblies) -> None:
    fixed = set()
    for assembly in example_assemblies.values():
        for template in assembly.templates().values():
            for resource in template.get("Resources", {}).values():
                if "/properties/Tags" in create_only(resource["Type"]):
                    fixed.add(resource["Type"])
                    keys = {tag["Key"] for tag in resource["Properties"].get("Tags", [])}
                    assert all(key.startswith("kiln:") for key in keys), (resource["Type"], keys)
    assert fixed == set(FIXED_TAG_TYPES)


def test_kiln_keeps_strong_cross_stack_references(quickstart) -> None:
    """Weak references (Fn::GetStackOutput) would replace the cluster and its file system on the switching deploy:
    CloudFormation resolves them at execution, so every create-only property they feed counts as changed
    (aws/aws-cdk#38829). kiln stays with exports, and `kiln diff` names what they refuse."""
    assert FEATURE_FLAGS[STRENGTH] == "strong"
    assert "Fn::GetStackOutput" not in json.dumps(templates(quickstart))
    for strength in ("both", "weak"):
        lines = deploy_plan(quickstart, quickstart, after_context={STRENGTH: strength}).findings()
        assert any("(file system) is replaced (SubnetIds" in line for line in lines), lines
        assert any("(PCS cluster) is replaced (Networking" in line for line in lines), lines


@pytest.fixture(scope="module")
def persistent() -> dict[str, Any]:
    return changed(MINIMAL_SPEC, storage__lustre__efa=False, observability={"prometheus": True})


@pytest.mark.parametrize(
    ("change", "naming"),
    [
        # A new deployment type replaces the file system: its id, DNS name and mount name change under compute.
        ({"storage__lustre__deployment": "SCRATCH_2"}, ("LustreConfiguration/DeploymentType", "t-compute imports")),
        # EFA cannot be switched on a file system in place (platforms.json, cloudformation.replacement_properties).
        ({"storage__lustre__efa": True}, ("LustreConfiguration/EfaEnabled", "t-compute imports")),
        ({"storage__lustre": DELETE}, ("would be removed while t-compute imports it",)),
        ({"observability": DELETE}, ("would be removed while t-compute imports it",)),
    ],
    ids=["lustre-deployment", "lustre-efa", "drop-lustre", "drop-prometheus"],
)
def test_a_change_to_an_export_in_use_is_refused_with_one_line_each(persistent, change, naming) -> None:
    lines = assert_refused(persistent, changed(persistent, **change), *naming)
    assert all(line.startswith("t-") for line in lines)


def test_a_persistent_file_system_replaced_by_a_scratch_one_is_reported_deleted(persistent) -> None:
    # The new template's scratch file system has no UpdateReplacePolicy Retain, and AWS does not say whose policy a
    # replacement follows: the line takes the worse reading.
    lines = deploy_plan(persistent, changed(persistent, storage__lustre__deployment="SCRATCH_2")).findings()
    (line,) = [line for line in lines if "(file system) is replaced" in line]
    assert line.endswith("the new one starts empty and the old one is deleted with its data")
    kept = changed(persistent, storage__lustre__efa=True)
    (line,) = [line for line in deploy_plan(persistent, kept).findings() if "(file system) is replaced" in line]
    assert line.endswith("the new one starts empty and the old one stays behind outside the stack")


# `kiln diff`: the same, from the command line.


def _write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _kiln(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    from kiln.cli.main import main

    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_kiln_diff_names_each_refused_change_in_one_line_and_exits_1(tmp_path, capsys, persistent) -> None:
    before = _write(tmp_path / "before.yaml", persistent)
    after = _write(tmp_path / "after.yaml", changed(persistent, storage__lustre=DELETE))
    code, out, err = _kiln(capsys, "--spec", after, "--before", before)
    assert code == 1 and err == []
    *findings, summary = out
    assert findings and all("would be removed while t-compute imports it" in f for f in findings[:-1])
    assert findings[-1] == (
        "t-storage LustreDCDAF745 (file system) leaves the stack: it stays behind, outside the stack "
        "(DeletionPolicy Retain)"
    )
    assert summary == f"kiln diff: 3 stacks compared with {before}; refused by CloudFormation"


def test_kiln_diff_refuses_a_smaller_file_system_offline(tmp_path, capsys, persistent) -> None:
    before = _write(tmp_path / "before.yaml", changed(persistent, storage__lustre__storage_gib=4800))
    after = _write(tmp_path / "after.yaml", persistent)
    code, out, err = _kiln(capsys, "--spec", after, "--before", before)
    assert code == 1 and err == []
    *findings, summary = out
    [line] = findings
    assert line.startswith("t-storage Lustre")
    assert line.endswith(
        "StorageCapacity 4800 -> 2400: FSx for Lustre only increases a file system's storage capacity, never "
        "decreases it (https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html), so the "
        "update fails and rolls the deploy back; keep 4800 or more"
    )
    assert summary == f"kiln diff: 3 stacks compared with {before}; refused by CloudFormation"


def test_kiln_diff_of_an_update_exits_0(tmp_path, capsys, persistent) -> None:
    before = _write(tmp_path / "before.yaml", persistent)
    after = _write(tmp_path / "after.yaml", changed(persistent, tags={"team": "ml"}))
    code, out, _ = _kiln(capsys, "--spec", after, "--before", before)
    assert (code, out) == (
        0,
        [
            f"kiln diff: 3 stacks compared with {before}; "
            "nothing is refused, and no stateful resource is replaced or dropped"
        ],
    )


def test_kiln_diff_reads_saved_templates_and_counts_missing_stacks_as_new(tmp_path, capsys, persistent) -> None:
    saved = tmp_path / "cdk.out"
    saved.mkdir()
    for name, template in templates(persistent).items():
        if name != "t-compute":
            (saved / f"{name}.template.json").write_text(json.dumps(template))
    code, out, _ = _kiln(capsys, "--spec", _write(tmp_path / "s.yaml", persistent), "--stack-templates", str(saved))
    assert code == 0 and out[-1].startswith(f"kiln diff: 2 stacks compared with {saved}; new: t-compute;")


@mock_aws
def test_kiln_diff_compares_with_the_deployed_templates(tmp_path, capsys, monkeypatch, persistent) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # GetTemplate gives back the template as submitted: a stand-in whose bucket the spec no longer has.
    deployed = _template({"OldBucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"}})
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="t-storage", TemplateBody=json.dumps(deployed)
    )
    code, out, err = _kiln(capsys, "--spec", _write(tmp_path / "s.yaml", persistent))
    assert (code, err) == (1, [])
    assert out == [
        "t-storage OldBucket (bucket) leaves the stack: it stays behind, outside the stack (DeletionPolicy Retain)",
        "kiln diff: 1 stack compared with the deployed stacks; new: t-network, t-compute; "
        "deploys, but look at the lines above",
    ]


def test_kiln_diff_without_credentials_says_so_in_one_line(tmp_path, capsys, monkeypatch, persistent) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, err = _kiln(capsys, "--spec", _write(tmp_path / "s.yaml", persistent))
    assert (code, out) == (2, [])
    assert err == [
        "kiln diff: no AWS credentials: set or refresh them (environment, profile, SSO or instance role) for the "
        "account to use, or compare offline with --before OLD.yaml or --stack-templates DIR"
    ]


def test_kiln_diff_takes_a_profile_only_to_ask_aws(tmp_path, capsys, persistent) -> None:
    spec = _write(tmp_path / "s.yaml", persistent)
    code, out, err = _kiln(capsys, "--spec", spec, "--before", spec, "--profile", "lab")
    assert (code, out) == (2, [])
    assert err == ["kiln diff: --profile: --before and --stack-templates compare offline, without AWS credentials"]


def test_kiln_diff_of_a_bad_spec_is_its_problem_lines(tmp_path, capsys) -> None:
    bad = _write(tmp_path / "bad.yaml", changed(MINIMAL_SPEC, compute__backend="slurm-on-the-moon"))
    code, out, err = _kiln(capsys, "--spec", bad, "--before", bad)
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith(f"{bad}:")
    assert "Traceback" not in "\n".join(err)


def test_kiln_diff_names_a_change_parallelclusters_own_update_check_refuses(tmp_path, capsys) -> None:
    # CloudFormation would take it (a custom resource's property changes), but ParallelCluster refuses a queue's
    # instance type while the compute fleet runs: the update fails and rolls back. kiln diff says so first.
    spec = example("p5-parallelcluster")
    groups = [dict(g) for g in spec["compute"]["groups"]]
    groups[1]["instance_type"] = "g5.12xlarge" if groups[1]["instance_type"] != "g5.12xlarge" else "g6.12xlarge"
    before = _write(tmp_path / "before.yaml", spec)
    after = _write(tmp_path / "after.yaml", changed(spec, compute__groups=groups))
    code, out, err = _kiln(capsys, "--spec", after, "--before", before)
    assert code == 1 and err == []
    refused = [line for line in out if line.startswith(f"{spec['name']}-compute: ")]
    assert len(refused) == 1, out
    assert "COMPUTE_FLEET_STOP" in refused[0] and "update-compute-fleet" in refused[0], refused
    assert out[-1].endswith("refused by CloudFormation")


def test_the_specs_tags_stay_off_the_stacks_own_tags(example_assemblies) -> None:
    # CloudFormation applies a stack's tags to its resources, a placement group included: kiln's fixed tags only.
    assembly = example_assemblies["p5-parallelcluster"]
    manifest = json.loads((assembly.outdir / "manifest.json").read_text())
    stacks = {
        name: artifact["properties"].get("tags", {})
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }
    assert stacks and all(tags == {"kiln:cluster": "llm-pcluster"} for tags in stacks.values()), stacks
