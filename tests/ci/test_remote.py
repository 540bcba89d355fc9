"""kiln.aws.remote against moto (CloudFormation outputs are stubbed: moto's CloudFormation needs extras) and Stubber."""

from __future__ import annotations

import ast
import inspect
import io
import json
import os
import shlex
import subprocess
import sys
import typing
import urllib.parse
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from kiln.aws.remote import nodes
from kiln.aws.remote.cluster import ClusterHandle, RemoteError, Unreachable
from kiln.aws.remote.exit_codes import EXIT_CANCELLED, EXIT_TIMED_OUT
from kiln.aws.remote.kubectl import KubectlTransport
from kiln.aws.remote.nodes import Target, find_head
from kiln.aws.remote.session import SessionManagerTransport
from kiln.aws.remote.ssm_run_command import RUN_COMMAND_OUTPUT_LIMIT, RunCommandTransport, node_script
from kiln.aws.remote.transport import Transport, run_command, transport_for
from kiln.spec import parse_spec
from tests.support.ci import Clock, CommandWith, FakeSession, hyperpod_instance_group, launch, make_stack, running, tags
from tests.support.fake_aws import ACCOUNT, REGION
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

COMMAND_ID = "11111111-2222-3333-4444-555555555555"


def imported_names(path: Path) -> set[tuple[str, str]]:
    """Return every (module, name) PATH imports with `from module import name`."""
    tree = ast.parse(path.read_text())
    return {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def handle(**outputs: str) -> ClusterHandle:
    return ClusterHandle(environment="ci-42", region=REGION, outputs=outputs)


def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(service, region_name=REGION)
    return client, Stubber(client)


def expect_invocation(stub: Stubber, status: str, stdout: str = "", stderr: str = "", code: int = -1) -> None:
    response = {
        "CommandId": COMMAND_ID,
        "InstanceId": "i-0123456789abcdef0",
        "Status": status,
        "StatusDetails": status,
        "ResponseCode": code,
        "StandardOutputContent": stdout,
        "StandardErrorContent": stderr,
    }
    stub.add_response("get_command_invocation", response, {"CommandId": COMMAND_ID, "InstanceId": ANY})


def expect_send(stub: Stubber, text: str = "") -> None:
    expected = {
        "InstanceIds": ["i-0123456789abcdef0"],
        "DocumentName": "AWS-RunShellScript",
        "Comment": ANY,
        "Parameters": CommandWith(text) if text else ANY,
    }
    stub.add_response("send_command", {"Command": {"CommandId": COMMAND_ID}}, expected)


EC2_TARGET = Target("ec2", "i-0123456789abcdef0", REGION, "PCS login node i-0123456789abcdef0")


# The compute stack's outputs.


def test_outputs_are_read_from_the_compute_stack(moto: boto3.Session) -> None:
    outputs = {"Backend": "hyperpod", "Orchestrator": "slurm", "ClusterName": "ci-42", "HyperPodClusterArn": "x/abc"}
    make_stack(moto, "ci-42-compute", tags("ci-42", "compute"), outputs=outputs)
    cluster = ClusterHandle.from_stack(moto, "ci-42", REGION)
    assert cluster.outputs == outputs
    assert (cluster.backend, cluster.orchestrator, cluster.cluster_name) == ("hyperpod", "slurm", "ci-42")
    assert cluster.hyperpod_cluster_id == "abc" and not cluster.uses_kubernetes


def test_a_missing_stack_says_to_deploy_first(moto: boto3.Session) -> None:
    with pytest.raises(RemoteError) as raised:
        ClusterHandle.from_stack(moto, "ci-42", REGION)
    assert str(raised.value) == (
        f"stack ci-42-compute does not exist in {REGION}: deploy it with `kiln ci up` first "
        "(or pass the region it was deployed in)"
    )


def test_a_stack_without_kiln_outputs_is_named(moto: boto3.Session) -> None:
    make_stack(moto, "ci-42-compute", tags("ci-42", "compute"), outputs={"Something": "else"})
    with pytest.raises(
        RemoteError, match=r"^stack ci-42-compute has no output Backend: .*redeploy it with `kiln ci up`$"
    ):
        ClusterHandle.from_stack(moto, "ci-42", REGION)


def test_a_missing_output_names_the_stack_and_the_output() -> None:
    with pytest.raises(RemoteError, match=r"stack ci-42-compute has no output ClusterName: .* `kiln ci up`"):
        _ = handle(Backend="parallelcluster").cluster_name


# Finding the head node.


def test_pcs_runs_on_a_running_login_node_of_the_login_group(moto: boto3.Session) -> None:
    launch({nodes.PCS_NODE_GROUP_TAG: "pcs_login"}, state="stopped")
    launch({nodes.PCS_NODE_GROUP_TAG: "pcs_gpu"})
    login = launch({nodes.PCS_NODE_GROUP_TAG: "pcs_login"})
    cluster = handle(Backend="pcs", Orchestrator="slurm", PcsClusterId="pcs_c", PcsLoginNodeGroupId="pcs_login")
    assert find_head(moto, cluster) == Target("ec2", login, REGION, f"PCS login node {login}")


def test_pcs_without_login_nodes_says_the_spec_needs_them(moto: boto3.Session) -> None:
    cluster = handle(Backend="pcs", Orchestrator="slurm", PcsClusterId="pcs_c")
    with pytest.raises(RemoteError) as raised:
        find_head(moto, cluster)
    assert not isinstance(raised.value, Unreachable)
    assert "compute.login_nodes.count to 1 or more" in str(raised.value) and "`kiln ci up`" in str(raised.value)


def test_a_login_group_without_running_nodes_is_unreachable_for_now(moto: boto3.Session) -> None:
    cluster = handle(Backend="pcs", Orchestrator="slurm", PcsClusterId="pcs_c", PcsLoginNodeGroupId="pcs_login")
    with pytest.raises(Unreachable, match="no running PCS login node in node group pcs_login yet"):
        find_head(moto, cluster)


def test_parallelcluster_runs_on_its_head_node(moto: boto3.Session) -> None:
    launch({nodes.PARALLELCLUSTER_NAME_TAG: "ci-42", nodes.PARALLELCLUSTER_NODE_TYPE_TAG: "Compute"})
    launch({nodes.PARALLELCLUSTER_NAME_TAG: "other", nodes.PARALLELCLUSTER_NODE_TYPE_TAG: "HeadNode"})
    head = launch({nodes.PARALLELCLUSTER_NAME_TAG: "ci-42", nodes.PARALLELCLUSTER_NODE_TYPE_TAG: "HeadNode"})
    cluster = handle(Backend="parallelcluster", Orchestrator="slurm", ClusterName="ci-42")
    assert find_head(moto, cluster).address == head


def test_hyperpod_runs_on_the_controller_through_its_session_target(moto: boto3.Session) -> None:
    sagemaker = boto3.client("sagemaker", region_name=REGION)

    arn = sagemaker.create_cluster(
        ClusterName="ci-42",
        InstanceGroups=[hyperpod_instance_group("gpu", 2), hyperpod_instance_group("controller", 1)],
        VpcConfig={"SecurityGroupIds": ["sg-12345678"], "Subnets": ["subnet-12345678"]},
    )["ClusterArn"]
    cluster = handle(Backend="hyperpod", Orchestrator="slurm", ClusterName="ci-42", HyperPodClusterArn=arn)
    head = find_head(moto, cluster)
    cluster_id = arn.rsplit("/", 1)[-1]
    assert head.kind == "hyperpod"
    assert head.address == f"sagemaker-cluster:{cluster_id}_controller-controller-0"


def test_kubernetes_clusters_run_here() -> None:
    for outputs in (
        {"Backend": "eks", "Orchestrator": "eks", "EksClusterName": "ci-42"},
        {"Backend": "hyperpod", "Orchestrator": "eks", "EksClusterName": "ci-42", "HyperPodClusterArn": "x/abc"},
    ):
        assert find_head(FakeSession(), handle(**outputs)) == Target("kubernetes", "ci-42", REGION, "EKS cluster ci-42")


def test_access_denied_is_one_line_naming_the_call() -> None:
    client, stub = stubbed("ec2")
    stub.add_client_error(
        "describe_instances",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.\nEncoded authorization failure message: abc",
        http_status_code=403,
    )
    cluster = handle(Backend="parallelcluster", Orchestrator="slurm", ClusterName="ci-42")
    with stub, pytest.raises(RemoteError) as raised:
        find_head(FakeSession(ec2=client), cluster)
    message = str(raised.value)
    assert message.startswith("ec2:DescribeInstances was denied (UnauthorizedOperation): allow it")
    assert "\n" not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_the_kiln_names_match_the_stacks_that_create_them() -> None:
    # kiln.aws.remote and ready.py must not import the CDK: the group names they look for are the backend table's,
    # which the stacks build from too. The group a HyperPod command runs in by default is the controller group the
    # stack makes.
    from kiln.stacks.backends.hyperpod import hyperpod_groups

    spec = parse_spec(
        {
            "name": "ci",
            "compute": {
                "backend": "hyperpod",
                "groups": [{"name": "gpu", "instance_type": "g6.12xlarge", "min_count": 1, "max_count": 1}],
            },
        }
    )
    controller = next(group.name for group in hyperpod_groups(spec) if group.role == "controller")
    assert inspect.signature(nodes.hyperpod_node).parameters["group"].default == controller
    # The system node group is found by kiln's tags; the EKS construct tags it with the backend table's name, the one
    # the finder looks for (tests/stacks/test_ci_mode.py reads the tags back from a synthesized template).
    for module in (ROOT / "kiln/constructs/eks_node_groups.py", ROOT / "kiln/aws/remote/nodes.py"):
        assert ("kiln.contracts.backends", "EKS_SYSTEM_NODE_GROUP") in imported_names(module), module
    assert "/usr/local/bin/kiln-launch" in (ROOT / "kiln/bootstrap/scripts/steps/install_launcher.sh").read_text()


# kiln modules of boto3, botocore and the standard library only (and the catalog, standard library only); the
# remote package's own modules are held to the same rule, each of them below.
# kiln.aws.session: its names for the session and clients, imported under TYPE_CHECKING (botocore.config at run time)
LIGHT_KILN_MODULES = ("kiln.aws.remote", "kiln.aws.errors", "kiln.aws.session")


def test_remote_and_ready_import_neither_the_cdk_nor_pydantic() -> None:
    # `kiln ci run` must work without synthesizing anything: boto3, botocore and the standard library only
    # (the reaper's names, the catalog and the contracts are stdlib-only: tests/architecture/test_layers.py).
    from tests.support.imports import imports_of

    heavy = ("aws_cdk", "constructs", "cdk_nag", "jsii", "pydantic", "yaml", "jinja2")
    sources = [*sorted((ROOT / "kiln/aws/remote").glob("*.py")), ROOT / "kiln/ci/ready.py"]
    assert ROOT / "kiln/aws/remote/transport.py" in sources
    found = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sources
        for module in imports_of(path)
        if module.split(".")[0] in heavy
        or (
            module.startswith("kiln.")
            and module not in LIGHT_KILN_MODULES
            and not module.startswith(("kiln.aws.remote.", "kiln.ci.reaper_code.", "kiln.catalog.", "kiln.contracts."))
        )
    }
    assert found == set()


# Run Command on an EC2 node.


def test_output_arriving_over_three_polls_is_printed_once_in_order() -> None:
    client, stub = stubbed("ssm")
    expect_send(stub, "python train.py")
    stub.add_client_error("get_command_invocation", "InvocationDoesNotExist")
    expect_invocation(stub, "InProgress", "step 1\n")
    expect_invocation(stub, "InProgress", "step 1\nstep 2\n", "warn A\n")
    expect_invocation(stub, "Success", "step 1\nstep 2\nstep 3\n", "warn A\n", code=0)
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    with stub:
        code = run_command(
            FakeSession(ssm=client),
            EC2_TARGET,
            "python train.py",
            timeout_s=600,
            out=out,
            err=err,
            clock=clock,
            sleep=clock.sleep,
        )
        stub.assert_no_pending_responses()
    assert (code, out.getvalue(), err.getvalue()) == (0, "step 1\nstep 2\nstep 3\n", "warn A\n")
    assert clock.slept == [2.0] * 4


def test_a_failing_command_returns_its_exit_code() -> None:
    client, stub = stubbed("ssm")
    expect_send(stub)
    expect_invocation(stub, "Failed", "", "no such file\n", code=3)
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    with stub:
        code = run_command(
            FakeSession(ssm=client), EC2_TARGET, "false", timeout_s=60, out=out, err=err, clock=clock, sleep=clock.sleep
        )
    assert (code, err.getvalue()) == (3, "no such file\n")


@pytest.mark.parametrize(("status", "code"), [("TimedOut", EXIT_TIMED_OUT), ("Cancelled", EXIT_CANCELLED)])
def test_run_command_endings_map_to_documented_codes(status: str, code: int) -> None:
    client, stub = stubbed("ssm")
    expect_send(stub)
    expect_invocation(stub, status)
    err, clock = io.StringIO(), Clock()
    with stub:
        got = run_command(
            FakeSession(ssm=client),
            EC2_TARGET,
            "sleep 1",
            timeout_s=60,
            out=io.StringIO(),
            err=err,
            clock=clock,
            sleep=clock.sleep,
        )
    assert got == code and err.getvalue().startswith("kiln: PCS login node")


def test_the_timeout_cancels_the_command_and_returns_124() -> None:
    client, stub = stubbed("ssm")
    expect_send(stub)
    for _ in range(3):
        expect_invocation(stub, "InProgress", "still going\n")
    stub.add_response("cancel_command", {}, {"CommandId": COMMAND_ID, "InstanceIds": ["i-0123456789abcdef0"]})
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    with stub:
        code = run_command(
            FakeSession(ssm=client),
            EC2_TARGET,
            "sleep 1000",
            timeout_s=5,
            out=out,
            err=err,
            clock=clock,
            sleep=clock.sleep,
        )
        stub.assert_no_pending_responses()
    assert code == 124 and out.getvalue() == "still going\n"
    assert (
        err.getvalue()
        == "kiln: PCS login node i-0123456789abcdef0: the command did not finish within 5 s; cancelled it\n"
    )


def test_output_cut_by_run_command_gets_a_notice() -> None:
    client, stub = stubbed("ssm")
    expect_send(stub)
    expect_invocation(stub, "Success", "x" * RUN_COMMAND_OUTPUT_LIMIT, code=0)
    err, clock = io.StringIO(), Clock()
    with stub:
        run_command(
            FakeSession(ssm=client),
            EC2_TARGET,
            "yes",
            timeout_s=60,
            out=io.StringIO(),
            err=err,
            clock=clock,
            sleep=clock.sleep,
        )
    assert "keeps only the first 24,000 characters of output" in err.getvalue()


def test_an_instance_unknown_to_systems_manager_is_unreachable() -> None:
    client, stub = stubbed("ssm")
    stub.add_client_error("send_command", "InvalidInstanceId", "Instances not in a valid state for account")
    with stub, pytest.raises(Unreachable, match="not reachable through Systems Manager"):
        run_command(FakeSession(ssm=client), EC2_TARGET, "true", timeout_s=60, sleep=Clock().sleep)


def test_the_node_script_runs_the_command_in_bash_and_keeps_its_exit_code() -> None:
    command = "set -u; printf '%s\\n' \"it's $((6 * 7))\"; exit 4"
    done = subprocess.run(["sh", "-c", node_script(command)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (4, "it's 42")


# HyperPod: Session Manager through the AWS CLI.

FAKE_AWS = """\
#!{python}
# The AWS CLI's start-session as the SSM agent runs a NonInteractiveCommands session: split the command into
# words without a shell, run it with stderr merged into stdout, print the plugin's banners, exit 0.
import json, shlex, subprocess, sys
args = sys.argv[1:]
with open({record!r}, "w") as record:
    json.dump(args, record)
command = json.loads(args[args.index("--parameters") + 1])["command"][0]
print("\\nStarting session with SessionId: kiln-test-0123\\n", flush=True)
subprocess.run(shlex.split(command), stderr=subprocess.STDOUT)
print("\\n\\nExiting session with sessionId: kiln-test-0123.\\n", flush=True)
"""


@pytest.fixture
def fake_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake `aws` first on PATH; return where it records its arguments."""
    bin_dir, record = tmp_path / "bin", tmp_path / "aws-args.json"
    bin_dir.mkdir()
    script = bin_dir / "aws"
    script.write_text(FAKE_AWS.format(python=sys.executable, record=str(record)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return record


HYPERPOD_TARGET = Target("hyperpod", "sagemaker-cluster:abc123_controller-i-0abc", REGION, "HyperPod controller")


def test_hyperpod_commands_keep_their_exit_code_and_lose_the_marker(fake_aws: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    command = 'echo one; echo two >&2; echo; echo "it\'s three"; exit 3'
    code = run_command(FakeSession(), HYPERPOD_TARGET, command, timeout_s=60, out=out, err=err, poll_s=0.1)
    assert code == 3
    assert out.getvalue() == "one\ntwo\n\nit's three\n"
    assert err.getvalue() == ""
    args = json.loads(fake_aws.read_text())
    assert args[:7] == [
        "ssm",
        "start-session",
        "--target",
        "sagemaker-cluster:abc123_controller-i-0abc",
        "--document-name",
        "AWS-StartNonInteractiveCommand",
        "--parameters",
    ]
    assert args[8:] == ["--region", REGION]


def test_hyperpod_output_without_a_final_newline_is_kept(fake_aws: Path) -> None:
    out = io.StringIO()
    code = run_command(
        FakeSession(), HYPERPOD_TARGET, "printf done", timeout_s=60, out=out, err=io.StringIO(), poll_s=0.1
    )
    assert (code, out.getvalue()) == (0, "done\n")


def test_a_hyperpod_command_out_of_time_ends_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "aws"
    script.write_text(
        "#!/bin/sh\necho 'Starting session with SessionId: kiln-test-0123'\necho working\nexec sleep 30\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    client, stub = stubbed("ssm")
    stub.add_response("terminate_session", {"SessionId": "kiln-test-0123"}, {"SessionId": "kiln-test-0123"})
    ticks = iter(range(1000))
    out, err = io.StringIO(), io.StringIO()
    with stub:
        code = run_command(
            FakeSession(ssm=client),
            HYPERPOD_TARGET,
            "sleep 1000",
            timeout_s=5,
            out=out,
            err=err,
            poll_s=0.05,
            clock=lambda: float(next(ticks)),
        )
        stub.assert_no_pending_responses()
    assert (code, out.getvalue()) == (124, "working\n")
    assert err.getvalue() == "kiln: HyperPod controller: the command did not finish within 5 s; ended the session\n"


def test_hyperpod_without_the_aws_cli_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RemoteError, match=r"the AWS CLI \(`aws`\) is not on PATH"):
        run_command(FakeSession(), HYPERPOD_TARGET, "true", timeout_s=60, out=io.StringIO())


def test_a_failed_session_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "aws"
    script.write_text(
        "#!/bin/sh\necho >&2\necho 'An error occurred (TargetNotConnected) when calling the StartSession operation: "
        "sagemaker-cluster:abc is not connected.' >&2\nexit 254\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(Unreachable) as raised:
        run_command(FakeSession(), HYPERPOD_TARGET, "true", timeout_s=60, out=io.StringIO(), poll_s=0.1)
    assert str(raised.value).startswith("aws ssm start-session to HyperPod controller failed: An error occurred")
    assert "\n" not in str(raised.value)


# Kubernetes: a kubeconfig for this machine.


def test_a_public_eks_endpoint_is_used_directly_with_a_private_kubeconfig_removed_after(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forward = fake_forward(tmp_path, monkeypatch, "listening")
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(
        name="ci-42",
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"], "endpointPublicAccess": True, "endpointPrivateAccess": True},
    )
    system_node()
    described = eks.describe_cluster(name="ci-42")["cluster"]
    out, err = io.StringIO(), io.StringIO()
    command = 'echo "$KUBECONFIG"; stat -c %a "$KUBECONFIG"; cat "$KUBECONFIG"; echo; echo oops >&2; exit 5'
    target = Target("kubernetes", "ci-42", REGION, "EKS cluster ci-42")
    code = run_command(moto, target, command, timeout_s=60, out=out, err=err, poll_s=0.1)
    path, mode, config = out.getvalue().split("\n", 2)
    assert (code, mode, err.getvalue()) == (5, "600", "oops\n")
    assert not Path(path).exists()
    assert not forward.exists()  # no port forward was started
    config = json.loads(config)
    assert config["current-context"] == "ci-42"
    assert config["clusters"][0]["cluster"] == {
        "server": described["endpoint"],
        "certificate-authority-data": described["certificateAuthority"]["data"],
    }
    user = config["users"][0]["user"]["exec"]
    assert user["command"] == "aws"
    assert user["args"][:6] == ["eks", "get-token", "--cluster-name", "ci-42", "--region", REGION]
    assert user["apiVersion"] == "client.authentication.k8s.io/v1beta1"


# Kubernetes with a private endpoint: Session Manager port forwarding through a system node.

PRIVATE = {"subnetIds": ["subnet-1"], "endpointPublicAccess": False, "endpointPrivateAccess": True}
EKS_TARGET = Target("kubernetes", "ci-42", REGION, "EKS cluster ci-42")
SESSION_ID = "kiln-test-0123"

FAKE_FORWARD = """\
#!{python}
# The AWS CLI's start-session with AWS-StartPortForwardingSessionToRemoteHost, as kiln sees it. It records its
# arguments, process group and child (the real CLI starts session-manager-plugin), then acts out MODE:
#   listening: the plugin's banner and lines, and a listener on localPortNumber that greets each connection
#       with the host and port it forwards to; quiet: the same listener but no lines after the banner;
#   silent: the banner, then nothing; anything else: that text on stderr and exit 254 (the CLI's own errors).
import json, os, socket, subprocess, sys, time
args = sys.argv[1:]
child = subprocess.Popen(["sleep", "300"])
with open({record!r}, "w") as record:
    json.dump({{"args": args, "pgid": os.getpgid(0), "pids": [os.getpid(), child.pid]}}, record)
mode = {mode!r}
if mode not in ("listening", "quiet", "silent"):
    print(mode, file=sys.stderr, flush=True)
    sys.exit(254)
print("\\nStarting session with SessionId: {session_id}", flush=True)
if mode == "silent":
    time.sleep(300)
parameters = json.loads(args[args.index("--parameters") + 1])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(parameters["localPortNumber"][0])))
listener.listen()
if mode == "listening":
    print("Port " + parameters["localPortNumber"][0] + " opened for sessionId {session_id}.", flush=True)
    print("Waiting for connections...", flush=True)
while True:
    connection, _ = listener.accept()
    connection.sendall((parameters["host"][0] + ":" + parameters["portNumber"][0] + "\\n").encode())
    connection.close()
"""

# Run by the command: where KUBECONFIG is, its mode and content, then what the server it names answers.
SHOW_KUBECONFIG = (
    'echo "$KUBECONFIG"; stat -c %a "$KUBECONFIG"; '
    + shlex.quote(sys.executable)
    + ' -c \'import json, os, socket, sys, urllib.parse as u; c = json.load(open(os.environ["KUBECONFIG"])); '
    'print(json.dumps(c)); s = u.urlsplit(c["clusters"][0]["cluster"]["server"]); '
    "print(socket.create_connection((s.hostname, s.port), timeout=10).makefile().readline().strip())'"
)


def fake_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> Path:
    """Put a fake port-forwarding `aws` acting out MODE first on PATH; return where it records what it got."""
    bin_dir, record = tmp_path / "forward-bin", tmp_path / "forward.json"
    bin_dir.mkdir()
    script = bin_dir / "aws"
    script.write_text(FAKE_FORWARD.format(python=sys.executable, record=str(record), mode=mode, session_id=SESSION_ID))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return record


def private_cluster(endpoint_access: dict[str, Any] = PRIVATE) -> dict[str, Any]:
    """Create EKS cluster ci-42 in moto with ENDPOINT_ACCESS; return it as DescribeCluster does."""
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(name="ci-42", roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig=endpoint_access)
    return eks.describe_cluster(name="ci-42")["cluster"]


def system_node(cluster: str = "ci-42", group: str = "system", state: str = "running") -> str:
    return launch({"kiln:eks-cluster": cluster, "kiln:node-group": group}, state=state)


def expect_terminate(stub: Stubber) -> None:
    stub.add_response("terminate_session", {"SessionId": SESSION_ID}, {"SessionId": SESSION_ID})


@pytest.mark.parametrize("mode", ["listening", "quiet"])
def test_a_private_eks_endpoint_is_forwarded_through_a_system_node_and_cleaned_up(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # quiet: the plugin prints no "Waiting for connections..." line; kiln sees the port accept connections instead.
    record = fake_forward(tmp_path, monkeypatch, mode)
    described = private_cluster()
    system_node(state="stopped")
    system_node(cluster="other")
    system_node(group="gpu")
    node = system_node()
    client, stub = stubbed("ssm")
    expect_terminate(stub)
    out, err = io.StringIO(), io.StringIO()
    with stub:
        code = run_command(
            FakeSession(ssm=client), EKS_TARGET, SHOW_KUBECONFIG + "; exit 3", timeout_s=60, out=out, err=err
        )
        stub.assert_no_pending_responses()
    host = urllib.parse.urlsplit(described["endpoint"]).hostname
    path, mode_bits, config, answer = out.getvalue().splitlines()
    assert (code, mode_bits, err.getvalue()) == (3, "600", "")
    assert not Path(path).exists()
    # The command reached the forwarded port that the kubeconfig names, and the forward goes to the API's port 443.
    assert answer == f"{host}:443"
    config = json.loads(config)
    (entry,) = config["clusters"]
    port = urllib.parse.urlsplit(entry["cluster"]["server"]).port
    assert entry["cluster"] == {
        "server": f"https://127.0.0.1:{port}",
        "tls-server-name": host,
        "certificate-authority-data": described["certificateAuthority"]["data"],
    }
    assert config["users"][0]["user"]["exec"]["args"][:4] == ["eks", "get-token", "--cluster-name", "ci-42"]
    got = json.loads(record.read_text())
    assert got["args"] == [
        "ssm",
        "start-session",
        "--target",
        node,
        "--document-name",
        "AWS-StartPortForwardingSessionToRemoteHost",
        "--parameters",
        json.dumps({"host": [host], "portNumber": ["443"], "localPortNumber": [str(port)]}),
        "--region",
        REGION,
    ]
    assert running(got["pids"]) == []


def test_a_command_out_of_time_still_stops_the_forward(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = fake_forward(tmp_path, monkeypatch, "listening")
    private_cluster()
    system_node()
    client, stub = stubbed("ssm")
    expect_terminate(stub)
    out, err = io.StringIO(), io.StringIO()
    with stub:
        code = run_command(
            FakeSession(ssm=client),
            EKS_TARGET,
            'echo "$KUBECONFIG"; sleep 30',
            timeout_s=1,
            out=out,
            err=err,
            poll_s=0.05,
        )
        stub.assert_no_pending_responses()
    assert code == 124
    assert err.getvalue() == "kiln: the command for EKS cluster ci-42 did not finish within 1 s; stopped it\n"
    assert not Path(out.getvalue().strip()).exists()
    assert running(json.loads(record.read_text())["pids"]) == []


def test_the_system_node_is_found_by_its_cluster_and_group_tags_while_running() -> None:
    eks, eks_stub = stubbed("eks")
    cluster = {
        "name": "ci-42",
        "endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": {"data": "Q0E="},
        "resourcesVpcConfig": {"endpointPublicAccess": False},
    }
    eks_stub.add_response("describe_cluster", {"cluster": cluster}, {"name": "ci-42"})
    ec2, ec2_stub = stubbed("ec2")
    filters = [
        {"Name": "tag:kiln:eks-cluster", "Values": ["ci-42"]},
        {"Name": "tag:kiln:node-group", "Values": ["system"]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    ec2_stub.add_response("describe_instances", {"Reservations": []}, {"Filters": filters})
    with eks_stub, ec2_stub, pytest.raises(Unreachable) as raised:
        run_command(FakeSession(eks=eks, ec2=ec2), EKS_TARGET, "true", timeout_s=60, out=io.StringIO())
    ec2_stub.assert_no_pending_responses()
    message = str(raised.value)
    assert message.startswith("EKS cluster ci-42 has a private API endpoint and no running system node")
    assert "kiln:eks-cluster=ci-42 and kiln:node-group=system" in message and "\n" not in message


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        (
            "An error occurred (TargetNotConnected) when calling the StartSession operation: i-0abc is not connected.",
            Unreachable,
        ),
        (
            "An error occurred (AccessDeniedException) when calling the StartSession operation: User: x is not "
            "authorized to perform: ssm:StartSession",
            RemoteError,
        ),
    ],
)
def test_a_forward_that_ends_before_it_listens_is_one_line_and_the_command_never_runs(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, kind: type[RemoteError]
) -> None:
    fake_forward(tmp_path, monkeypatch, said)
    private_cluster()
    node = system_node()
    marker = tmp_path / "ran"
    with pytest.raises(RemoteError) as raised:
        run_command(moto, EKS_TARGET, f"touch {marker}", timeout_s=60, out=io.StringIO(), poll_s=0.05)
    assert type(raised.value) is kind
    assert str(raised.value) == f"aws ssm start-session to EKS cluster ci-42's system node {node} failed: {said}"
    assert not marker.exists()


def test_a_missing_session_manager_plugin_says_to_install_it(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the AWS CLI prints when it cannot start the plugin.
    missing = (
        "SessionManagerPlugin is not found. Please refer to SessionManager Documentation here: "
        "http://docs.aws.amazon.com/console/systems-manager/session-manager-plugin-not-found"
    )
    fake_forward(tmp_path, monkeypatch, missing)
    private_cluster()
    system_node()
    with pytest.raises(RemoteError, match=r"^the session-manager-plugin is not on PATH: .*install it"):
        run_command(moto, EKS_TARGET, "true", timeout_s=60, out=io.StringIO(), poll_s=0.05)


def test_a_private_endpoint_without_the_aws_cli_says_what_to_install(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private_cluster()
    system_node()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RemoteError, match=r"^the AWS CLI \(`aws`\) is not on PATH: .*session-manager-plugin$"):
        run_command(moto, EKS_TARGET, "true", timeout_s=60, out=io.StringIO())


def test_a_forward_that_never_listens_is_stopped_after_a_minute(
    moto: boto3.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = fake_forward(tmp_path, monkeypatch, "silent")
    private_cluster()
    node = system_node()
    client, stub = stubbed("ssm")
    expect_terminate(stub)
    now = [0.0]

    def clock() -> float:
        # Ten seconds pass at every look once the CLI has started (it prints its banner, with the session id, then).
        if record.exists():
            now[0] += 10
        return now[0]

    marker = tmp_path / "ran"
    with stub, pytest.raises(RemoteError) as raised:
        run_command(
            FakeSession(ssm=client),
            EKS_TARGET,
            f"touch {marker}",
            timeout_s=600,
            out=io.StringIO(),
            poll_s=0.2,
            clock=clock,
        )
    assert str(raised.value).startswith(
        f"the port forward through EKS cluster ci-42's system node {node} did not listen on 127.0.0.1:"
    )
    assert "within 60 s (the AWS CLI last said: Starting session with SessionId: kiln-test-0123); stopped it" in str(
        raised.value
    )
    stub.assert_no_pending_responses()
    assert not marker.exists()
    assert running(json.loads(record.read_text())["pids"]) == []


# One transport protocol, a class per kind of Target.

TRANSPORTS = [
    (EC2_TARGET, RunCommandTransport),
    (HYPERPOD_TARGET, SessionManagerTransport),
    (EKS_TARGET, KubectlTransport),
]


@pytest.mark.parametrize("transport", [transport for _, transport in TRANSPORTS])
def test_each_transport_follows_the_protocol(transport: type) -> None:
    assert issubclass(transport, Transport)
    assert inspect.signature(transport.run) == inspect.signature(Transport.run)


@pytest.mark.parametrize(("target", "transport"), TRANSPORTS)
def test_each_kind_of_target_gets_its_transport(target: Target, transport: type) -> None:
    session, clock = FakeSession(), Clock()
    chosen = transport_for(session, target, poll_s=0.5, clock=clock, sleep=clock.sleep)
    assert type(chosen) is transport and isinstance(chosen, Transport)
    assert (chosen.session, chosen.target, chosen.poll_s, chosen.clock) == (session, target, 0.5, clock)
    if transport is RunCommandTransport:
        assert chosen.sleep == clock.sleep


def test_every_kind_of_target_has_a_transport() -> None:
    kinds = typing.get_args(typing.get_type_hints(Target)["kind"])
    assert sorted(target.kind for target, _ in TRANSPORTS) == sorted(kinds)
