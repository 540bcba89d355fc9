"""kiln's names for what `cdk bootstrap` creates are the ones aws-cdk-lib's DefaultStackSynthesizer deploys with."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from kiln.contracts.cdk_bootstrap import (
    CDK_BOOTSTRAP_ROLES,
    CFN_EXECUTION_ROLE,
    DEFAULT_CDK_QUALIFIER,
    bootstrap_role_name,
)

SYNTHESIZER = cdk.DefaultStackSynthesizer
ROLE_ARNS = {
    CFN_EXECUTION_ROLE: SYNTHESIZER.DEFAULT_CLOUDFORMATION_ROLE_ARN,
    "deploy-role": SYNTHESIZER.DEFAULT_DEPLOY_ROLE_ARN,
    "file-publishing-role": SYNTHESIZER.DEFAULT_FILE_ASSET_PUBLISHING_ROLE_ARN,
    "image-publishing-role": SYNTHESIZER.DEFAULT_IMAGE_ASSET_PUBLISHING_ROLE_ARN,
    "lookup-role": SYNTHESIZER.DEFAULT_LOOKUP_ROLE_ARN,
}


def test_the_qualifier_is_the_synthesizers() -> None:
    assert DEFAULT_CDK_QUALIFIER == SYNTHESIZER.DEFAULT_QUALIFIER


def test_the_roles_are_the_synthesizers_and_none_is_missing() -> None:
    assert set(ROLE_ARNS) == {CFN_EXECUTION_ROLE, *CDK_BOOTSTRAP_ROLES}


@pytest.mark.parametrize("kind", sorted(ROLE_ARNS))
def test_each_role_name_is_the_one_the_synthesizer_assumes(kind: str) -> None:
    name = bootstrap_role_name(kind, "${AWS::AccountId}", "${AWS::Region}", "${Qualifier}")
    assert ROLE_ARNS[kind] == f"arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{name}"
