"""With spec session_logs, `kiln connect`'s shell names the cluster's own Session document (--document-name), which
logs it; without, it uses the account's default and kiln never names or changes that one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from kiln.aws.remote.nodes import PCS_NODE_GROUP_TAG
from kiln.connect import iam
from kiln.contracts.ssm_documents import DEFAULT_SHELL_DOCUMENT, session_document
from tests.support import connect_scenarios
from tests.support.connect import Tools, node, pcs_cluster, run_connect, start_session, write_spec
from tests.support.connect_scenarios import SCENARIOS, Recorded, _filled
from tests.support.fake_aws import ACCOUNT, REGION


@pytest.mark.parametrize("destination", ["s3", "cloudwatch"])
def test_the_shell_takes_the_clusters_logged_session_document(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, destination: str
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    spec = write_spec(tmp_path, "pcs")
    extra = "storage:\n  bucket: {name: lab-data}\n  lustre: {deployment: SCRATCH_2, storage_gib: 1200}\n"
    text = spec.read_text().replace("storage:\n  lustre: {deployment: SCRATCH_2, storage_gib: 1200}\n", extra)
    spec.write_text(text + f"session_logs: {{destination: {destination}}}\n")
    monkeypatch.setenv("FAKE_SHELL", "exit:0")
    code, out, err = run_connect(moto, spec)
    assert code == 0, err
    assert tools.argvs() == [start_session(login, "--document-name", "kiln-lab-session")]
    assert session_document("lab") == "kiln-lab-session" != DEFAULT_SHELL_DOCUMENT
    assert err == (
        f"kiln connect: a Session Manager shell on PCS login node {login}, logged by kiln-lab-session; `exit` ends it\n"
    )


def test_without_session_logs_no_document_is_named(
    moto: boto3.Session, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcs_cluster(moto)
    login = node({PCS_NODE_GROUP_TAG: "pcs_login"})
    monkeypatch.setenv("FAKE_SHELL", "exit:0")
    code, _, _ = run_connect(moto, write_spec(tmp_path, "pcs"))
    assert code == 0
    [argv] = tools.argvs()
    assert argv == start_session(login) and "--document-name" not in argv


@pytest.mark.parametrize("platform", iam.SHELL_PLATFORMS)
@pytest.mark.usefixtures("account")
def test_with_session_logs_the_iam_policy_is_what_kiln_connect_calls(
    tools: Tools, tmp_path: Path, platform: iam.Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster with session_logs: the shell names the cluster's own document, which the policy grants instead of
    the account's default; kiln's own calls are the same (the scenarios of tests/connect/test_iam.py, each spec
    with session_logs)."""

    def logged_spec(directory: Path, kind: str, **options: Any) -> Path:
        path = plain_spec(directory, kind, **options)
        path.write_text(path.read_text() + "session_logs: {destination: cloudwatch}\n")
        return path

    plain_spec = write_spec
    monkeypatch.setattr(connect_scenarios, "write_spec", logged_spec)
    recorded = Recorded()
    values = {
        "REGION": REGION,
        "ACCOUNT": ACCOUNT,
        "CLUSTER": "lab",
        **SCENARIOS[platform](recorded, tmp_path),
    }
    assert recorded.actions == iam.calls(platform, iam.KILN, session_logs=True) == iam.calls(platform, iam.KILN)
    sessions = [argv for argv in tools.argvs() if argv[:3] == ["aws", "ssm", "start-session"]]
    # Every session names its document: none falls back to the account's default, unlogged shell.
    assert sessions and all("--document-name" in argv for argv in sessions)
    documents = {argv[argv.index("--document-name") + 1] for argv in sessions}
    assert documents == {_filled(name, values) for name in iam.session_documents(platform, session_logs=True)}
    assert documents == {"kiln-lab-session", "AWS-StartPortForwardingSession"}
    assert iam.calls(platform, iam.PLUGIN, session_logs=True) - iam.calls(platform, iam.PLUGIN) == {
        "kms:GenerateDataKey"
    }
