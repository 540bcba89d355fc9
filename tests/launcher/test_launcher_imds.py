"""Instance type discovery: KILN_INSTANCE_TYPE, the bootstrap's record, else IMDSv2 (a fake one on loopback here)."""

from __future__ import annotations

import http.server
import json

import pytest

from kiln.launcher.imds import lookup
from tests.support.launcher import run_launcher
from tests.support.servers import loopback_server


class FakeImds(http.server.BaseHTTPRequestHandler):
    """IMDSv2 as EC2 serves it: a PUT for a token, then GETs that must carry it."""

    issued = "fake-token-123"
    seen: list[tuple[str, str, str | None]] = []

    def do_PUT(self):  # noqa: N802 (http.server's naming)
        self.seen.append(("PUT", self.path, self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._reply(400, "")
            return
        self._reply(200, self.issued)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.seen.append(("GET", self.path, self.headers.get("X-aws-ec2-metadata-token")))
        if self.headers.get("X-aws-ec2-metadata-token") != self.issued:
            self._reply(401, "")
        elif self.path == "/latest/meta-data/instance-type":
            self._reply(200, "p4d.24xlarge")
        else:
            self._reply(404, "")

    def _reply(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_imds():
    FakeImds.seen = []
    with loopback_server(FakeImds) as url:
        yield url


def test_explicit_variable_wins_without_any_request(fake_imds):
    found = lookup({"KILN_INSTANCE_TYPE": "g5.48xlarge", "KILN_IMDS_ENDPOINT": fake_imds})
    assert (found.name, found.source) == ("g5.48xlarge", "KILN_INSTANCE_TYPE")
    assert FakeImds.seen == []


def test_the_bootstraps_record_answers_before_imds(fake_imds, tmp_path):
    # On multi-user nodes IMDS answers root and kiln's services only: a user's kiln-launch reads the node's record.
    record = tmp_path / "etc/kiln/instance-type"
    record.parent.mkdir(parents=True)
    record.write_text("p5.48xlarge\n")
    found = lookup({"KILN_ROOT": str(tmp_path), "KILN_IMDS_ENDPOINT": fake_imds})
    assert (found.name, found.source) == ("p5.48xlarge", str(record))
    assert FakeImds.seen == []
    # The variable still wins over the record.
    assert lookup({"KILN_ROOT": str(tmp_path), "KILN_INSTANCE_TYPE": "g5.48xlarge"}).name == "g5.48xlarge"


def test_an_empty_record_falls_back_to_imds(fake_imds, tmp_path):
    record = tmp_path / "etc/kiln/instance-type"
    record.parent.mkdir(parents=True)
    record.write_text("\n")
    found = lookup({"KILN_ROOT": str(tmp_path), "KILN_IMDS_ENDPOINT": fake_imds})
    assert found.name == "p4d.24xlarge" and found.source == f"imds {fake_imds}"


def test_imdsv2_token_then_instance_type(fake_imds):
    found = lookup({"KILN_IMDS_ENDPOINT": fake_imds})
    assert found.name == "p4d.24xlarge"
    assert found.source == f"imds {fake_imds}"
    assert [(method, path) for method, path, _ in FakeImds.seen] == [
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/instance-type"),
    ]
    assert FakeImds.seen[1][2] == FakeImds.issued


def test_unreachable_imds_gives_no_type_and_a_reason(refused_endpoint):
    found = lookup({"KILN_IMDS_ENDPOINT": refused_endpoint})
    assert found.name is None
    assert "refused" in found.note.lower()


def test_non_http_endpoint_is_refused():
    found = lookup({"KILN_IMDS_ENDPOINT": "file:///etc/passwd"})
    assert found.name is None
    assert "http(s)" in found.note


def test_launcher_uses_imds_for_the_preset(fake_imds, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    done = run_launcher(["--nproc-per-node", "1", "--dry-run", str(script)], env={"KILN_IMDS_ENDPOINT": fake_imds})
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["instance_type"]["name"] == "p4d.24xlarge"
    assert plan["nccl_env"]["set"]["NCCL_SOCKET_IFNAME"]["source"] == "preset p4d.24xlarge"
    # Workers inherit the answer rather than asking IMDS again.
    assert plan["worker_env"]["KILN_INSTANCE_TYPE"] == "p4d.24xlarge"
