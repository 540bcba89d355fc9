"""Builders for the `kiln connect` tests: specs per platform, the compute stack and nodes in moto, and
stand-ins for the programs kiln runs (the AWS CLI with its plugin, kubectl) that record what they were given."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from kiln.connect.run import Request, connect, prepare
from kiln.spec import load_spec
from tests.support.ci import hyperpod_instance_group, launch, make_stack
from tests.support.fake_aws import REGION

SESSION_ID = "kiln-test-0123"


SPECS = {
    "pcs": """\
compute:
  backend: pcs
  login_nodes: {{instance_type: m5.xlarge, count: {login}}}
  groups:
    - {{name: gpu, instance_type: g6.12xlarge, min_count: 1, max_count: 2}}
""",
    "parallelcluster": """\
compute:
  backend: parallelcluster
  head_node: {{instance_type: m5.2xlarge}}
  login_nodes: {{instance_type: m5.xlarge, count: {login}}}
  groups:
    - {{name: gpu, instance_type: g6.12xlarge, min_count: 0, max_count: 2}}
""",
    "hyperpod": """\
compute:
  backend: hyperpod
  orchestrator: slurm
  head_node: {{instance_type: m5.2xlarge}}
  login_nodes: {{instance_type: m5.xlarge, count: {login}}}
  groups:
    - {{name: gpu, instance_type: g6.12xlarge, min_count: 1, max_count: 1}}
""",
    "eks": """\
network: {{second_availability_zone: us-east-1b}}
compute:
  backend: eks
  groups:
    - {{name: gpu, instance_type: g6.12xlarge, min_count: 0, max_count: 2}}
""",
    "hyperpod-eks": """\
network: {{second_availability_zone: us-east-1b}}
compute:
  backend: hyperpod
  orchestrator: eks
  groups:
    - {{name: gpu, instance_type: g6.12xlarge, min_count: 1, max_count: 1}}
""",
}


COMMON = """\
name: lab
region: us-east-1
availability_zone: us-east-1a
storage:
  lustre: {deployment: SCRATCH_2, storage_gib: 1200}
"""


def write_spec(directory: Path, platform: str, *, login: int = 1, code_server: bool = True, user: str = "") -> Path:
    """Write a spec named lab for PLATFORM (with LOGIN login nodes where it has them) to DIRECTORY; return its path."""
    text = COMMON + SPECS[platform].format(login=login)
    if code_server:
        text += f"code_server: {{user: {user}}}\n" if user else "code_server: {}\n"
    path = directory / "cluster.yaml"
    path.write_text(text)
    return path


# The compute stack's outputs per platform, as kiln.stacks.compute writes them (ids filled in by the tests).
def compute_stack(session: boto3.Session, outputs: dict[str, str], name: str = "lab") -> None:
    """Create NAME's compute stack with OUTPUTS."""
    make_stack(session, f"{name}-compute", [{"Key": "kiln:cluster", "Value": name}], outputs=outputs)


def pcs_cluster(session: boto3.Session, login_group: str | None = "pcs_login") -> dict[str, str]:
    outputs = {"Backend": "pcs", "Orchestrator": "none", "ClusterName": "lab", "PcsClusterId": "pcs_abc"}
    if login_group:
        outputs["PcsLoginNodeGroupId"] = login_group
    compute_stack(session, outputs)
    return outputs


def node(tags: dict[str, str], *, state: str = "running") -> str:
    """Launch an instance carrying TAGS in moto (stopped when STATE says so); return its id."""
    return launch(tags, state=state)


def hyperpod_cluster(session: boto3.Session, groups: dict[str, int]) -> str:
    """Create HyperPod cluster lab with GROUPS (name: count) in moto and its compute stack; return its ARN."""
    sagemaker = session.client("sagemaker")

    arn = sagemaker.create_cluster(
        ClusterName="lab",
        InstanceGroups=[hyperpod_instance_group(name, count) for name, count in groups.items()],
        VpcConfig={"SecurityGroupIds": ["sg-12345678"], "Subnets": ["subnet-12345678"]},
    )["ClusterArn"]
    compute_stack(
        session, {"Backend": "hyperpod", "Orchestrator": "slurm", "ClusterName": "lab", "HyperPodClusterArn": arn}
    )
    return arn


FAKE_AWS = """\
#!{python}
# The AWS CLI's `ssm start-session` as kiln sees it. A shell (no --parameters: the account's default document, or a
# cluster's own Session document) records whether its standard streams
# are a terminal, then acts out $FAKE_SHELL: "exit:N" ends with N; "interactive" reads lines until "exit" (then ends
# with $FAKE_SHELL_EXIT), telling each Ctrl-C it gets, as the plugin passes Ctrl-C to the node's shell. A port forward
# starts the plugin (kept running, in its process group), then acts out $FAKE_FORWARD: "listen" (default) prints the
# plugin's lines and answers HTTP on localPortNumber with what it forwards to; "end" listens, then the session ends
# on its own; any other text is printed on stderr and the CLI exits 254, as its own errors do.
import json, os, signal, socket, subprocess, sys, time
args = sys.argv[1:]
plugin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "session-manager-plugin")

def record(**fields):
    entry = {{"argv": ["aws", *args], "pid": os.getpid(), "pgid": os.getpgid(0),
             "profile": os.environ.get("AWS_PROFILE"), "key": os.environ.get("AWS_ACCESS_KEY_ID"), **fields}}
    with open(os.environ["FAKE_RECORD"], "a") as log:
        log.write(json.dumps(entry) + "\\n")

if args[:2] != ["ssm", "start-session"]:
    sys.exit(2)
if "--parameters" not in args:
    record(tty=[os.isatty(fd) for fd in (0, 1, 2)])
    mode = os.environ.get("FAKE_SHELL", "exit:0")
    if mode.startswith("exit:"):
        sys.exit(int(mode[5:]))
    interrupts = []
    signal.signal(signal.SIGINT, lambda *_: interrupts.append(1) or print("(Ctrl-C sent to the node)", flush=True))
    print("Starting session with SessionId: {session_id}", flush=True)
    time.sleep(0.5)
    print("fake shell ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    record(ended=True, interrupts=len(interrupts))
    sys.exit(int(os.environ.get("FAKE_SHELL_EXIT", "0")))
parameters = json.loads(args[args.index("--parameters") + 1])
child = subprocess.Popen([plugin, "--hold"])
record(parameters=parameters, pids=[os.getpid(), child.pid])
mode = os.environ.get("FAKE_FORWARD", "listen")
if mode not in ("listen", "end"):
    print(mode, file=sys.stderr, flush=True)
    sys.exit(254)
print("\\nStarting session with SessionId: {session_id}", flush=True)
port = int(parameters["localPortNumber"][0])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen()
print("Port %d opened for sessionId {session_id}." % port, flush=True)
print("Waiting for connections...", flush=True)
if mode == "end":
    time.sleep(0.5)
    print("Session ended: idle timeout", file=sys.stderr, flush=True)
    sys.exit(0)
while True:
    connection, _ = listener.accept()
    try:
        connection.recv(65536)
        body = json.dumps({{"to": parameters.get("host", ["the node"])[0], "port": parameters["portNumber"][0]}})
        connection.sendall(("HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n%s"
                            % (len(body), body)).encode())
    except OSError:
        pass
    connection.close()
"""


FAKE_PLUGIN = """\
#!{python}
# session-manager-plugin: its version, or (--hold) a stand-in for the running plugin that the CLI started.
import sys, time
if sys.argv[1:] == ["--hold"]:
    time.sleep(300)
print("1.2.707.0")
"""


FAKE_KUBECTL = """\
#!{python}
# kubectl as kiln runs it: records its arguments and the kubeconfig it was given (path, mode, content). port-forward
# acts out $FAKE_KUBECTL: "listen" (default) prints kubectl's lines and answers HTTP on the local port; any other text
# goes to stderr and kubectl exits 1.
import json, os, socket, stat, sys
args = sys.argv[1:]
path = os.environ.get("KUBECONFIG", "")
config = json.load(open(path)) if path and os.path.exists(path) else None
mode_bits = oct(stat.S_IMODE(os.stat(path).st_mode)) if config is not None else None
with open(os.environ["FAKE_RECORD"], "a") as log:
    log.write(json.dumps({{"argv": ["kubectl", *args], "pid": os.getpid(), "kubeconfig": path, "mode": mode_bits,
                          "config": config}}) + "\\n")
mode = os.environ.get("FAKE_KUBECTL", "listen")
if mode != "listen":
    print(mode, file=sys.stderr, flush=True)
    sys.exit(1)
local, remote = args[-1].split(":")
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(local)))
listener.listen()
print("Forwarding from 127.0.0.1:%s -> %s" % (local, remote), flush=True)
print("Forwarding from [::1]:%s -> %s" % (local, remote), flush=True)
while True:
    connection, _ = listener.accept()
    try:
        connection.recv(65536)
        body = json.dumps({{"to": args[args.index("port-forward") + 3], "port": remote}})
        connection.sendall(("HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n%s"
                            % (len(body), body)).encode())
    except OSError:
        pass
    connection.close()
"""


@dataclass
class Tools:
    """The stand-ins' directory and their record."""

    bin: Path
    record: Path

    def calls(self) -> list[dict[str, Any]]:
        """Return what the stand-ins recorded, one entry per start (and a shell's end), in order."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls() if "ended" not in call]


def install_tools(directory: Path, names: tuple[str, ...]) -> Tools:
    """Write the stand-ins NAMES (aws, session-manager-plugin, kubectl) to DIRECTORY/bin."""
    scripts = {"aws": FAKE_AWS, "session-manager-plugin": FAKE_PLUGIN, "kubectl": FAKE_KUBECTL}
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        script = bin_dir / name
        script.write_text(scripts[name].format(python=sys.executable, session_id=SESSION_ID))
        script.chmod(0o755)
    return Tools(bin_dir, directory / "calls.jsonl")


class StubbedSession:
    """A boto3 session whose clients for some services are given (a Stubber's), the rest BASE's (moto)."""

    profile_name = "default"

    def __init__(self, base: boto3.Session, **clients: Any) -> None:
        self.base, self.clients = base, clients
        self.region_name = base.region_name

    def client(self, service: str, region_name: str | None = None) -> Any:
        return self.clients.get(service) or self.base.client(service, region_name=region_name)


def stubbed_ssm(session_id: str = SESSION_ID) -> tuple[Any, Any]:
    """Return an SSM client and its Stubber expecting TerminateSession of SESSION_ID (moto has no sessions)."""

    client = boto3.client("ssm", region_name=REGION)
    stub = Stubber(client)
    stub.add_response("terminate_session", {"SessionId": session_id}, {"SessionId": session_id})
    return client, stub


def free_port() -> int:
    """Return a loopback port nothing listens on now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class CtrlC:
    """Once OUT shows a forwarded URL: fetch it (its JSON answer in ANSWERS), then send this process SIGINT, as Ctrl-C
    on the terminal does. On a thread, so the test's main thread is inside kiln connect meanwhile."""

    def __init__(self, out: Any, timeout_s: float = 60.0) -> None:
        import threading

        self.out, self.timeout_s = out, timeout_s
        self.answers: list[Any] = []
        self.sent = False
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> CtrlC:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        import signal

        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            found = re.search(r"http://127\.0\.0\.1:\d+/", self.out.getvalue())
            if found:
                try:
                    with urllib.request.urlopen(found.group(0), timeout=10) as answer:  # noqa: S310 - loopback
                        self.answers.append(json.loads(answer.read()))
                finally:
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)


def run_connect(session: Any, spec_path: Path, **fields: Any) -> tuple[int, str, str]:
    """Run kiln connect in this process as its CLI does after parsing; return the exit code, stdout and stderr."""
    spec = load_spec(spec_path)
    request = Request(spec_path=str(spec_path), **fields)
    out, err = io.StringIO(), io.StringIO()
    place = prepare(spec, request)
    with CtrlC(out) if request.vscode else _nothing():
        try:
            code = connect(spec, request, place, session, out=out, err=err, poll_s=0.05)
        except KeyboardInterrupt:
            pytest.fail(f"Ctrl-C escaped kiln connect; it printed {out.getvalue()!r} {err.getvalue()!r}")
    return code, out.getvalue(), err.getvalue()


def start_session(target: str, *extra: str) -> list[str]:
    return ["aws", "ssm", "start-session", "--target", target, *extra, "--region", REGION]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
