"""What kiln connect calls on each platform, recorded against moto: the scenarios IAM's policy is tested with."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from moto.moto_api._internal import moto_api_backend

from kiln.aws.remote.nodes import PARALLELCLUSTER_NAME_TAG, PARALLELCLUSTER_NODE_TYPE_TAG, PCS_NODE_GROUP_TAG
from kiln.connect import iam
from kiln.connect.run import Request, connect, prepare
from kiln.spec import load_spec
from tests.support.connect import (
    CtrlC,
    StubbedSession,
    compute_stack,
    free_port,
    hyperpod_cluster,
    node,
    pcs_cluster,
    stubbed_ssm,
    write_spec,
)
from tests.support.fake_aws import ACCOUNT, REGION


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


def _filled(text: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        text = text.replace(name, value)
    return text
