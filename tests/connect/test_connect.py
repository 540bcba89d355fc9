"""`kiln connect`: which node each platform's shell and code-server go to, the exact programs kiln runs there, what it
prints, and that Ctrl-C leaves nothing running. AWS is moto (SSM's sessions through a Stubber: moto has none); the AWS
CLI, its plugin and kubectl are stand-ins on PATH that record their arguments and really listen on the local port."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from kiln.aws.remote.cluster import RemoteError
from kiln.aws.remote.nodes import PARALLELCLUSTER_NAME_TAG, PARALLELCLUSTER_NODE_TYPE_TAG, PCS_NODE_GROUP_TAG
from kiln.cli.main import main
from kiln.connect.run import Request, connect, prepare
from kiln.contracts.backends import HYPERPOD_CONTROLLER_GROUP, HYPERPOD_LOGIN_GROUP
from kiln.spec import load_spec
from tests.support.ci import running
from tests.support.connect import (
    CtrlC,
    StubbedSession,
    Tools,
    compute_stack,
    free_port,
    hyperpod_cluster,
    install_tools,
    node,
    pcs_cluster,
    run_connect,
    start_session,
    stubbed_ssm,
    write_spec,
)
from tests.support.credentials import MISSING_PROFILE, REMEDY, SITUATIONS
from tests.support.fake_aws import REGION
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle:UserWarning"),
]

AWS_CLI_PAGE = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
PLUGIN_PAGE = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
)
KUBECTL_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/install-kubectl.html"


def cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `kiln ARGV...`; return the exit code, stdout and stderr."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# The shell: which node, and the exact command.


def test_pcs_opens_a_shell_on_a_running_login_node_and_returns_its_exit_code(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcs_cluster(moto)
    node({PCS_NODE_GROUP_TAG: "pcs_login"}, state="stopped")
    node({PCS_NODE_GROUP_TAG: "pcs_gpu"})
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    monkeypatch.setenv("FAKE_SHELL", "exit:7")
    code, out, err = run_connect(moto, write_spec(tmp_path, "pcs"))
    assert code == 7
    assert tools.argvs() == [start_session(login)]
    assert (out, err) == ("", f"kiln connect: a Session Manager shell on PCS login node {login}; `exit` ends it\n")


def test_the_oldest_running_node_is_chosen(tools: Tools, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    stub = Stubber(ec2)
    older, newer = "i-0bbbbbbbbbbbbbbbb", "i-0aaaaaaaaaaaaaaaa"

    def instance(ident: str, hour: int) -> dict[str, Any]:
        return {"InstanceId": ident, "LaunchTime": datetime(2026, 1, 1, hour, tzinfo=timezone.utc)}

    filters = [
        {"Name": "tag:aws:pcs:compute-node-group-id", "Values": ["pcs_login"]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    response = {"Reservations": [{"Instances": [instance(newer, 9)]}, {"Instances": [instance(older, 8)]}]}
    stub.add_response("describe_instances", response, {"Filters": filters})
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cf_stub = Stubber(cloudformation)
    outputs = {"Backend": "pcs", "Orchestrator": "none", "ClusterName": "lab", "PcsLoginNodeGroupId": "pcs_login"}
    stack = {
        "StackName": "lab-compute",
        "CreationTime": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
    }
    cf_stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "lab-compute"})
    session = StubbedSession(boto3.Session(region_name=REGION), ec2=ec2, cloudformation=cloudformation)
    with stub, cf_stub:
        code, _, _ = run_connect(session, write_spec(tmp_path, "pcs"))
    assert code == 0
    assert tools.argvs() == [start_session(older)]


@pytest.mark.parametrize(("login", "node_type", "kind"), [(1, "LoginNode", "login node"), (0, "HeadNode", "head node")])
def test_parallelcluster_opens_a_shell_on_a_login_node_or_else_the_head_node(
    moto: boto3.Session, tools: Tools, tmp_path: Path, login: int, node_type: str, kind: str
) -> None:
    compute_stack(moto, {"Backend": "parallelcluster", "Orchestrator": "none", "ClusterName": "lab"})
    name, kind_tag = PARALLELCLUSTER_NAME_TAG, PARALLELCLUSTER_NODE_TYPE_TAG
    pool = "parallelcluster:login-nodes-pool-name"
    nodes = {
        "LoginNode": node({name: "lab", kind_tag: "LoginNode", pool: "login"}),
        "HeadNode": node({name: "lab", kind_tag: "HeadNode"}),
    }
    node({name: "lab", kind_tag: "Compute"})
    node({name: "other", kind_tag: node_type})
    code, _, err = run_connect(moto, write_spec(tmp_path, "parallelcluster", login=login))
    assert code == 0
    assert tools.argvs() == [start_session(nodes[node_type])]
    assert f"a Session Manager shell on ParallelCluster {kind} {nodes[node_type]};" in err


@pytest.mark.parametrize(("login", "group"), [(1, "login"), (0, "controller")])
def test_hyperpod_opens_a_shell_on_the_login_group_or_else_the_controller(
    moto: boto3.Session, tools: Tools, tmp_path: Path, login: int, group: str
) -> None:
    arn = hyperpod_cluster(moto, {"controller": 1, "login": 2, "gpu": 1} if login else {"controller": 1, "gpu": 1})
    code, _, err = run_connect(moto, write_spec(tmp_path, "hyperpod", login=login))
    cluster_id = arn.rsplit("/", 1)[1]
    assert code == 0
    assert tools.argvs() == [start_session(f"sagemaker-cluster:{cluster_id}_{group}-{group}-0")]
    assert f"a Session Manager shell on HyperPod {group} node {group}-0;" in err


def test_node_picks_one_of_the_running_candidates(moto: boto3.Session, tools: Tools, tmp_path: Path) -> None:
    pcs_cluster(moto)
    node({PCS_NODE_GROUP_TAG: "pcs_login"})
    second = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    code, _, _ = run_connect(moto, write_spec(tmp_path, "pcs"), node=second)
    assert code == 0
    assert tools.argvs() == [start_session(second)]


def test_node_picks_a_hyperpod_node_by_its_instance_id(moto: boto3.Session, tools: Tools, tmp_path: Path) -> None:
    arn = hyperpod_cluster(moto, {"controller": 1, "login": 2})
    code, _, _ = run_connect(moto, write_spec(tmp_path, "hyperpod"), node="login-1")
    assert code == 0
    assert tools.argvs() == [start_session(f"sagemaker-cluster:{arn.rsplit('/', 1)[1]}_login-login-1")]


def test_a_node_that_is_not_a_running_candidate_is_refused_in_one_line(
    moto: boto3.Session, tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    stopped = node({PCS_NODE_GROUP_TAG: "pcs_login"}, state="stopped")
    spec = write_spec(tmp_path, "pcs")
    code, out, err = cli("connect", "--spec", str(spec), "--node", stopped, capsys=capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"kiln connect: --node {stopped}: not a running PCS login node of node group pcs_login; running: {login}\n"
    )
    assert tools.argvs() == []


# code-server: the forward, what kiln prints, and Ctrl-C.


def test_vscode_forwards_a_local_port_to_code_server_until_ctrl_c_and_leaves_nothing_running(
    moto: boto3.Session, tools: Tools, tmp_path: Path
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    port = free_port()
    client, stub = stubbed_ssm()
    spec = write_spec(tmp_path, "pcs")
    with stub:
        code, out, err = run_connect(StubbedSession(moto, ssm=client), spec, vscode=True, local_port=port)
        stub.assert_no_pending_responses()  # the session was ended
    assert code == 0
    [call] = tools.calls()
    assert call["argv"] == start_session(
        login,
        "--document-name",
        "AWS-StartPortForwardingSession",
        "--parameters",
        json.dumps({"portNumber": ["8080"], "localPortNumber": [str(port)]}),
    )
    kept_in = "/home/coder/.config/code-server/config.yaml"  # kiln's own user: no code_server.user
    assert out == (
        f"kiln connect: code-server on PCS login node {login}: http://127.0.0.1:{port}/ (Ctrl-C ends the forward)\n"
        f"kiln connect: its password is in {kept_in} on {login}: run `kiln connect --spec {spec} --node {login}`, "
        f"then `sudo cat {kept_in}`\n"
    )
    assert err == f"kiln connect: stopped the forward to PCS login node {login}\n"
    assert running(call["pids"]) == []


def test_vscode_on_hyperpod_forwards_to_the_login_node_and_names_the_spec_s_user(
    moto: boto3.Session, tools: Tools, tmp_path: Path
) -> None:
    arn = hyperpod_cluster(moto, {"controller": 1, "login": 1})
    target = f"sagemaker-cluster:{arn.rsplit('/', 1)[1]}_login-login-0"
    client, stub = stubbed_ssm()
    spec = write_spec(tmp_path, "hyperpod", user="alice")
    port = free_port()
    with stub:
        code, out, _ = run_connect(StubbedSession(moto, ssm=client), spec, vscode=True, local_port=port, region=REGION)
    [call] = tools.calls()
    assert code == 0
    assert call["argv"][:5] == ["aws", "ssm", "start-session", "--target", target]
    assert call["argv"][5:7] == ["--document-name", "AWS-StartPortForwardingSession"]
    kept_in = "/home/alice/.config/code-server/config.yaml"
    assert out.splitlines()[1] == (
        f"kiln connect: its password is in {kept_in} on login-0: run `kiln connect --spec {spec} --region {REGION} "
        f"--node login-0`, then `sudo cat {kept_in}`"
    )
    assert running(call["pids"]) == []


def test_the_code_server_url_answers_while_the_forward_runs(moto: boto3.Session, tools: Tools, tmp_path: Path) -> None:
    compute_stack(moto, {"Backend": "parallelcluster", "Orchestrator": "none", "ClusterName": "lab"})
    head = node({PARALLELCLUSTER_NAME_TAG: "lab", PARALLELCLUSTER_NODE_TYPE_TAG: "HeadNode"})
    client, stub = stubbed_ssm()
    spec = write_spec(tmp_path, "parallelcluster", login=0)
    session = StubbedSession(moto, ssm=client)
    request = Request(spec_path=str(spec), vscode=True, local_port=free_port())
    out, err = io.StringIO(), io.StringIO()
    loaded = load_spec(spec)
    with stub, CtrlC(out) as ctrl_c:
        code = connect(loaded, request, prepare(loaded, request), session, out=out, err=err, poll_s=0.05)
    assert code == 0 and ctrl_c.sent
    # What the stand-in forwarded the request to: the node's own code-server port (no remote host).
    assert ctrl_c.answers == [{"to": "the node", "port": "8080"}]
    assert f"code-server on ParallelCluster head node {head}:" in out.getvalue()


def test_a_forward_whose_session_ends_on_its_own_is_one_line(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    monkeypatch.setenv("FAKE_FORWARD", "end")
    client, stub = stubbed_ssm()
    spec = load_spec(write_spec(tmp_path, "pcs"))
    request = Request(spec_path="cluster.yaml", vscode=True, local_port=free_port())
    with stub, pytest.raises(RemoteError) as raised:
        connect(spec, request, "login", StubbedSession(moto, ssm=client), out=io.StringIO(), err=io.StringIO())
    assert str(raised.value) == (
        f"the port forward to PCS login node {login} ended on its own (Session ended: idle timeout): run kiln "
        "connect again"
    )
    assert running(tools.calls()[0]["pids"]) == []


def test_a_forward_the_aws_cli_refuses_is_one_line(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    said = (
        "An error occurred (AccessDeniedException) when calling the StartSession operation: User: x is not "
        "authorized to perform: ssm:StartSession on resource: "
        "arn:aws:ssm:us-east-1::document/AWS-StartPortForwardingSession"
    )
    monkeypatch.setenv("FAKE_FORWARD", said)
    spec = load_spec(write_spec(tmp_path, "pcs"))
    request = Request(spec_path="cluster.yaml", vscode=True, local_port=free_port())
    with pytest.raises(RemoteError) as raised:
        connect(spec, request, "login", moto, out=io.StringIO(), err=io.StringIO(), poll_s=0.05)
    assert str(raised.value) == f"aws ssm start-session to PCS login node {login} failed: {said}"
    assert running(tools.calls()[0]["pids"]) == []


# Kubernetes: no shell; kubectl port-forward with kiln's kubeconfig.


def eks_cluster(session: boto3.Session, *, public: bool, backend: str = "eks") -> dict[str, Any]:
    """Create EKS cluster lab (public or private endpoint) and the compute stack of BACKEND; return DescribeCluster."""
    eks = session.client("eks")
    access = {"subnetIds": ["subnet-1"], "endpointPublicAccess": public, "endpointPrivateAccess": True}
    eks.create_cluster(name="lab", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig=access)
    outputs = {"Backend": backend, "Orchestrator": "eks" if backend == "hyperpod" else "none", "ClusterName": "lab"}
    outputs["EksClusterName"] = "lab"
    if backend == "hyperpod":
        outputs["HyperPodClusterArn"] = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc123"
    compute_stack(session, outputs)
    return eks.describe_cluster(name="lab")["cluster"]


@pytest.mark.parametrize("platform", ["eks", "hyperpod-eks"])
def test_vscode_on_kubernetes_port_forwards_to_the_pod_with_a_kubeconfig_removed_after(
    moto: boto3.Session, tools: Tools, tmp_path: Path, platform: str
) -> None:
    described = eks_cluster(moto, public=True, backend="hyperpod" if platform == "hyperpod-eks" else "eks")
    port = free_port()
    code, out, err = run_connect(moto, write_spec(tmp_path, platform), vscode=True, local_port=port)
    assert code == 0
    [call] = tools.calls()
    assert call["argv"] == ["kubectl", "port-forward", "-n", "kiln-dev", "deployment/code-server", f"{port}:8080"]
    # The kubeconfig existed for kubectl, private to this user, naming the public endpoint; it is gone now.
    assert call["mode"] == "0o600"
    assert call["config"]["clusters"][0]["cluster"]["server"] == described["endpoint"]
    assert not Path(call["kubeconfig"]).exists()
    kept_in = "/home/coder/.config/code-server/config.yaml"
    assert out.splitlines() == [
        f"Forwarding from 127.0.0.1:{port} -> 8080",
        f"kiln connect: code-server on EKS cluster lab: http://127.0.0.1:{port}/ (Ctrl-C ends the forward)",
        f"kiln connect: its password is in {kept_in} in the pod: while this runs, `KUBECONFIG={call['kubeconfig']} "
        f"kubectl exec -n kiln-dev deployment/code-server -- cat {kept_in}` shows it",
        f"Forwarding from [::1]:{port} -> 8080",
    ]
    assert err == "kiln connect: stopped the forward to EKS cluster lab\n"
    assert running([call["pid"]]) == []


def test_vscode_on_a_private_eks_endpoint_forwards_through_a_system_node_too(
    moto: boto3.Session, tools: Tools, tmp_path: Path
) -> None:
    eks_cluster(moto, public=False)
    system = node({"kiln:eks-cluster": "lab", "kiln:node-group": "system"})
    client, stub = stubbed_ssm()
    with stub:
        code, _, _ = run_connect(
            StubbedSession(moto, ssm=client), write_spec(tmp_path, "eks"), vscode=True, local_port=free_port()
        )
        stub.assert_no_pending_responses()
    forward, kubectl = tools.calls()
    assert code == 0
    assert forward["argv"][:7] == [
        "aws",
        "ssm",
        "start-session",
        "--target",
        system,
        "--document-name",
        "AWS-StartPortForwardingSessionToRemoteHost",
    ]
    api_port = forward["parameters"]["localPortNumber"][0]
    assert kubectl["config"]["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{api_port}"
    assert running(forward["pids"] + [kubectl["pid"]]) == []


def test_a_kubectl_that_fails_is_one_line_after_its_own(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eks_cluster(moto, public=True)
    monkeypatch.setenv("FAKE_KUBECTL", 'error: deployments.apps "code-server" not found')
    spec = load_spec(write_spec(tmp_path, "eks"))
    request = Request(spec_path="cluster.yaml", vscode=True, local_port=free_port())
    err = io.StringIO()
    with pytest.raises(RemoteError) as raised:
        connect(spec, request, "pod", moto, out=io.StringIO(), err=err, poll_s=0.05)
    assert err.getvalue() == 'error: deployments.apps "code-server" not found\n'
    assert str(raised.value) == (
        "`kubectl port-forward` to deployment/code-server in kiln-dev on EKS cluster lab ended with exit code 1"
    )


@pytest.mark.parametrize("platform", ["eks", "hyperpod-eks"])
def test_kubernetes_has_no_shell_and_says_to_use_kubectl(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str], platform: str
) -> None:
    code, out, err = cli("connect", "--spec", str(write_spec(tmp_path, platform)), capsys=capsys)
    described = "an EKS" if platform == "eks" else "a HyperPod (EKS)"
    assert (code, out) == (2, "")
    assert err == (
        f"kiln connect: {described} cluster has no node to log in to: use kubectl (a kubeconfig from `aws eks "
        "update-kubeconfig --name lab`), or `kiln connect --vscode` for code-server\n"
    )
    assert tools.calls() == []


def test_node_on_kubernetes_is_refused(tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(write_spec(tmp_path, "eks"))
    code, _, err = cli("connect", "--spec", spec, "--vscode", "--node", "i-0abc", capsys=capsys)
    assert code == 2
    assert err.startswith("kiln connect: --node: on Kubernetes code-server runs in a pod") and err.count("\n") == 1


# Refusals before any AWS call, each one line.


def test_vscode_without_code_server_in_the_spec_is_refused(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(write_spec(tmp_path, "pcs", code_server=False))
    assert cli("connect", "--spec", spec, "--vscode", capsys=capsys) == (
        2,
        "",
        "kiln connect: --vscode: the spec has no code_server section, so no node runs code-server: add "
        "`code_server: {}` to it and redeploy\n",
    )


def test_pcs_without_login_nodes_has_no_node_to_log_in_to(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(write_spec(tmp_path, "pcs", login=0, code_server=False))
    code, _, err = cli("connect", "--spec", spec, capsys=capsys)
    assert code == 2
    assert err.startswith("kiln connect: the PCS cluster has no login node (compute.login_nodes.count is 0)")
    assert err.count("\n") == 1


def test_a_local_port_in_use_is_refused(tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    spec = str(write_spec(tmp_path, "pcs"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("connect", "--spec", spec, "--vscode", "--local-port", str(port), capsys=capsys)
    assert code == 2
    assert err.startswith(f"kiln connect: --local-port {port}: cannot listen on 127.0.0.1:{port} here (")
    assert err.endswith("); pass a free port\n")


def test_local_port_without_vscode_is_refused(tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(write_spec(tmp_path, "pcs"))
    assert cli("connect", "--spec", spec, "--local-port", "9000", capsys=capsys) == (
        2,
        "",
        "kiln connect: --local-port: only --vscode forwards a port; leave it out for a shell\n",
    )


def test_a_bad_spec_is_its_own_lines(tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: lab\ncompute: {backend: pcs, groups: []}\nbogus: 1\n")
    code, out, err = cli("connect", "--spec", str(spec), capsys=capsys)
    assert (code, out) == (2, "")
    assert all(line.startswith(f"{spec}:") for line in err.splitlines()) and "Traceback" not in err


@pytest.mark.parametrize(
    ("present", "missing", "page", "vscode", "platform"),
    [
        (("aws",), "the Session Manager plugin (`session-manager-plugin`)", PLUGIN_PAGE, False, "pcs"),
        (("session-manager-plugin",), "the AWS CLI v2 (`aws`)", AWS_CLI_PAGE, True, "hyperpod"),
        (("aws", "session-manager-plugin"), "kubectl (`kubectl`)", KUBECTL_PAGE, True, "eks"),
    ],
)
def test_a_missing_program_is_one_line_naming_what_to_install(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    present: tuple[str, ...],
    missing: str,
    page: str,
    vscode: bool,
    platform: str,
) -> None:
    found = install_tools(tmp_path, present)
    monkeypatch.setenv("PATH", str(found.bin))
    monkeypatch.setenv("FAKE_RECORD", str(found.record))
    argv = ["connect", "--spec", str(write_spec(tmp_path, platform))] + (["--vscode"] if vscode else [])
    code, out, err = cli(*argv, capsys=capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"kiln connect: {missing} is not on PATH: ")
    assert err.endswith(f"; install it: {page}\n") and err.count("\n") == 1
    assert found.calls() == []


# What AWS says, each one line.


def test_a_cluster_that_is_not_deployed_says_how_to_deploy_it(
    moto: boto3.Session, tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(write_spec(tmp_path, "pcs"))
    assert cli("connect", "--spec", spec, capsys=capsys) == (
        1,
        "",
        f"kiln connect: stack lab-compute does not exist in {REGION}: deploy it with `npx cdk deploy --all -c "
        f"spec={spec}` first (or pass the region it was deployed in)\n",
    )


def test_no_running_login_node_yet_is_one_line(
    moto: boto3.Session, tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pcs_cluster(moto)
    node({PCS_NODE_GROUP_TAG: "pcs_login"}, state="stopped")
    spec = str(write_spec(tmp_path, "pcs"))
    assert cli("connect", "--spec", spec, capsys=capsys) == (
        1,
        "",
        "kiln connect: no running PCS login node in node group pcs_login yet\n",
    )


def test_a_stack_of_another_kind_of_cluster_is_named(
    moto: boto3.Session, tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hyperpod_cluster(moto, {"controller": 1})
    spec = str(write_spec(tmp_path, "pcs"))
    code, _, err = cli("connect", "--spec", spec, capsys=capsys)
    assert code == 1
    assert err == (
        "kiln connect: stack lab-compute holds a HyperPod (Slurm) cluster and the spec describes a PCS one: deploy "
        f"the spec with `npx cdk deploy --all -c spec={spec}`, or pass the spec the stack was deployed from\n"
    )


@pytest.mark.parametrize("situation", sorted(SITUATIONS))
def test_no_credentials_is_the_shared_wording(
    tools: Tools,
    tmp_path: Path,
    no_credentials_env: Callable[[str], None],
    capsys: pytest.CaptureFixture[str],
    situation: str,
) -> None:
    # The situations of tests/test_credentials.py, whose commands run without the AWS CLI's plugin on PATH.
    spec = str(write_spec(tmp_path, "pcs"))
    no_credentials_env(situation)
    profile = ["--profile", MISSING_PROFILE] if situation == "profile-flag" else []
    code, out, err = cli("connect", "--spec", spec, *profile, capsys=capsys)
    assert (code, out) == (1, "")
    assert re.fullmatch(rf"kiln connect: no AWS credentials{SITUATIONS[situation]}: {re.escape(REMEDY)}\n", err)
    assert tools.calls() == []


def test_a_profile_that_is_not_there_is_the_shared_wording(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(write_spec(tmp_path, "pcs"))
    code, _, err = cli("connect", "--spec", spec, "--profile", "nope", capsys=capsys)
    assert code == 1
    assert err.startswith("kiln connect: no AWS credentials (profile nope is not in the AWS config)")


def test_a_profile_is_what_the_aws_cli_uses_too(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # boto3 ignores credentials in the environment for a profile named explicitly; so must the AWS CLI kiln runs.
    config = Path(os.environ["AWS_CONFIG_FILE"])
    config.write_text("[profile lab]\naws_access_key_id = lab-key\naws_secret_access_key = lab-secret\n")
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    spec = str(write_spec(tmp_path, "pcs"))
    code, _, _ = cli("connect", "--spec", spec, "--profile", "lab", capsys=capsys)
    [call] = tools.calls()
    assert code == 0
    assert call["argv"] == start_session(login)
    assert (call["profile"], call["key"]) == ("lab", None)


# The names kiln repeats from the stacks that create them.


def test_the_hyperpod_group_names_are_the_stacks(tmp_path: Path) -> None:
    # kiln connect looks for HyperPod's nodes in the backend table's groups; the stack makes its groups from it too.
    from kiln.stacks.backends import hyperpod

    spec = load_spec(write_spec(tmp_path, "hyperpod"))
    built = {group.role: group.name for group in hyperpod.hyperpod_groups(spec)}
    assert (built["controller"], built["login"]) == (HYPERPOD_CONTROLLER_GROUP, HYPERPOD_LOGIN_GROUP)


# The whole command in its own process, on a terminal.

SHELL_SCRIPT = r"""
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "kiln.cli", "connect", "--spec", sys.argv[1]])
seen = b""
def read_until(text, timeout=60):
    global seen
    deadline = time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(fd, 4096)
        except OSError:
            break
    return text in seen
assert read_until(b"fake shell ready"), seen
time.sleep(0.3)
os.write(fd, b"\x03")  # Ctrl-C on the terminal: SIGINT to its foreground process group, kiln and the CLI
assert read_until(b"(Ctrl-C sent to the node)"), seen
os.write(fd, b"exit\n")
read_until(b"never", timeout=5)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.fixture
def moto_server() -> Any:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto's accounts live in this process, shared by every server and mock: start from an empty one.
    reset = urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset).close()  # noqa: S310 - the moto server this fixture started
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_the_shell_runs_on_this_terminal_and_ctrl_c_goes_to_the_session(
    moto_server: str, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    session = boto3.Session(region_name=REGION)
    pcs_cluster(session)
    login = session.client("ec2").run_instances(
        ImageId="ami-12345678",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": PCS_NODE_GROUP_TAG, "Value": "pcs_login"}]}],
    )["Instances"][0]["InstanceId"]
    monkeypatch.setenv("FAKE_SHELL", "interactive")
    monkeypatch.setenv("FAKE_SHELL_EXIT", "3")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", SHELL_SCRIPT, str(write_spec(tmp_path, "pcs"))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"  # the shell's exit code is kiln's: kiln outlived the Ctrl-C
    start, end = tools.calls()
    assert start["argv"] == start_session(login)
    assert start["tty"] == [True, True, True]
    assert end == {**end, "ended": True, "interrupts": 1}


def test_the_command_ends_a_forward_on_ctrl_c_and_exits_0(
    moto_server: str, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    session = boto3.Session(region_name=REGION)
    pcs_cluster(session)
    session.client("ec2").run_instances(
        ImageId="ami-12345678",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": PCS_NODE_GROUP_TAG, "Value": "pcs_login"}]}],
    )
    port = free_port()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    argv = [sys.executable, "-m", "kiln.cli", "connect", "--spec", str(write_spec(tmp_path, "pcs")), "--vscode"]
    process = subprocess.Popen(
        [*argv, "--local-port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        first = process.stdout.readline()
        assert first.endswith(f"http://127.0.0.1:{port}/ (Ctrl-C ends the forward)\n"), process.stderr.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:  # noqa: S310 - loopback
            assert json.loads(answer.read()) == {"to": "the node", "port": "8080"}
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert err.endswith("kiln connect: stopped the forward to PCS login node " + tools.calls()[0]["argv"][4] + "\n")
    assert "Traceback" not in err
    assert running(tools.calls()[0]["pids"]) == []
