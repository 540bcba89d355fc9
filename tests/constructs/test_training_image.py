"""TrainingImage: components from the bundle's steps, a digest-named recipe, locked-down build instances, and
an AMI distribution that tags every image with its versions and publishes its id."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from kiln.catalog.platforms import service_fact
from kiln.constructs import TrainingImage, TrainingImageProps
from kiln.contracts.image import ImageManifest, pin_tag
from kiln.contracts.tags import TAG_CLUSTER, TAG_RECIPE
from kiln.stacks.app import new_app
from tests.support.constructs import efa_network, get_att, logical_id, plain_bootstrap, ref, stack, synth_as_kiln

STEPS = ("install_nvidia_driver", "install_efa", "install_nccl", "install_enroot", "install_launcher")
MANIFEST = ImageManifest(
    target="pcs",
    os="ubuntu2204",
    architecture="x86_64",
    steps={
        "install_nvidia_driver": {"KILN_NVIDIA_DRIVER_VERSION": "570.172.08"},
        "install_efa": {"KILN_EFA_INSTALLER_VERSION": "1.43.2"},
        "install_nccl": {"KILN_NCCL_VERSION": "2.27.3-1+cuda12.9"},
        "install_enroot": {"KILN_ENROOT_VERSION": "3.5.0"},
        "install_launcher": {"KILN_LAUNCHER_WHEEL_SHA256": "ab" * 32, "KILN_TORCH_VERSION": ""},
    },
)
PARENT = "ami-0123456789abcdef0"


def props(st: Any, **changes: Any) -> TrainingImageProps:
    network = efa_network(st, "us-east-1a")
    settings: dict[str, Any] = {
        "name": "llm-image",
        "bundle": plain_bootstrap(st),
        "bundle_digest": "d" * 64,
        "manifest": MANIFEST,
        "parent_image": PARENT,
        "vpc": network.net.vpc,
        "subnet": network.net.compute_subnet,
        "image_parameter_name": "/kiln/llm/image-id",
        "tags": {TAG_CLUSTER: "llm"},
    }
    return TrainingImageProps(**(settings | changes))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainingImage, Template]:
    outdir = tmp_path_factory.mktemp("image")
    app = new_app(outdir=str(outdir))
    st = stack("Image", app)
    image = TrainingImage(st, "Image", props(st))
    return image, synth_as_kiln(app, outdir, [st])["Image"]


def test_components_run_the_bundle_steps_in_groups_and_the_recipe_lists_them_in_order(built) -> None:
    image, template = built
    components = template.find_resources("AWS::ImageBuilder::Component")
    assert len(components) == 6  # fetch, accelerators, containers, launcher, seal, test
    documents = {
        c["Properties"]["Name"]: yaml.safe_load(c["Properties"]["Data"])
        for c in components.values()
        if isinstance(c["Properties"]["Data"], str)
    }
    digest = image.recipe_digest[:10]
    assert f"llm-image-accelerators-{digest}" in documents
    accelerators = documents[f"llm-image-accelerators-{digest}"]
    assert "install_nvidia_driver install_efa install_nccl" in str(accelerators)
    recipe = template.find_resources("AWS::ImageBuilder::ImageRecipe")
    ((recipe_id, recipe_resource),) = recipe.items()
    listed = [c["ComponentArn"] for c in recipe_resource["Properties"]["Components"]]
    assert listed == [get_att(c, "Arn") for c in image.components]
    assert recipe_resource["Properties"]["Name"] == f"llm-image-{digest}"
    assert recipe_resource["Properties"]["ParentImage"] == PARENT
    assert recipe_resource["Properties"]["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/sda1",
            "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 100, "VolumeType": "gp3"},
        }
    ]
    assert recipe_resource["Properties"]["AdditionalInstanceConfiguration"] == {
        "SystemsManagerAgent": {"UninstallAfterBuild": False}
    }


def test_the_fetch_component_downloads_exactly_the_bundle(built) -> None:
    image, template = built
    fetch = template.to_json()["Resources"][logical_id(image.components[0])]["Properties"]["Data"]
    (download,) = [
        step for phase in yaml.safe_load(fetch)["phases"] for step in phase["steps"] if step["action"] == "S3Download"
    ]
    assert download["inputs"][0]["source"] == "s3://kiln-bundles-111111111111/bundles/node.zip"


def test_build_instances_are_locked_down(built) -> None:
    image, template = built
    template.has_resource_properties(
        "AWS::ImageBuilder::InfrastructureConfiguration",
        {
            "InstanceTypes": ["m6i.2xlarge"],
            "InstanceMetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
            "TerminateInstanceOnFailure": True,
            "SubnetId": Match.any_value(),
            "SecurityGroupIds": [get_att(image.security_group.node.default_child, "GroupId")],
            "InstanceProfileName": ref(image.instance_profile),
        },
    )
    group = template.to_json()["Resources"][logical_id(image.security_group.node.default_child)]["Properties"]
    assert "SecurityGroupIngress" not in group
    assert sorted(rule["FromPort"] for rule in group["SecurityGroupEgress"]) == [80, 443]


def test_build_role_is_what_image_builder_documents_plus_the_bundle(built) -> None:
    image, template = built
    role_id = logical_id(image.role.node.default_child)
    policies = [
        p for p in template.find_resources("AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    by_action = {str(s["Action"]): s["Resource"] for s in statements}
    assert by_action == {"s3:GetObject": "arn:aws:s3:::kiln-bundles-111111111111/bundles/node.zip"}
    # Image Builder's setting-up guide: the build instance profile carries both AWS managed policies.
    role = template.find_resources("AWS::IAM::Role")[role_id]
    attached = sorted(json.dumps(arn) for arn in role["Properties"]["ManagedPolicyArns"])
    expected = service_fact("imagebuilder", "instance_profile_policies").value
    assert expected == ["EC2InstanceProfileForImageBuilder", "AmazonSSMManagedInstanceCore"]
    assert len(attached) == 2 and all(any(f"policy/{name}" in arn for arn in attached) for name in expected)


def test_every_ami_is_tagged_with_its_versions_and_published(built) -> None:
    image, template = built
    ((_, distribution),) = template.find_resources("AWS::ImageBuilder::DistributionConfiguration").items()
    (entry,) = distribution["Properties"]["Distributions"]
    tags = entry["AmiDistributionConfiguration"]["AmiTags"]
    assert tags[pin_tag("KILN_NVIDIA_DRIVER_VERSION")] == "570.172.08"
    assert tags[pin_tag("KILN_EFA_INSTALLER_VERSION")] == "1.43.2"
    assert tags[TAG_CLUSTER] == "llm" and tags[TAG_RECIPE] == image.recipe_digest[:16]
    assert entry["AmiDistributionConfiguration"]["Name"] == "llm-image-{{ imagebuilder:buildDate }}"
    assert entry["SsmParameterConfigurations"] == [{"ParameterName": "/kiln/llm/image-id", "DataType": "aws:ec2:image"}]


def test_the_first_image_is_a_pipeline_execution_and_is_retained(built) -> None:
    image, template = built
    resources = template.to_json()["Resources"]
    pipeline = resources[logical_id(image.pipeline)]["Properties"]
    assert pipeline["ImageTestsConfiguration"] == {"ImageTestsEnabled": True, "TimeoutMinutes": 60}
    assert pipeline["ImageRecipeArn"] == get_att(image.recipe, "Arn")
    built_image = resources[logical_id(image.image)]
    assert built_image["Properties"]["ImagePipelineExecutionSettings"] == {
        "DeploymentId": get_att(image.pipeline, "DeploymentId"),
        "OnUpdate": True,
    }
    assert built_image["DeletionPolicy"] == "Retain" and built_image["UpdateReplacePolicy"] == "Retain"
    logs_id = logical_id(image.log_group.node.default_child)
    logs = resources[logs_id]
    # Under Image Builder's own prefix, the recipe's name, then the stack id's UUID: a redeploy after `cdk destroy`
    # names a new group instead of colliding with the retained one; the pipeline and the image write to it.
    stack_uuid = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    assert logs["Properties"]["LogGroupName"] == {
        "Fn::Join": ["", [f"/aws/imagebuilder/{image.recipe_name}-", stack_uuid]]
    }
    assert logs["Properties"]["RetentionInDays"] == 365
    assert pipeline["LoggingConfiguration"] == {"ImageLogGroupName": {"Ref": logs_id}}
    assert built_image["Properties"]["LoggingConfiguration"] == {"LogGroupName": {"Ref": logs_id}}


def test_recipe_digest_follows_contents_only() -> None:
    app = new_app()
    st = stack("Digest", app)
    base = props(st)
    assert dataclasses.replace(base, tags={"team": "ml"}).recipe_digest == base.recipe_digest
    for change in ({"bundle_digest": "e" * 64}, {"parent_image": "ami-0fedcba9876543210"}, {"root_volume_gib": 200}):
        assert dataclasses.replace(base, **change).recipe_digest != base.recipe_digest


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"parent_image": "ubuntu"}, "parent_image"),
        ({"root_volume_gib": 4}, "root_volume_gib"),
        ({"image_parameter_name": "kiln/x"}, "image_parameter_name"),
        ({"manifest": dataclasses.replace(MANIFEST, architecture="sparc")}, "manifest.architecture"),
        ({"manifest": dataclasses.replace(MANIFEST, steps={})}, "manifest"),
    ],
)
def test_bad_props_are_one_clear_error(change: dict, words: str) -> None:
    st = stack("Bad")
    with pytest.raises(ValueError, match=words):
        props(st, **change)


def test_arm64_on_al2023_builds_on_graviton_with_the_xvda_root(tmp_path: Path) -> None:
    app = new_app(outdir=str(tmp_path))
    st = stack("Arm", app)
    manifest = dataclasses.replace(MANIFEST, architecture="arm64", os="al2023")
    TrainingImage(st, "Image", props(st, manifest=manifest, retain=False))
    template = Template.from_stack(st)
    template.has_resource_properties(
        "AWS::ImageBuilder::InfrastructureConfiguration", {"InstanceTypes": ["m7g.2xlarge"]}
    )
    template.has_resource_properties(
        "AWS::ImageBuilder::ImageRecipe", {"BlockDeviceMappings": [Match.object_like({"DeviceName": "/dev/xvda"})]}
    )
    template.has_resource("AWS::ImageBuilder::Image", {"DeletionPolicy": "Delete"})
