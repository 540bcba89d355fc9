"""`kiln hyperpod update-software`: nodes older than their lifecycle scripts, and UpdateClusterSoftware on them.

SageMaker and S3 answer through botocore Stubbers (moto has no HyperPod): each test queues the calls it expects, in
order, and the stubber fails on any other call, so "nothing started" is checked, not assumed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from kiln.catalog.platforms import service_fact
from kiln.cli.main import main
from kiln.hyperpod.software import plan_update, update_request
from tests.support.fake_aws import aws_env as aws_env  # autouse: fake credentials, no user AWS config, a region
from tests.support.paths import ROOT

REGION = "us-east-2"  # the example's
CLUSTER = "llm-hp-slurm"
ARN = f"arn:aws:sagemaker:{REGION}:123456789012:cluster/abcdef123456"
BUCKET = "kiln-lifecycle-bucket"
PREFIX = f"hyperpod/{CLUSTER}/lifecycle/"
SCRIPTS = f"s3://{BUCKET}/{PREFIX}"
IMAGE = "ami-0123456789abcdef0"
WRITTEN = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
BEFORE, AFTER = WRITTEN - timedelta(days=3), WRITTEN + timedelta(minutes=20)
TYPES = {"controller": "ml.m5.8xlarge", "login": "ml.m5.2xlarge", "p5": "ml.p5.48xlarge"}


def _group(name: str, *, image: str | None = IMAGE) -> dict[str, Any]:
    group = {
        "InstanceGroupName": name,
        "InstanceType": TYPES[name],
        "CurrentCount": 1,
        "TargetCount": 1,
        "LifeCycleConfig": {"SourceS3Uri": SCRIPTS, "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/kiln-hyperpod",
    }
    if image:
        group["CurrentImageId"] = image
    return group


def _node(group: str, instance: str, launched: datetime, updated: datetime | None = None) -> dict[str, Any]:
    node = {
        "InstanceGroupName": group,
        "InstanceId": instance,
        "InstanceType": TYPES[group],
        "LaunchTime": launched,
        "InstanceStatus": {"Status": "Running"},
    }
    if updated:
        node["LastSoftwareUpdateTime"] = updated
    return node


class Clients:
    """A SageMaker and an S3 client with stubbers, handed out as boto3.Session would."""

    def __init__(self) -> None:
        self.sagemaker = boto3.client("sagemaker", region_name=REGION)
        self.s3 = boto3.client("s3", region_name=REGION)
        self.sm_stub, self.s3_stub = Stubber(self.sagemaker), Stubber(self.s3)

    def cluster(self, groups: list[dict[str, Any]], status: str = "InService") -> None:
        self.sm_stub.add_response(
            "describe_cluster",
            {"ClusterArn": ARN, "ClusterName": CLUSTER, "ClusterStatus": status, "InstanceGroups": groups},
            {"ClusterName": CLUSTER},
        )

    def nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.sm_stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": nodes}, {"ClusterName": CLUSTER})

    def scripts(self, *written: datetime) -> None:
        contents = [{"Key": f"{PREFIX}file{i}", "LastModified": when} for i, when in enumerate(written)]
        self.s3_stub.add_response(
            "list_objects_v2", {"Contents": contents, "IsTruncated": False}, {"Bucket": BUCKET, "Prefix": PREFIX}
        )

    def session(self, region_name: str | None = None, **_: object) -> Any:
        clients = self

        class Session:
            def __init__(self, region_name: str | None = None) -> None:
                self.region_name = region_name

            def client(self, service: str, region_name: str | None = None) -> Any:
                return {"sagemaker": clients.sagemaker, "s3": clients.s3}[service]

        return Session(region_name)

    def __enter__(self) -> Clients:
        self.sm_stub.activate()
        self.s3_stub.activate()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sm_stub.assert_no_pending_responses()
        self.s3_stub.assert_no_pending_responses()
        self.sm_stub.deactivate()
        self.s3_stub.deactivate()


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Clients:
    made = Clients()
    monkeypatch.setattr(boto3, "Session", made.session)
    return made


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "hyperpod.yaml"
    path.write_text((ROOT / "examples" / "p5-hyperpod-slurm.yaml").read_text())
    return path


def _run(spec: Path, *extra: str) -> int:
    return main(["hyperpod", "update-software", "--spec", str(spec), *extra])


def _stale_cluster(clients: Clients) -> None:
    """Controller and login booted after the scripts were written; one of two p5 nodes before."""
    clients.cluster([_group("controller"), _group("login"), _group("p5")])
    clients.nodes(
        [
            _node("controller", "i-0c0000000000000001", AFTER),
            _node("login", "i-0c0000000000000002", AFTER),
            _node("p5", "i-0c0000000000000003", BEFORE),
            _node("p5", "i-0c0000000000000004", AFTER),
        ]
    )
    clients.scripts(WRITTEN - timedelta(days=9), WRITTEN)


def test_older_nodes_are_listed_and_nothing_starts_without_yes(clients, spec_file, capsys) -> None:
    with clients:
        _stale_cluster(clients)
        assert _run(spec_file) == 1
    out = capsys.readouterr().out
    assert f"cluster {CLUSTER} (InService)" in out
    assert "controller: current (1 nodes" in out and "login: current" in out
    assert "p5: 1 of 2 nodes booted before the scripts in" in out and "i-0c0000000000000003" in out
    assert "i-0c0000000000000004" not in out
    # What the update does, from the data, with its source; and how to start it.
    assert service_fact("hyperpod", "update_software").source in out
    assert "replaces each node's root volume and does not drain running jobs" in out and "--yes" in out


def test_yes_reruns_the_scripts_on_the_groups_with_older_nodes_on_the_image_they_run(clients, spec_file, capsys):
    with clients:
        _stale_cluster(clients)
        clients.sm_stub.add_response(
            "update_cluster_software",
            {"ClusterArn": ARN},
            {"ClusterName": CLUSTER, "InstanceGroups": [{"InstanceGroupName": "p5"}], "ImageId": IMAGE},
        )
        assert _run(spec_file, "--yes") == 0
    assert f"started UpdateClusterSoftware on p5 of {ARN} (image {IMAGE})" in capsys.readouterr().out


def test_a_software_update_after_the_scripts_counts_as_booting_with_them(clients, spec_file, capsys) -> None:
    with clients:
        clients.cluster([_group("p5")])
        clients.nodes([_node("p5", "i-0c0000000000000003", BEFORE, updated=AFTER)])
        clients.scripts(WRITTEN)
        assert _run(spec_file, "--yes") == 0  # nothing to update: no UpdateClusterSoftware stubbed
    assert "every node runs the lifecycle scripts in S3: nothing to do" in capsys.readouterr().out


def test_group_on_hyperpods_own_image_is_updated_without_an_image_id(clients) -> None:
    with clients:
        clients.cluster([_group("p5", image=None)])
        clients.nodes([_node("p5", "i-0c0000000000000003", BEFORE)])
        clients.scripts(WRITTEN)
        plan = plan_update(clients.sagemaker, clients.s3, CLUSTER, REGION)
    assert update_request(plan) == {"ClusterName": CLUSTER, "InstanceGroups": [{"InstanceGroupName": "p5"}]}


@pytest.mark.parametrize(
    ("setup", "extra", "code", "line"),
    [
        ("missing", (), 1, f"no HyperPod cluster {CLUSTER} in {REGION}: deploy the spec first"),
        ("updating", ("--yes",), 1, f"cluster {CLUSTER} is Updating: wait until it is InService, then run again"),
        ("two-images", ("--yes",), 1, "the groups boot different images: login (ami-0fedcba9876543210), p5"),
        ("unknown-group", ("--group", "gpu"), 2, f"--group gpu: cluster {CLUSTER} has the groups p5"),
        ("no-list", (), 1, f"s3:ListBucket {BUCKET} was denied (AccessDenied)"),
        ("no-scripts", (), 1, f"no lifecycle scripts under {SCRIPTS}: deploy the spec again to write them"),
    ],
)
def test_what_stops_it_is_one_line(clients, spec_file, capsys, setup, extra, code, line) -> None:
    with clients:
        if setup == "missing":
            clients.sm_stub.add_client_error(
                "describe_cluster", service_error_code="ResourceNotFound", service_message="not found"
            )
        elif setup in ("updating", "two-images"):
            groups = (
                [_group("p5")]
                if setup == "updating"
                else [_group("login", image="ami-0fedcba9876543210"), _group("p5")]
            )
            clients.cluster(groups, status="Updating" if setup == "updating" else "InService")
            clients.nodes(
                [_node(g["InstanceGroupName"], f"i-0c00000000000000{i}1", BEFORE) for i, g in enumerate(groups)]
            )
            clients.scripts(WRITTEN)
        elif setup == "unknown-group":
            clients.cluster([_group("p5")])
        else:
            clients.cluster([_group("p5")])
            clients.nodes([_node("p5", "i-0c0000000000000003", BEFORE)])
            if setup == "no-list":
                clients.s3_stub.add_client_error(
                    "list_objects_v2", service_error_code="AccessDenied", http_status_code=403
                )
            else:
                clients.s3_stub.add_response(
                    "list_objects_v2", {"IsTruncated": False}, {"Bucket": BUCKET, "Prefix": PREFIX}
                )
        assert _run(spec_file, *extra) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kiln hyperpod update-software: ") and line in err[0], err


def test_a_spec_of_another_backend_is_refused(tmp_path, capsys) -> None:
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(data))
    assert _run(path) == 2
    assert capsys.readouterr().err.strip() == (
        "kiln hyperpod update-software: the spec's backend is pcs: this command is for hyperpod"
    )


def test_the_facts_it_states_are_the_data() -> None:
    facts = service_fact("hyperpod", "update_software").value
    assert facts == {
        "reruns_lifecycle": True,
        "replaces_root_volume": True,
        "drains_jobs": False,
        "custom_image_needs_image_id": True,
    }
    reruns = service_fact("hyperpod", "lifecycle_reruns").value
    assert reruns["UpdateCluster"] == "new instance groups only"
