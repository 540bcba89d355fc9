"""BootstrapAssets: the rendered bundle as an S3 asset that compute constructs read."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_iam as iam

from kiln.constructs.bootstrap_assets import BootstrapAssets, BootstrapAssetsProps
from tests.support.bootstrap import local_config, pcs_config


@pytest.fixture(scope="module")
def synthesized():
    app = cdk.App()
    stack = cdk.Stack(app, "Bootstrap", env=cdk.Environment(account="111111111111", region="us-east-1"))
    assets = BootstrapAssets(stack, "Bootstrap", BootstrapAssetsProps(config=pcs_config()))
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    assets.grant_read(role)
    template = assertions.Template.from_stack(stack)
    return stack, assets, role, template, Path(app.synth().directory)


def test_bundle_is_an_asset_with_its_entry_point(synthesized):
    stack, assets, _, _, cloud_assembly = synthesized
    assert assets.entry_point == "pcs-user-data.sh"
    bucket = "cdk-hnb659fds-assets-111111111111-us-east-1"
    node = assets.node_bootstrap
    assert node.entry_point == "pcs-user-data.sh"
    assert stack.resolve(node.bucket.bucket_name) == bucket
    assert stack.resolve(node.s3_url) == f"s3://{bucket}/{node.object_key}"
    assert node.object_key.endswith(".zip")
    assert assets.asset.is_zip_archive
    manifest = json.loads((cloud_assembly / "Bootstrap.assets.json").read_text())
    entry = manifest["files"][assets.asset.asset_hash]
    assert entry["source"]["packaging"] == "zip"
    assert [d["objectKey"] for d in entry["destinations"].values()] == [node.object_key]
    staged = cloud_assembly / entry["source"]["path"]
    assert (staged / "pcs-user-data.sh").is_file() and (staged / "bundle.env").is_file()
    assert assets.unverified_artifacts == ()


def test_grant_read_lets_the_node_role_get_the_bundle_and_nothing_else(synthesized):
    stack, assets, role, template, _ = synthesized
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": stack.get_logical_id(role.node.default_child)}],
            "PolicyDocument": {
                "Statement": assertions.Match.array_with(
                    [
                        {
                            "Action": "s3:GetObject",
                            "Effect": "Allow",
                            "Resource": stack.resolve(assets.node_bootstrap.object_arn),
                        }
                    ]
                )
            },
        },
    )


def test_props_refuse_the_local_target():
    with pytest.raises(ValueError, match="config.target: got 'local', allowed: pcs, parallelcluster, hyperpod, eks"):
        BootstrapAssetsProps(config=local_config())
    with pytest.raises(ValueError, match="config: got dict, allowed"):
        BootstrapAssetsProps(config={"target": "pcs"})
