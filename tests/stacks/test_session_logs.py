"""session_logs on the Slurm backends (kiln.constructs.session_logs): the cluster's own Session document with S3 or
CloudWatch logging and KMS session encryption, the nodes' role granted exactly what logging needs (PCS's node role,
HyperPod's execution role, ParallelCluster's nodes through a managed policy its provider may attach), cdk-nag passing,
and the account's shared SSM-SessionManagerRunShell never touched."""

from __future__ import annotations

import json
import tempfile
from functools import lru_cache

import aws_cdk as cdk
import pytest
import yaml

from kiln.catalog.platforms import service_fact
from kiln.changes.parallelcluster import cluster_configuration, update_refusals
from kiln.constructs.parallelcluster import ATTACHABLE_PATH
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import DEFAULT_SHELL_DOCUMENT, session_document
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster
from kiln.stacks.feature_flags import FEATURE_FLAGS
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow

BUCKET = "workshop-data-logs-test"
ACTIONS = service_fact("systems_manager", "session_logging").value["node_actions"]
# The example of each Slurm backend, by the cluster name it sets.
EXAMPLES = {
    "workshop": "workshop-g6-pcs.yaml",
    "llm-pcluster": "p5-parallelcluster.yaml",
    "llm-hp-slurm": "p5-hyperpod-slurm.yaml",
}
# The destination each other backend is synthesized with (one each: the construct is the same everywhere).
OTHER_BACKENDS = [("llm-pcluster", "cloudwatch"), ("llm-hp-slurm", "s3")]


@lru_cache(maxsize=6)
def templates(destination: str | None, cluster: str = "workshop") -> dict[str, dict]:
    """Synthesize CLUSTER's example with session_logs DESTINATION (None: without), cdk-nag on."""
    data = yaml.safe_load((ROOT / "examples" / EXAMPLES[cluster]).read_text())
    if destination is not None:
        data["session_logs"] = {"destination": destination}
        data.setdefault("storage", {}).setdefault("bucket", {})["name"] = BUCKET
    spec = parse_spec(data)
    spec._source_dir = ROOT / "examples"
    app = cdk.App(outdir=tempfile.mkdtemp(prefix="kiln-session-logs-"), context=dict(FEATURE_FLAGS))
    build_cluster(app, spec, nag=True)  # an unreviewed wildcard fails synthesis here
    return {stack.stack_name: stack.template for stack in app.synth().stacks}


def resources(destination: str | None, kind: str) -> dict[str, dict]:
    return {
        f"{stack}/{name}": resource
        for stack, template in templates(destination).items()
        for name, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


@pytest.mark.parametrize("destination", ["s3", "cloudwatch"])
def test_the_cluster_gets_a_session_document_of_its_own(destination: str) -> None:
    [(path, document)] = resources(destination, "AWS::SSM::Document").items()
    properties = document["Properties"]
    assert path.startswith("workshop-compute/")
    assert properties["Name"] == session_document("workshop") == "kiln-workshop-session"
    assert properties["DocumentType"] == "Session" and properties["DocumentFormat"] == "JSON"
    content = properties["Content"]
    assert content["sessionType"] == "Standard_Stream" and content["schemaVersion"] == "1.0"
    inputs = content["inputs"]
    [key] = [
        name for name in templates(destination)["workshop-compute"]["Resources"] if name.startswith("SessionLogsKey")
    ]
    assert inputs["kmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    if destination == "s3":
        assert (inputs["s3BucketName"], inputs["s3KeyPrefix"], inputs["s3EncryptionEnabled"]) == (
            BUCKET,
            "session-logs",
            True,
        )
        assert inputs["cloudWatchLogGroupName"] == "" and inputs["cloudWatchEncryptionEnabled"] is False
    else:
        [group] = [(p, r) for p, r in resources(destination, "AWS::Logs::LogGroup").items() if "SessionLogs" in p]
        assert group[1]["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
        assert inputs["cloudWatchLogGroupName"] == {"Ref": group[0].split("/")[1]}
        assert inputs["cloudWatchEncryptionEnabled"] is True and inputs["s3BucketName"] == ""


@pytest.mark.parametrize("destination", ["s3", "cloudwatch"])
def test_the_nodes_role_gets_exactly_what_logging_needs(destination: str) -> None:
    compute = templates(destination)["workshop-compute"]["Resources"]
    [(name, policy)] = [(n, r) for n, r in compute.items() if r["Type"] == "AWS::IAM::Policy" and "SessionLogs" in n]
    [role] = policy["Properties"]["Roles"]
    assert compute[role["Ref"]]["Type"] == "AWS::IAM::Role" and role["Ref"].startswith("PcsNodeRole")
    granted = {}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            granted[action] = json.dumps(statement["Resource"], sort_keys=True)
    expected = set(ACTIONS["session_encryption"]) | set(ACTIONS[destination])
    assert set(granted) == expected
    assert "SessionLogsKey" in granted["kms:Decrypt"]
    if destination == "s3":
        assert json.loads(granted["s3:PutObject"]) == f"arn:aws:s3:::{BUCKET}/session-logs/*"
        assert json.loads(granted["s3:GetEncryptionConfiguration"]) == f"arn:aws:s3:::{BUCKET}"
    else:
        for action in ("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"):
            assert json.loads(granted[action])["Fn::GetAtt"][0].startswith("SessionLogs"), action
        assert granted["logs:DescribeLogGroups"].endswith(':log-group:*"]]}')


def test_without_session_logs_there_is_no_document_and_nothing_names_the_accounts_own() -> None:
    assert resources(None, "AWS::SSM::Document") == {}
    for destination in (None, "s3", "cloudwatch"):
        for stack, template in templates(destination).items():
            assert DEFAULT_SHELL_DOCUMENT not in json.dumps(template), (destination, stack)


def _granted(statements: list[dict]) -> dict[str, str]:
    """Return each action the statements allow, with its resources as JSON."""
    granted = {}
    for statement in statements:
        assert statement["Effect"] == "Allow" and "Condition" not in statement
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            granted[action] = json.dumps(statement["Resource"], sort_keys=True)
    return granted


@pytest.mark.parametrize(("cluster", "destination"), OTHER_BACKENDS)
def test_every_slurm_backend_gets_the_document_and_its_key(cluster: str, destination: str) -> None:
    compute = templates(destination, cluster)[f"{cluster}-compute"]
    [document] = [r for r in compute["Resources"].values() if r["Type"] == "AWS::SSM::Document"]
    assert document["Properties"]["Name"] == session_document(cluster) == f"kiln-{cluster}-session"
    [key] = [n for n, r in compute["Resources"].items() if r["Type"] == "AWS::KMS::Key" and n.startswith("Session")]
    assert document["Properties"]["Content"]["inputs"]["kmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    # kiln connect's users need kms:GenerateDataKey on it: the output names it.
    assert compute["Outputs"][ComputeOutput.SESSION_KEY_ARN.value]["Value"] == {"Fn::GetAtt": [key, "Arn"]}
    assert templates(None, cluster)[f"{cluster}-compute"]["Outputs"].get(ComputeOutput.SESSION_KEY_ARN.value) is None


def test_hyperpod_grants_its_execution_role_what_logging_needs() -> None:
    # SSM Agent on HyperPod's nodes acts with the instance groups' execution role (AmazonSageMakerClusterInstance-
    # RolePolicy gives that role the ssmmessages channels): the grants go there.
    compute = templates("s3", "llm-hp-slurm")["llm-hp-slurm-compute"]["Resources"]
    [policy] = [r for n, r in compute.items() if r["Type"] == "AWS::IAM::Policy" and n.startswith("SessionLogs")]
    [role] = policy["Properties"]["Roles"]
    [cluster] = [r for r in compute.values() if r["Type"] == "AWS::SageMaker::Cluster"]
    roles = {group["ExecutionRole"]["Fn::GetAtt"][0] for group in cluster["Properties"]["InstanceGroups"]}
    assert roles == {role["Ref"]} and role["Ref"].startswith("HyperPodExecutionRole")
    granted = _granted(policy["Properties"]["PolicyDocument"]["Statement"])
    assert set(granted) == set(ACTIONS["session_encryption"]) | set(ACTIONS["s3"])
    assert json.loads(granted["s3:PutObject"]) == f"arn:aws:s3:::{BUCKET}/session-logs/*"


def test_parallelcluster_attaches_an_attachable_policy_to_every_node() -> None:
    # The provider's Lambda role attaches only policies under ATTACHABLE_PATH; every node a session may reach (head,
    # login pool, queues) carries it, beside the policies it carries without session_logs.
    template = templates("cloudwatch", "llm-pcluster")["llm-pcluster-compute"]
    compute = template["Resources"]
    [(name, policy)] = [
        (n, r) for n, r in compute.items() if r["Type"] == "AWS::IAM::ManagedPolicy" and n.startswith("SessionLogs")
    ]
    assert policy["Properties"]["Path"] == ATTACHABLE_PATH
    granted = _granted(policy["Properties"]["PolicyDocument"]["Statement"])
    assert set(granted) == set(ACTIONS["session_encryption"]) | set(ACTIONS["cloudwatch"])
    config = cluster_configuration(template)
    before = cluster_configuration(templates(None, "llm-pcluster")["llm-pcluster-compute"])
    assert config is not None and before is not None
    places = [config["HeadNode"], *config["LoginNodes"]["Pools"], *config["Scheduling"]["SlurmQueues"]]
    old = [before["HeadNode"], *before["LoginNodes"]["Pools"], *before["Scheduling"]["SlurmQueues"]]
    assert len(places) == 4
    for place, without in zip(places, old, strict=True):
        attached = [entry["Policy"] for entry in place["Iam"]["AdditionalIamPolicies"]]
        assert {"Ref": name} in attached, place.get("Name", "HeadNode")
        assert [p for p in attached if p != {"Ref": name}] == [
            e["Policy"] for e in without["Iam"]["AdditionalIamPolicies"]
        ]
    # Added to a running cluster, only the login pool's new policy waits for the pool to stop (the README says so).
    [refusal] = update_refusals(before, config, "llm-pcluster")
    assert "LoginNodes/Pools[login]/Iam/AdditionalIamPolicies" in refusal and "LOGIN_NODES_POOL_STOP" in refusal
