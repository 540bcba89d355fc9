"""Reach a deployed cluster from this machine: a shell on the node you log in to, or code-server forwarded here.

Which node: the one code-server runs on (kiln.catalog.code_server.code_server_place), which is also where you log in,
so the shell goes there too:
- PCS: a login node (an instance of the login node group, tag aws:pcs:compute-node-group-id).
- ParallelCluster: a login node when the spec has login nodes (tags parallelcluster:cluster-name and
  parallelcluster:node-type LoginNode), else the head node (node-type HeadNode).
- HyperPod with Slurm: a node of the `login` instance group when the spec has login nodes, else of `controller`;
  Session Manager names it sagemaker-cluster:<cluster-id>_<group>-<instance-id>.
- EKS, and HyperPod orchestrated by EKS: no node to log in to (kubectl is the way in); --vscode runs
  `kubectl port-forward` to code-server's Deployment with the kubeconfig kiln.aws.remote.kubectl writes (a private API
  endpoint is reached through a system node, as `kiln ci run` reaches it).
The oldest running candidate, or the one --node names by its instance id. The cluster is the spec's: its compute
stack `<name>-compute` names it (kiln.aws.remote.cluster.ClusterHandle).

How (never SSH, never an open port):
- the shell: `aws ssm start-session --target T --region R` in the foreground on this terminal; its exit code is kiln's.
- --vscode: `aws ssm start-session --document-name AWS-StartPortForwardingSession` from 127.0.0.1:LOCAL here to
  127.0.0.1:8080 on the node, where code-server listens, until Ctrl-C; then the AWS CLI and its plugin (their own
  process group) are stopped and the session ended. code-server asks for the password it keeps in its config file
  on the node; kiln prints where that is and how to read it.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, cast

from kiln.aws.errors import one_line
from kiln.aws.remote.cluster import ClusterHandle, NotRunning, RemoteError
from kiln.aws.remote.forward import port_forward
from kiln.aws.remote.nodes import (
    PARALLELCLUSTER_HEAD_NODE,
    PARALLELCLUSTER_LOGIN_NODE,
    Target,
    hyperpod_node,
    parallelcluster_node,
    pcs_login_node,
)
from kiln.aws.remote.processes import cli_environment
from kiln.aws.remote.transport import run_command
from kiln.catalog.code_server import (
    CODE_SERVER_DEPLOYMENT,
    CODE_SERVER_IMAGE_USER,
    CODE_SERVER_NAMESPACE,
    CODE_SERVER_PORT,
    CodeServerPlace,
    code_server_place,
    config_path,
    node_user,
)
from kiln.contracts.backends import HYPERPOD_CONTROLLER_GROUP, HYPERPOD_LOGIN_GROUP, PARALLELCLUSTER, PCS
from kiln.contracts.errors import Failure, InputError
from kiln.contracts.outputs import ComputeOutput
from kiln.contracts.ssm_documents import session_document
from kiln.spec import ClusterSpec
from kiln.spec.problems import printable

if TYPE_CHECKING:
    from kiln.aws.session import Session

AWS_CLI = "aws"
PLUGIN = "session-manager-plugin"
KUBECTL = "kubectl"
# What each program is, why kiln connect needs it, and AWS's page that installs it.
TOOLS = {
    AWS_CLI: (
        "the AWS CLI v2",
        "kiln connect starts Session Manager sessions with `aws ssm start-session`",
        "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html",
    ),
    PLUGIN: (
        "the Session Manager plugin",
        "the AWS CLI runs it for every Session Manager session",
        "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html",
    ),
    KUBECTL: (
        "kubectl",
        "kiln connect --vscode forwards a port to the code-server pod with `kubectl port-forward`",
        "https://docs.aws.amazon.com/eks/latest/userguide/install-kubectl.html",
    ),
}
# Where forwarded ports listen here: the plugin and kubectl listen on this machine's loopback only.
LOCAL_HOST = "127.0.0.1"
# The first line of the EKS forward's output: the kubeconfig it runs with (for the password's command), not shown.
KUBECONFIG_LINE = "KILN-KUBECONFIG"


class ConnectInputError(InputError):
    """An argument or a spec kiln connect cannot act on; str() is one line (exit 2)."""


class MissingTool(Failure):
    """A program kiln connect runs is not on PATH; str() is one line naming what to install (exit 1)."""


@dataclass(frozen=True)
class Request:
    """What `kiln connect` was asked for."""

    spec_path: str
    vscode: bool = False
    node: str | None = None
    region: str | None = None
    profile: str | None = None
    # --vscode: the port on this machine (default: code-server's own).
    local_port: int = CODE_SERVER_PORT


@dataclass(frozen=True)
class Node:
    """The node a session goes to: its Session Manager target and its instance id (as --node takes it)."""

    target: Target
    instance: str


def prepare(spec: ClusterSpec, request: Request) -> CodeServerPlace:
    """Return where REQUEST goes on SPEC's cluster, after every check that needs no AWS call: the spec allows it, the
    programs it runs are on PATH, the local port is free. ConnectInputError or MissingTool otherwise."""
    place = place_of(spec, request)
    if place == "pod":
        require_tools(AWS_CLI, KUBECTL)
    else:
        require_tools(AWS_CLI, PLUGIN)
    if request.vscode:
        require_free_port(request.local_port)
    return place


def place_of(spec: ClusterSpec, request: Request) -> CodeServerPlace:
    """Return where REQUEST goes on SPEC's cluster (login, controller, pod); ConnectInputError when nowhere."""
    if request.vscode and spec.code_server is None:
        raise ConnectInputError(
            "--vscode: the spec has no code_server section, so no node runs code-server: add `code_server: {}` to "
            "it and redeploy"
        )
    compute, platform = spec.compute, spec.platform
    place = code_server_place(
        kubernetes=platform.uses_kubernetes,
        controller="controller" in platform.roles,
        login_nodes=compute.login_nodes.count,
    )
    if place is None:
        raise ConnectInputError(
            "the PCS cluster has no login node (compute.login_nodes.count is 0) and PCS runs its controller itself, "
            "so there is no node to log in to: set compute.login_nodes.count to 1 or more and redeploy"
        )
    if place == "pod":
        if not request.vscode:
            raise ConnectInputError(
                f"{_described(compute.backend, spec.effective_orchestrator)} cluster has no node to log in to: use "
                f"kubectl (a kubeconfig from `aws eks update-kubeconfig --name {spec.name}`), or `kiln connect "
                "--vscode` for code-server"
            )
        if request.node is not None:
            raise ConnectInputError(
                f"--node: on Kubernetes code-server runs in a pod (deployment/{CODE_SERVER_DEPLOYMENT} in "
                f"namespace {CODE_SERVER_NAMESPACE}), not on a node to choose; leave --node out"
            )
    return place


def require_tools(*names: str) -> None:
    """Raise MissingTool for the first of NAMES not on PATH."""
    for name in names:
        if shutil.which(name) is None:
            raise MissingTool(missing_tool(name))


def missing_tool(name: str) -> str:
    """Return the one line for NAME not on PATH: what it is, why it is needed and where AWS says to get it."""
    what, why, page = TOOLS[name]
    return f"{what} (`{name}`) is not on PATH: {why}; install it: {page}"


def require_free_port(port: int) -> None:
    """ConnectInputError when nothing can listen on 127.0.0.1:PORT here (in use, or privileged)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the plugin and kubectl listen (Go sets SO_REUSEADDR): connections of an earlier forward that linger in
        # TIME_WAIT do not count, a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOCAL_HOST, port))
            probe.listen()
        except OSError as error:
            raise ConnectInputError(
                f"--local-port {port}: cannot listen on {LOCAL_HOST}:{port} here ({error.strerror or error}); pass "
                "a free port"
            ) from None


def deploy_command(spec_path: str) -> str:
    """Return the command that deploys the spec at SPEC_PATH, for messages about a stack that is not there."""
    return f"npx cdk deploy --all -c {shlex.quote('spec=' + printable(spec_path))}"


def connect(
    spec: ClusterSpec,
    request: Request,
    place: CodeServerPlace,
    session: Session,
    *,
    out: TextIO,
    err: TextIO,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Find SPEC's cluster from its compute stack and open what REQUEST asks for at PLACE (see prepare); return the
    exit code: the shell's, or 0 when Ctrl-C ended a forward."""
    region = session.region_name
    cluster = ClusterHandle.from_stack(session, spec.name, region, deployed_by=deploy_command(request.spec_path))
    _check_cluster(cluster, spec)
    if place == "pod":
        return forward_pod(session, cluster, request, out=out, err=err, poll_s=poll_s)
    try:
        found = find_node(session, cluster, place, request.node)
    except NotRunning as exc:
        raise ConnectInputError(
            f"--node {printable(exc.node)[:80]}: not a running {exc.what}; running: {', '.join(exc.running)}"
        ) from None
    if request.vscode:
        assert spec.code_server is not None  # place_of refused --vscode without it
        user = node_user(spec.code_server.user)
        return forward_code_server(session, found, user, request, out=out, err=err, poll_s=poll_s, clock=clock)
    # With spec session_logs, the shell takes the cluster's own Session document, which logs it; else the account's.
    document = session_document(spec.name) if spec.session_logs is not None else None
    return open_shell(session, found.target, err=err, document=document)


def find_node(session: Session, cluster: ClusterHandle, place: CodeServerPlace, node: str | None) -> Node:
    """Return the running node at PLACE (login or controller) of CLUSTER: NODE if it is one (NotRunning if not), else
    the oldest; Unreachable when none runs yet."""
    platform = cluster.platform
    if platform is PCS:
        if cluster.pcs_login_node_group_id is None:
            raise RemoteError(
                f"stack {cluster.stack_name} has no output {ComputeOutput.PCS_LOGIN_NODE_GROUP_ID.value}: the PCS "
                "cluster was deployed without "
                f"login nodes; redeploy it with `{cluster.deployed_by}`"
            )
        target = pcs_login_node(session, cluster, node=node)
        return Node(target, target.address)
    if platform is PARALLELCLUSTER:
        kind = PARALLELCLUSTER_LOGIN_NODE if place == "login" else PARALLELCLUSTER_HEAD_NODE
        target = parallelcluster_node(session, cluster, node_type=kind, node=node)
        return Node(target, target.address)
    group = HYPERPOD_LOGIN_GROUP if place == "login" else HYPERPOD_CONTROLLER_GROUP
    target = hyperpod_node(session, cluster, group=group, node=node)
    return Node(target, target.address.rsplit(f"_{group}-", 1)[-1])


def open_shell(session: Session, target: Target, *, err: TextIO, document: str | None = None) -> int:
    """Run a Session Manager shell on TARGET in the foreground, on this terminal, with Session document DOCUMENT (the
    cluster's own, which logs it), else the account's default; return its exit code.

    Ctrl-C belongs to the session (the plugin sends it to the node's shell), so kiln ignores it meanwhile.
    """
    named = ["--document-name", document] if document is not None else []
    argv = [AWS_CLI, "ssm", "start-session", "--target", target.address, *named, "--region", target.region]
    logged = f", logged by {document}" if document is not None else ""
    err.write(f"kiln connect: a Session Manager shell on {target.label}{logged}; `exit` ends it\n")
    err.flush()
    try:
        process = subprocess.Popen(argv, env=cli_environment(session))
    except FileNotFoundError:
        raise MissingTool(missing_tool(AWS_CLI)) from None
    with _interrupts_ignored():
        return process.wait()


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """Ignore SIGINT while the block runs (main thread only: Python takes signals there alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def forward_code_server(
    session: Session,
    found: Node,
    user: str,
    request: Request,
    *,
    out: TextIO,
    err: TextIO,
    poll_s: float,
    clock: Callable[[], float],
) -> int:
    """Forward 127.0.0.1:LOCAL_PORT here to code-server on FOUND until Ctrl-C (exit 0); RemoteError when the session
    ends on its own."""
    target = found.target
    with port_forward(
        session,
        region=target.region,
        node=target.address,
        host=None,
        remote_port=CODE_SERVER_PORT,
        local_port=request.local_port,
        env=cli_environment(session),
        poll_s=poll_s,
        clock=clock,
        via=target.label,
        purpose=f"code-server on {target.label}",
    ) as forward:
        path = config_path(user)
        shell = _kiln_connect(request, found.instance)
        try:
            _say(out, f"code-server on {target.label}: {local_url(forward.port)} (Ctrl-C ends the forward)")
            _say(out, f"its password is in {path} on {found.instance}: run `{shell}`, then `sudo cat {path}`")
            code = forward.process.wait()
        except KeyboardInterrupt:
            _say(err, f"stopped the forward to {target.label}")
            return 0
    # What the AWS CLI said last: its readers finish once the process group is stopped and the pipes close.
    forward.finish_reading()
    said = one_line(forward.last["err"] or forward.last["out"]) or f"exit code {code}"
    raise RemoteError(f"the port forward to {target.label} ended on its own ({said}): run kiln connect again")


def forward_pod(
    session: Session, cluster: ClusterHandle, request: Request, *, out: TextIO, err: TextIO, poll_s: float
) -> int:
    """Forward 127.0.0.1:LOCAL_PORT here to the code-server pod of CLUSTER (Kubernetes) with `kubectl port-forward`
    until Ctrl-C (exit 0); the kubeconfig is kiln.aws.remote.kubectl's, removed afterwards."""
    name = cluster.eks_cluster_name
    target = Target("kubernetes", name, cluster.region, f"EKS cluster {name}")
    argv = [
        KUBECTL,
        "port-forward",
        "-n",
        CODE_SERVER_NAMESPACE,
        f"deployment/{CODE_SERVER_DEPLOYMENT}",
        f"{request.local_port}:{CODE_SERVER_PORT}",
    ]
    command = f'printf "{KUBECONFIG_LINE} %s\\n" "$KUBECONFIG"; exec {shlex.join(argv)}'
    shown = _PortForwardOutput(out, request.local_port, target.label)
    try:
        # run_command only writes and flushes OUT, which _PortForwardOutput does: it is not a whole TextIO
        code = run_command(
            session, target, command, timeout_s=math.inf, out=cast(TextIO, shown), err=err, poll_s=poll_s
        )
    except KeyboardInterrupt:
        if not shown.ready:
            raise
        _say(err, f"stopped the forward to {target.label}")
        return 0
    raise RemoteError(
        f"`kubectl port-forward` to deployment/{CODE_SERVER_DEPLOYMENT} in {CODE_SERVER_NAMESPACE} on {target.label} "
        f"ended with exit code {code}"
    )


class _PortForwardOutput:
    """kubectl's output on its way to OUT: takes the kubeconfig line out, and once kubectl forwards, prints the URL
    and where the password is."""

    def __init__(self, out: TextIO, port: int, label: str) -> None:
        self._out, self._port, self._label = out, port, label
        self.kubeconfig: str | None = None
        self.ready = False

    def write(self, text: str) -> None:
        if self.kubeconfig is None and text.startswith(f"{KUBECONFIG_LINE} "):
            self.kubeconfig = text.split(" ", 1)[1].strip()
            return
        self._out.write(text)
        if not self.ready and text.startswith("Forwarding from "):
            self.ready = True
            path = config_path(CODE_SERVER_IMAGE_USER)
            exec_argv = ["kubectl", "exec", "-n", CODE_SERVER_NAMESPACE, f"deployment/{CODE_SERVER_DEPLOYMENT}"]
            shown = shlex.join([f"KUBECONFIG={self.kubeconfig}", *exec_argv, "--", "cat", path])
            _say(self._out, f"code-server on {self._label}: {local_url(self._port)} (Ctrl-C ends the forward)")
            _say(self._out, f"its password is in {path} in the pod: while this runs, `{shown}` shows it")

    def flush(self) -> None:
        self._out.flush()


def local_url(port: int) -> str:
    """Return the URL of a port forwarded to this machine."""
    return f"http://{LOCAL_HOST}:{port}/"


def _kiln_connect(request: Request, instance: str) -> str:
    """Return the kiln connect command that opens a shell on INSTANCE, as REQUEST reached it."""
    argv = ["kiln", "connect", "--spec", printable(request.spec_path)]
    if request.region:
        argv += ["--region", request.region]
    if request.profile:
        argv += ["--profile", printable(request.profile)]
    return shlex.join([*argv, "--node", instance])


def _check_cluster(cluster: ClusterHandle, spec: ClusterSpec) -> None:
    """RemoteError when the compute stack holds another kind of cluster than SPEC describes."""
    wanted = (spec.compute.backend, spec.effective_orchestrator or "none")
    found = (cluster.backend, cluster.orchestrator)
    if found != wanted:
        raise RemoteError(
            f"stack {cluster.stack_name} holds {_described(*found)} cluster and the spec describes "
            f"{_described(*wanted)} one: deploy the spec with `{cluster.deployed_by}`, or pass the spec the stack was "
            "deployed from"
        )


def _described(backend: str, orchestrator: str | None) -> str:
    """Return BACKEND (with ORCHESTRATOR on HyperPod) as messages name it, with its article."""
    if backend == "hyperpod":
        return f"a HyperPod ({'EKS' if orchestrator == 'eks' else 'Slurm'})"
    return {"pcs": "a PCS", "parallelcluster": "a ParallelCluster", "eks": "an EKS"}.get(backend, f"a {backend}")


def _say(stream: TextIO, line: str) -> None:
    stream.write(f"kiln connect: {line}\n")
    stream.flush()
