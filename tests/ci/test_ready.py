"""kiln.ci.ready: Slurm readiness over stubbed Run Command on a moto head node; Kubernetes readiness on moto."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from kiln.aws.remote import nodes
from kiln.aws.remote.cluster import ClusterHandle
from kiln.ci.ready import NotReady, ReadyReport, SlurmNode, check_verdict, parse_sinfo, wait_until_ready
from tests.support.ci import Clock, CommandWith, FakeSession, launch
from tests.support.fake_aws import ACCOUNT, REGION

# The slow tier (`make test-slow`; .ci/run runs both): this module takes about 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

COMMAND_ID = "99999999-8888-7777-6666-555555555555"
SINFO_DOWN = "slurm_load_node: Unable to contact slurm controller (connect failure)\n"
CHECK_PASSED = {
    "ready": True,
    "exit_code": 0,
    "checks": [{"name": "accelerators", "status": "passed", "detail": "8 GPUs as the catalog says"}],
}
CHECK_FAILED = {
    "ready": False,
    "exit_code": 1,
    "checks": [
        {"name": "accelerators", "status": "passed", "detail": "8 GPUs as the catalog says"},
        {"name": "efa_devices", "status": "failed", "detail": "0 EFA devices, the catalog says 32"},
    ],
}


@pytest.fixture
def slurm(moto: boto3.Session) -> ClusterHandle:
    """A ParallelCluster environment whose head node runs in moto."""
    launch({nodes.PARALLELCLUSTER_NAME_TAG: "ci-42", nodes.PARALLELCLUSTER_NODE_TYPE_TAG: "HeadNode"})
    return ClusterHandle(
        environment="ci-42",
        region=REGION,
        outputs={"Backend": "parallelcluster", "Orchestrator": "slurm", "ClusterName": "ci-42"},
    )


def ssm() -> tuple[Any, Stubber]:
    client = boto3.client("ssm", region_name=REGION)
    return client, Stubber(client)


def expect_run(stub: Stubber, text: str, stdout: str = "", stderr: str = "", code: int = 0) -> None:
    """Expect one Run Command of a script containing TEXT that ends at once with CODE."""
    sent = {"InstanceIds": ANY, "DocumentName": "AWS-RunShellScript", "Comment": ANY, "Parameters": CommandWith(text)}
    stub.add_response("send_command", {"Command": {"CommandId": COMMAND_ID}}, sent)
    invocation = {
        "Status": "Success" if code == 0 else "Failed",
        "ResponseCode": code,
        "StandardOutputContent": stdout,
        "StandardErrorContent": stderr,
    }
    stub.add_response("get_command_invocation", invocation, {"CommandId": COMMAND_ID, "InstanceId": ANY})


def wait(session: Any, cluster: ClusterHandle, expected: dict[str, int], timeout_s: float = 3600, **kw: Any):
    clock, lines = Clock(), []
    kw = {"poll_s": 15.0, "clock": clock, "sleep": clock.sleep, **kw}
    report = wait_until_ready(
        session, cluster, expected_nodes=expected, timeout_s=timeout_s, progress=lines.append, **kw
    )
    return report, lines


def test_waits_for_the_scheduler_then_the_nodes_then_the_check(slurm: ClusterHandle) -> None:
    client, stub = ssm()
    expect_run(stub, "sinfo -h -N", stderr=SINFO_DOWN, code=1)
    sinfo = "gpu-st-1 gpu* idle\ngpu-st-2 gpu* mixed\ngpu-dy-1 gpu* idle~\ncpu-st-1 cpu allocated\n"
    expect_run(stub, "sinfo -h -N", stdout=sinfo)
    srun_noise = "srun: job 7 queued and waiting for resources\n"
    check = "srun -N1 -p gpu --exclusive /usr/local/bin/kiln-launch check --json"
    expect_run(stub, check, stdout=json.dumps(CHECK_PASSED, indent=2) + "\n", stderr=srun_noise)
    with stub:
        report, lines = wait(FakeSession(ssm=client), slurm, {"gpu": 2, "cpu": 1})
        stub.assert_no_pending_responses()
    assert report == ReadyReport(
        elapsed_s=21.0, nodes={"gpu": 2, "cpu": 1}, check="kiln-launch check passed on partition gpu"
    )
    assert lines == [
        f"2s: the scheduler is not answering (sinfo exited 1: {SINFO_DOWN.strip()})",
        "19s: scheduler answering, nodes up: gpu 2/2, cpu 1/1",
        "19s: running kiln-launch check on a node of partition gpu",
        "21s: ready",
    ]


def test_a_drained_node_the_partition_can_spare_is_a_warning(slurm: ClusterHandle) -> None:
    client, stub = ssm()
    expect_run(stub, "sinfo -h -N", stdout="gpu-st-1 gpu idle\ngpu-st-2 gpu drained\n")
    expect_run(stub, "kiln-launch check --json", stdout=json.dumps(CHECK_PASSED))
    with stub:
        report, _ = wait(FakeSession(ssm=client), slurm, {"gpu": 1})
    assert report.warnings == ("partition gpu: gpu-st-2 is drained",)
    assert report.summary().endswith("warning: partition gpu: gpu-st-2 is drained")


def test_a_drained_node_the_partition_needs_is_named_when_time_runs_out(slurm: ClusterHandle) -> None:
    client, stub = ssm()
    for _ in range(2):
        expect_run(stub, "sinfo -h -N", stdout="gpu-st-1 gpu idle\ngpu-st-2 gpu drained\n")
    with stub, pytest.raises(NotReady) as raised:
        wait(FakeSession(ssm=client), slurm, {"gpu": 2}, timeout_s=10, poll_s=10, command_poll_s=1)
    assert str(raised.value) == "ci-42 is not ready after 11 s: partition gpu has 1/2 nodes up (gpu-st-2 is drained)"


def test_a_failing_kiln_launch_check_is_not_ready_with_its_reason(slurm: ClusterHandle) -> None:
    client, stub = ssm()
    expect_run(stub, "sinfo -h -N", stdout="gpu-st-1 gpu idle\n")
    expect_run(stub, "kiln-launch check --json", stdout=json.dumps(CHECK_FAILED, indent=2), code=1)
    with stub, pytest.raises(NotReady) as raised:
        wait(FakeSession(ssm=client), slurm, {"gpu": 1})
    assert str(raised.value) == (
        "ci-42 is not ready after 4 s: kiln-launch check failed on partition gpu: "
        "efa_devices: 0 EFA devices, the catalog says 32"
    )


def test_the_timeout_names_what_never_became_ready(slurm: ClusterHandle) -> None:
    client, stub = ssm()
    for _ in range(2):
        expect_run(stub, "sinfo -h -N", stderr=SINFO_DOWN, code=1)
    with stub, pytest.raises(NotReady) as raised:
        wait(FakeSession(ssm=client), slurm, {"gpu": 1}, timeout_s=10, poll_s=10, command_poll_s=1)
    stub.assert_no_pending_responses()
    assert str(raised.value) == (
        f"ci-42 is not ready after 11 s: the scheduler is not answering (sinfo exited 1: {SINFO_DOWN.strip()})"
    )


def test_no_head_node_yet_is_waited_for(moto: boto3.Session) -> None:
    cluster = ClusterHandle(
        environment="ci-42",
        region=REGION,
        outputs={"Backend": "parallelcluster", "Orchestrator": "slurm", "ClusterName": "ci-42"},
    )
    with pytest.raises(NotReady, match="waiting for the head node: no running head node of ParallelCluster"):
        wait(FakeSession(), cluster, {"gpu": 1}, timeout_s=30)


@pytest.mark.parametrize(
    ("state", "health"),
    [
        ("idle", "up"),
        ("allocated", "up"),
        ("mixed", "up"),
        ("completing", "up"),
        ("idle~", "pending"),
        ("idle#", "pending"),
        ("future", "pending"),
        ("idle*", "down"),
        ("down*", "down"),
        ("drained", "down"),
        ("draining", "down"),
        ("fail", "down"),
    ],
)
def test_node_states(state: str, health: str) -> None:
    assert SlurmNode("n1", "gpu", state).health == health


def test_sinfo_rows_drop_the_default_partition_mark() -> None:
    text = "gpu-st-1 gpu* idle\ncpu-st-1 cpu mixed\n\nsinfo: warning\n"
    assert parse_sinfo(text) == [SlurmNode("gpu-st-1", "gpu", "idle"), SlurmNode("cpu-st-1", "cpu", "mixed")]


def test_a_check_without_a_report_is_not_a_verdict() -> None:
    assert check_verdict("srun: error: gpu-st-1: task 0: Exited with exit code 127\n", 127) == (
        None,
        "exited 127 without a report (srun: error: gpu-st-1: task 0: Exited with exit code 127)",
    )
    noisy = "srun: job 7 queued\n" + json.dumps(CHECK_PASSED, indent=2) + "\nsrun: done\n"
    assert check_verdict(noisy, 0) == (True, "passed")


def test_eks_is_ready_when_every_node_group_is_active(moto: boto3.Session) -> None:
    eks = boto3.client("eks", region_name=REGION)
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    eks.create_cluster(name="ci-42", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    for name, label, size in (("ng-a1b2", "gpu", 2), ("ng-c3d4", "system", 1)):
        eks.create_nodegroup(
            clusterName="ci-42",
            nodegroupName=name,
            nodeRole=role,
            subnets=["subnet-1"],
            scalingConfig={"minSize": size, "maxSize": size, "desiredSize": size},
            labels={"kiln.io/node-group": label},
        )
    cluster = ClusterHandle(
        environment="ci-42", region=REGION, outputs={"Backend": "eks", "Orchestrator": "eks", "EksClusterName": "ci-42"}
    )
    report, lines = wait(FakeSession(), cluster, {"gpu": 2})
    assert (report.nodes, lines) == ({"gpu": 2, "system": 1}, ["0s: ready"])
    with pytest.raises(NotReady, match="after 30 s: node group cpu does not exist yet"):
        wait(FakeSession(), cluster, {"gpu": 2, "cpu": 1}, timeout_s=30)


def test_hyperpod_on_eks_is_ready_when_its_nodes_run(moto: boto3.Session) -> None:
    def group(name: str, count: int) -> dict[str, Any]:
        return {
            "InstanceGroupName": name,
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": count,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/kiln", "OnCreate": "on_create.sh"},
            "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hyperpod",
            "ThreadsPerCore": 1,
        }

    arn = boto3.client("sagemaker", region_name=REGION).create_cluster(
        ClusterName="ci-42",
        InstanceGroups=[group("gpu", 2)],
        VpcConfig={"SecurityGroupIds": ["sg-12345678"], "Subnets": ["subnet-12345678"]},
    )["ClusterArn"]
    outputs = {"Backend": "hyperpod", "Orchestrator": "eks", "HyperPodClusterArn": arn, "EksClusterName": "ci-42"}
    cluster = ClusterHandle(environment="ci-42", region=REGION, outputs=outputs)
    report, _ = wait(FakeSession(), cluster, {"gpu": 2})
    assert report.nodes == {"gpu": 2}
    with pytest.raises(NotReady, match="instance group gpu has 2/3 nodes running"):
        wait(FakeSession(), cluster, {"gpu": 3}, timeout_s=30)
