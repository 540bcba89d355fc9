"""Day two (issue 33, items 1 and 6): `cdk destroy --all` and a redeploy of the same spec need no manual step.

The teardown walks each example's stacks in reverse dependency order (the cloud assembly's manifest, as the CDK
CLI deletes them): nothing retained may refer to a resource the teardown deletes, and every stack is deleted
before the stacks whose exports it imports. A retained resource with a custom name that a second stack would
reuse fails the redeploy ("already exists"), unless it is listed here with the documented way it is reused.
"""

from __future__ import annotations

from typing import Any

import pytest

from kiln.changes import (
    Dangling,
    assembly_dependencies,
    assembly_templates,
    dangling_references,
    deletion_order,
    fixed_names,
    imports_out_of_order,
    retained,
)
from tests.support.day_two import example, templates
from tests.support.paths import EXAMPLES
from tests.support.specs import changed

STEMS = [path.stem for path in EXAMPLES]

# (retained type, deleted type it refers to) -> why AWS says the deletion is harmless.
HARMLESS_DANGLING = {
    ("AWS::ImageBuilder::Image", "AWS::ImageBuilder::ImagePipeline"): (
        "DeploymentId only starts the build of the image ('The deployment ID of the image pipeline that creates this "
        "image', https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
        "aws-properties-imagebuilder-image-imagepipelineexecutionsettings.html); the built image and its AMI stand "
        "alone (https://docs.aws.amazon.com/imagebuilder/latest/APIReference/API_DeleteImage.html: even deleting "
        "the image resource leaves its AMIs)"
    ),
}
# (type, name property) -> how a redeploy after `cdk destroy` reuses the retained resource of that name.
_NAMED_BUCKET_REDEPLOY = (
    "a bucket the spec names (storage.bucket.name) is kept with its TLS-only policy; a redeploy is refused before "
    "anything is created by preflight's bucket check, which says to set storage.bucket.existing: true, and an "
    "attached bucket gets neither a bucket nor a policy from kiln (tests/preflight/test_bucket.py)"
)
REUSED_NAMES = {
    ("AWS::S3::Bucket", "BucketName"): _NAMED_BUCKET_REDEPLOY,
    ("AWS::S3::BucketPolicy", "Bucket"): _NAMED_BUCKET_REDEPLOY,
}


def _retained_fixed_names(stack_templates: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for stack, template in stack_templates.items():
        resources = template.get("Resources", {})
        for logical_id, resource in resources.items():
            if not retained(resource):
                continue
            for prop, value in fixed_names(resource, resources).items():
                if (resource["Type"], prop) not in REUSED_NAMES:
                    lines.append(f"{stack} {logical_id} ({resource['Type']}) is retained with a fixed {prop} {value}")
    return lines


def _harmful(found: list[Dangling]) -> list[str]:
    return [d.line() for d in found if (d.type, d.target_type) not in HARMLESS_DANGLING]


@pytest.mark.parametrize("stem", STEMS)
def test_teardown_deletes_nothing_a_retained_resource_needs(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    assert assembly.returncode == 0, assembly.stderr
    stack_templates = assembly_templates(assembly.outdir)
    dependencies = assembly_dependencies(assembly.outdir)
    order = deletion_order(dependencies)
    assert sorted(order) == sorted(stack_templates)
    # Each stack goes before every stack it depends on, and so before every stack whose exports it imports.
    assert all(set(dependencies[stack]) <= set(order[index + 1 :]) for index, stack in enumerate(order))
    assert imports_out_of_order(stack_templates, dependencies) == []
    assert _harmful(dangling_references(stack_templates)) == []


@pytest.mark.parametrize("stem", STEMS)
def test_a_redeploy_after_teardown_meets_no_retained_name(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    assert assembly.returncode == 0, assembly.stderr
    assert _retained_fixed_names(assembly_templates(assembly.outdir)) == []


def test_a_bucket_the_spec_names_is_reused_as_documented() -> None:
    named = changed(example("quickstart"), storage__bucket__name="kiln-quickstart-data-0123456789")
    assert _retained_fixed_names(templates(named)) == []
    (bucket,) = [
        r
        for r in templates(named)["quickstart-storage"]["Resources"].values()
        if r["Type"] == "AWS::S3::Bucket" and "BucketName" in r["Properties"]
    ]
    assert retained(bucket) and bucket["Properties"]["BucketName"] == "kiln-quickstart-data-0123456789"
    # What preflight tells the redeploy to do: attach it, and kiln then makes neither the bucket nor a policy on it.
    attached = changed(
        example("quickstart"), storage__bucket__name="kiln-quickstart-data-0123456789", storage__bucket__existing=True
    )
    storage = templates(attached)["quickstart-storage"]["Resources"].values()
    assert not [r for r in storage if r["Type"] in ("AWS::S3::Bucket", "AWS::S3::BucketPolicy")]


# The checks themselves, on small templates: each can fail.


def _stack(resources: dict[str, Any], outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"Resources": resources, **({"Outputs": outputs} if outputs else {})}


def test_a_kept_file_system_on_a_deleted_group_and_subnet_is_found() -> None:
    subnet = {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": "vpc-1", "CidrBlock": "10.0.0.0/24"}}
    export = {"Value": {"Ref": "Subnet"}, "Export": {"Name": "net:Subnet"}}
    group = {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "fs", "VpcId": "vpc-1"}}
    fs = {
        "Type": "AWS::FSx::FileSystem",
        "DeletionPolicy": "Retain",
        "Properties": {
            "FileSystemType": "LUSTRE",
            "SubnetIds": [{"Fn::ImportValue": "net:Subnet"}],
            "SecurityGroupIds": [{"Fn::GetAtt": ["Group", "GroupId"]}],
        },
    }
    stacks = {"net": _stack({"Subnet": subnet}, {"Subnet": export}), "data": _stack({"Group": group, "Fs": fs})}
    assert _harmful(dangling_references(stacks)) == [
        "data Fs (AWS::FSx::FileSystem) is retained but refers to Group (AWS::EC2::SecurityGroup), which is deleted "
        "with its own stack",
        "data Fs (AWS::FSx::FileSystem) is retained but refers through export net:Subnet to Subnet "
        "(AWS::EC2::Subnet), which is deleted with net",
    ]
    # Retained with it, the group is no longer a problem; the import still orders the teardown.
    stacks["data"]["Resources"]["Group"]["DeletionPolicy"] = "Retain"
    stacks["net"]["Resources"]["Subnet"]["DeletionPolicy"] = "Retain"
    assert dangling_references(stacks) == []
    assert imports_out_of_order(stacks, {"net": (), "data": ()}) == [
        "data imports net:Subnet from net without depending on it: net may go first"
    ]
    assert imports_out_of_order(stacks, {"net": (), "data": ("net",)}) == []
    assert deletion_order({"net": (), "data": ("net",), "app": ("data",)}) == ["app", "data", "net"]
    with pytest.raises(ValueError, match="cycle: a, b"):
        deletion_order({"a": ("b",), "b": ("a",)})


def test_a_name_that_holds_the_stack_id_or_a_generated_id_is_not_fixed() -> None:
    def group(name: Any) -> dict[str, Any]:
        return {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain", "Properties": {"LogGroupName": name}}

    stack_id = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    key = {"Type": "AWS::KMS::Key", "Properties": {}}
    resources = {
        "Fixed": group("/kiln/logs"),
        "FromStackName": group({"Fn::Sub": "/kiln/${AWS::StackName}"}),
        "PerStack": group({"Fn::Join": ["", ["/aws/imagebuilder/x-", stack_id]]}),
        "FromKey": group({"Fn::Sub": "/kiln/${Key}"}),
        "Key": key,
    }
    assert _retained_fixed_names({"s": _stack(resources)}) == [
        "s Fixed (AWS::Logs::LogGroup) is retained with a fixed LogGroupName /kiln/logs",
        "s FromStackName (AWS::Logs::LogGroup) is retained with a fixed LogGroupName "
        "{'Fn::Sub': '/kiln/${AWS::StackName}'}",
    ]
