"""The bootstrap check: a CDK execution role holding AdministratorAccess is a warning, never a failure (moto's IAM)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from kiln.contracts.cdk_bootstrap import CFN_EXECUTION_ROLE, bootstrap_role_name
from kiln.preflight.aws import AwsClients
from kiln.preflight.checks import bootstrap
from kiln.preflight.findings import BLOCKING
from kiln.preflight.run import all_checks, run_preflight
from tests.support.fake_aws import ACCOUNT, REGION
from tests.support.preflight import client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

ROLE = f"cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "cloudformation.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


@pytest.fixture
def managed(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsClients]:
    """Clients on a moto account whose IAM knows AWS's managed policies (AdministratorAccess among them)."""
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    with mock_aws():
        yield AwsClients.from_session(boto3.Session(region_name=REGION), REGION)


def _execution_role(aws, *policy_arns: str) -> None:
    """Make the role `cdk bootstrap` makes, with POLICY_ARNS attached."""
    aws.iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(TRUST))
    for arn in policy_arns:
        aws.iam.attach_role_policy(RoleName=ROLE, PolicyArn=arn)


def _scoped_policy(aws, name: str) -> str:
    document = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]}
    return aws.iam.create_policy(PolicyName=name, PolicyDocument=json.dumps(document))["Policy"]["Arn"]


def test_the_role_name_is_cdks() -> None:
    assert (
        bootstrap_role_name(CFN_EXECUTION_ROLE, "111111111111", "eu-west-1")
        == "cdk-hnb659fds-cfn-exec-role-111111111111-eu-west-1"
    )
    assert bootstrap_role_name(CFN_EXECUTION_ROLE, "1", "r", "abc") == "cdk-abc-cfn-exec-role-1-r"
    assert bootstrap_role_name("lookup-role", "1", "*") == "cdk-hnb659fds-lookup-role-1-*"
    with pytest.raises(ValueError, match="^kind: got 'admin-role'; allowed: cfn-exec-role, deploy-role"):
        bootstrap_role_name("admin-role", "1", "r")


def test_a_default_bootstrap_with_administrator_access_is_a_warning(managed: AwsClients) -> None:
    _execution_role(managed, "arn:aws:iam::aws:policy/AdministratorAccess")
    (finding,) = bootstrap.check(make_plan(), managed)
    assert finding.status == "warn"
    assert finding.line().startswith(
        f"WARN      bootstrap: CDK bootstrap execution role {ROLE}: has AdministratorAccess: whoever may deploy"
    )
    assert "--cloudformation-execution-policies" in finding.remedy


def test_scoped_execution_policies_are_ok(aws) -> None:
    # A customer policy that merely shares the name is not AWS's AdministratorAccess.
    arns = [_scoped_policy(aws, "kiln-ci-exec-o-r-1"), _scoped_policy(aws, "AdministratorAccess")]
    _execution_role(aws, *arns)
    (finding,) = bootstrap.check(make_plan(), aws)
    assert finding.status == "ok"
    assert finding.message == "no AdministratorAccess (managed policies: AdministratorAccess, kiln-ci-exec-o-r-1)"


def test_an_unbootstrapped_region_is_a_warning(aws) -> None:
    (finding,) = bootstrap.check(make_plan(), aws)
    assert finding.status == "warn"
    assert finding.message.startswith(f"not found: {REGION} is not bootstrapped with CDK's default qualifier")


@pytest.mark.parametrize("code", ["AccessDenied", "Throttling"])
def test_a_refused_question_warns_and_blocks_nothing(aws, code: str) -> None:
    clients, stubber = stubbed(aws, "iam")
    stubber.add_client_error("list_attached_role_policies", **client_error(code))
    with stubber:
        (finding,) = bootstrap.check(make_plan(), clients)
    assert finding.status == "warn" and finding.status not in BLOCKING
    assert finding.message.startswith("not checked: iam:ListAttachedRolePolicies")
    assert "iam:ListAttachedRolePolicies" in finding.remedy


def test_the_warning_leaves_the_account_ready(managed: AwsClients) -> None:
    _execution_role(managed, "arn:aws:iam::aws:policy/AdministratorAccess")
    report = run_preflight(make_plan(), managed, skip=[c.name for c in all_checks() if c.name != "bootstrap"])
    (warning,) = [f for f in report.findings if f.check == "bootstrap"]
    assert warning.status == "warn" and report.ready
