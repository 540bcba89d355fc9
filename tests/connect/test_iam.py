"""The IAM policy the README documents for `kiln connect` (kiln.connect.iam) is what the command does: every AWS call
kiln makes on each platform is granted and every grant kiln is said to use is called; every session the AWS CLI starts
is allowed on its target (the node's own tags meet the grant's condition) and with its document."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws
from moto.moto_api._internal import moto_api_backend

from kiln.aws.remote.nodes import PARALLELCLUSTER_NAME_TAG, PARALLELCLUSTER_NODE_TYPE_TAG, PCS_NODE_GROUP_TAG
from kiln.catalog.platforms import service_fact
from kiln.connect import iam
from kiln.connect.run import Request, connect, prepare
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import session_document
from kiln.spec import load_spec
from tests.connect.conftest import (
    ACCOUNT,
    REGION,
    CtrlC,
    StubbedSession,
    Tools,
    compute_stack,
    free_port,
    hyperpod_cluster,
    node,
    pcs_cluster,
    stubbed_ssm,
    write_spec,
)

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning")


class Recorded:
    """The IAM actions of the boto3 calls made through the clients it watches while kiln connect runs (not the
    test's own calls that build the account)."""

    def __init__(self) -> None:
        self.actions: set[str] = set()
        self.active = False

    def watch(self, events: Any) -> None:
        events.register("before-parameter-build", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        if self.active:
            self.actions.add(f"{model.service_model.signing_name}:{model.name}")


def run(session: Any, spec: Path, recorded: Recorded, **fields: Any) -> None:
    """Run kiln connect on SPEC as the CLI does (Ctrl-C ending a forward), recording the calls of SESSION's clients."""
    loaded = load_spec(spec)
    request = Request(spec_path=str(spec), **fields)
    out = io.StringIO()
    recorded.active = True
    try:
        with CtrlC(out) if request.vscode else _Quiet():
            assert connect(loaded, request, prepare(loaded, request), session, out=out, err=io.StringIO()) == 0
    finally:
        recorded.active = False


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def recording_session(recorded: Recorded) -> tuple[boto3.Session, Any, Any]:
    """Return a moto session whose calls RECORDED sees, and a stubbed SSM client for TerminateSession (watched too)."""
    core = botocore.session.Session()
    recorded.watch(core.get_component("event_emitter"))
    session = boto3.Session(botocore_session=core, region_name=REGION)
    client, stub = stubbed_ssm()
    recorded.watch(client.meta.events)
    return session, client, stub


# One scenario per way kiln connect reaches a platform; each returns the tags of the EC2 nodes it may reach and the
# placeholders' values.
Scenario = Callable[[Recorded, Path], dict[str, str]]


def pcs(recorded: Recorded, directory: Path) -> dict[str, str]:
    session, client, stub = recording_session(recorded)
    pcs_cluster(session)
    node({PCS_NODE_GROUP_TAG: "pcs_login"})
    spec = write_spec(directory, "pcs")
    run(session, spec, recorded)
    with stub:
        run(StubbedSession(session, ssm=client), spec, recorded, vscode=True, local_port=free_port())
    return {"PCS_LOGIN_NODE_GROUP_ID": "pcs_login"}


def parallelcluster(recorded: Recorded, directory: Path) -> dict[str, str]:
    session, client, stub = recording_session(recorded)
    compute_stack(session, {"Backend": "parallelcluster", "Orchestrator": "none", "ClusterName": "lab"})
    for kind in ("HeadNode", "LoginNode"):
        node({PARALLELCLUSTER_NAME_TAG: "lab", PARALLELCLUSTER_NODE_TYPE_TAG: kind})
    run(session, write_spec(directory, "parallelcluster", login=1), recorded)
    with stub:
        spec = write_spec(directory, "parallelcluster", login=0)
        run(StubbedSession(session, ssm=client), spec, recorded, vscode=True, local_port=free_port())
    return {}


def hyperpod_slurm(recorded: Recorded, directory: Path) -> dict[str, str]:
    session, client, stub = recording_session(recorded)
    arn = hyperpod_cluster(session, {"controller": 1, "login": 1})
    run(session, write_spec(directory, "hyperpod", login=1), recorded)
    with stub:
        spec = write_spec(directory, "hyperpod", login=0)
        run(StubbedSession(session, ssm=client), spec, recorded, vscode=True, local_port=free_port())
    return {"HYPERPOD_CLUSTER_ID": arn.rsplit("/", 1)[1]}


def kubernetes(recorded: Recorded, directory: Path) -> dict[str, str]:
    # A public endpoint (the kubeconfig names it), then a private one (reached through a system node), each in an
    # account of its own.
    for public in (True, False):
        moto_api_backend.reset()
        session, client, stub = recording_session(recorded)
        access = {"subnetIds": ["subnet-1"], "endpointPublicAccess": public, "endpointPrivateAccess": True}
        session.client("eks").create_cluster(
            name="lab", roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig=access
        )
        compute_stack(
            session, {"Backend": "eks", "Orchestrator": "none", "ClusterName": "lab", "EksClusterName": "lab"}
        )
        node({"kiln:eks-cluster": "lab", "kiln:node-group": "system"})
        spec = write_spec(directory, "eks")
        if public:
            run(session, spec, recorded, vscode=True, local_port=free_port())
            continue
        with stub:
            run(StubbedSession(session, ssm=client), spec, recorded, vscode=True, local_port=free_port())
    return {}


SCENARIOS: dict[iam.Platform, Scenario] = {
    "pcs": pcs,
    "parallelcluster": parallelcluster,
    "hyperpod-slurm": hyperpod_slurm,
    "kubernetes": kubernetes,
}


@pytest.fixture
def account(aws_env: None) -> Iterator[None]:
    with mock_aws():
        yield


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


def _filled(text: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        text = text.replace(name, value)
    return text


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
    from tests.conftest import ROOT

    assert "```json\n" + iam.policy_text() + "```" in (ROOT / "README.md").read_text()
