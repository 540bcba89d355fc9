"""The IAM policy the README documents for `kiln connect` (kiln.connect.iam) is what the command does: every AWS call
kiln makes on each platform is granted and every grant kiln is said to use is called; every session the AWS CLI starts
is allowed on its target (the node's own tags meet the grant's condition) and with its document."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from kiln.catalog.platforms import service_fact
from kiln.connect import iam
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import session_document
from tests.support.connect import (
    Tools,
)
from tests.support.connect_scenarios import (
    SCENARIOS,
    Recorded,
    _filled,
)
from tests.support.fake_aws import ACCOUNT, REGION

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning")


@pytest.mark.parametrize("platform", iam.PLATFORMS)
def test_the_documented_policy_is_what_kiln_connect_calls(
    account: None, tools: Tools, tmp_path: Path, platform: iam.Platform
) -> None:
    recorded = Recorded()
    values = {"REGION": REGION, "ACCOUNT": ACCOUNT, "CLUSTER": "lab", **SCENARIOS[platform](recorded, tmp_path)}
    # kiln's own calls: exactly those the policy says kiln makes on this platform.
    assert recorded.actions == iam.calls(platform, iam.KILN)
    # Each session the AWS CLI started: its document and its target are granted ssm:StartSession.
    sessions = [argv for argv in tools.argvs() if argv[:3] == ["aws", "ssm", "start-session"]]
    assert sessions
    documents = set()
    for argv in sessions:
        documents.add(
            argv[argv.index("--document-name") + 1] if "--document-name" in argv else "SSM-SessionManagerRunShell"
        )
        assert _target_granted(platform, argv[argv.index("--target") + 1], values), argv
    assert documents == iam.session_documents(platform)
    assert iam.calls(platform, iam.CLI) == {"ssm:StartSession"}


def test_a_logged_clusters_policy_opens_no_unlogged_shell() -> None:
    """With session_logs the policy grants the cluster's document and its key, never the account's default shell; and
    every statement that allows ssm:StartSession checks the document, so leaving --document-name out is refused."""
    logged = [s for s in iam.policy(session_logs=True)["Statement"]]
    starts = [s for s in iam.policy()["Statement"] if "ssm:StartSession" in s["Action"]]
    assert starts and all(s["Condition"]["BoolIfExists"] == {"ssm:SessionDocumentAccessCheck": "true"} for s in starts)
    shell = "arn:aws:ssm:REGION:ACCOUNT:document/SSM-SessionManagerRunShell"
    assert all(shell not in json.dumps(s["Resource"]) for s in logged)
    [key] = [s for s in logged if s["Action"] == "kms:GenerateDataKey"]
    assert key["Resource"] == "SESSION_KEY_ARN" and key["Sid"] == "SessionKey"
    # The action whoever starts a session needs, as platforms.json records it from AWS's page.
    user = service_fact("systems_manager", "session_logging").value["user_actions"]["session_encryption"]
    assert [key["Action"]] == user
    [document] = [s for s in logged if s["Sid"] == "LoggedShellDocument"]
    assert document["Resource"] == f"arn:aws:ssm:REGION:ACCOUNT:document/{session_document('CLUSTER')}"
    # The placeholder is the compute stack's output kiln writes.
    assert ComputeOutput.SESSION_KEY_ARN.value == "SessionKeyArn"
    # Without session_logs the policy has neither, and grants the default shell.
    plain = json.dumps(iam.policy(session_logs=False))
    assert "SESSION_KEY_ARN" not in plain and "kiln-CLUSTER-session" not in plain and shell in plain


def _target_granted(platform: iam.Platform, target: str, values: dict[str, str]) -> bool:
    """Whether a StartSession grant of PLATFORM covers TARGET: a HyperPod node by its cluster's ARN, an instance by
    a condition its own tags (as EC2 describes them) meet."""
    starts = [grant for grant in iam.grants(platform) if "ssm:StartSession" in grant.calls]
    if target.startswith("sagemaker-cluster:"):
        cluster_id = target.split(":", 1)[1].split("_", 1)[0]
        arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{cluster_id}"
        return any(_filled(resource, values) == arn for grant in starts for resource in grant.resources)
    [reservation] = boto3.client("ec2", region_name=REGION).describe_instances(InstanceIds=[target])["Reservations"]
    tags = {tag["Key"]: tag["Value"] for tag in reservation["Instances"][0].get("Tags", [])}
    for grant in starts:
        if iam.EC2_NODES not in grant.resources:
            continue
        wanted = grant.condition.get("StringEquals", {})
        if all(
            tags.get(key.removeprefix("ssm:resourceTag/"))
            in ([_filled(v, values) for v in value] if isinstance(value, list) else [_filled(value, values)])
            for key, value in wanted.items()
        ):
            return True
    return False


def test_every_action_the_aws_cli_and_its_plugin_are_granted_is_an_ssm_operation() -> None:
    # ssmmessages has no public API model; the rest must be Systems Manager operations, spelled as AWS spells them.
    operations = boto3.client("ssm", region_name=REGION).meta.service_model.operation_names
    named = {action for grant in iam.GRANTS for action in grant.calls if action.startswith("ssm:")}
    assert named == {"ssm:StartSession", "ssm:ResumeSession", "ssm:TerminateSession"}
    assert {action.split(":", 1)[1] for action in named} <= set(operations)


def test_the_policy_renders_as_one_iam_document_with_unique_statement_ids() -> None:
    document = iam.policy()
    sids = [statement["Sid"] for statement in document["Statement"]]
    assert document["Version"] == "2012-10-17" and len(sids) == len(set(sids)) == len(iam.GRANTS)
    assert all(sid.isalnum() for sid in sids)  # IAM's Sid: letters and digits only
    # Each platform's policy is its statements only.
    for platform in iam.PLATFORMS:
        assert {s["Sid"] for s in iam.policy(platform)["Statement"]} == {g.sid for g in iam.grants(platform)}


def test_the_readme_shows_the_policy_kiln_connect_needs() -> None:
    """The README's "IAM for `kiln connect`" block is the policy as data, byte for byte."""
    from kiln.connect import iam
    from tests.support.paths import ROOT

    assert "```json\n" + iam.policy_text() + "```" in (ROOT / "README.md").read_text()
