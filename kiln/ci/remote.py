"""Reach a CI environment's cluster: find its head node from the compute stack's outputs and run a command there.

Commands travel through AWS Systems Manager, never SSH:

- EC2 nodes (the PCS login node, the ParallelCluster head node): Run Command with ``AWS-RunShellScript``.
  GetCommandInvocation keeps only the first 24,000 characters of a command's output and 8,000 of its errors,
  and AWS documents both as possibly empty until the command ends, so output may arrive in one piece at the end.
  kiln prints a notice when output was cut; write long output to a file on the shared file system instead.
- HyperPod nodes: Run Command does not reach them, Session Manager does, at the target
  ``sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>``. kiln runs ``aws ssm start-session
  --document-name AWS-StartNonInteractiveCommand`` as a subprocess (the AWS CLI and the session-manager-plugin
  must be on PATH, as on GitHub's hosted runners). The agent merges the command's stdout and stderr and the
  session does not carry its exit code, so kiln wraps the command to print a marker line with ``$?`` and strips
  that line from what it shows.
- Kubernetes (EKS, and HyperPod orchestrated by EKS): the command runs here, on the runner, with ``KUBECONFIG``
  naming a kubeconfig kiln writes from ``eks:DescribeCluster`` (mode 0600) and deletes afterwards. Its user gets
  tokens from ``aws eks get-token``. How the runner reaches the API depends on ``endpointPublicAccess``:

  - public (a spec's ``public-and-private`` endpoint, whose CIDRs must admit the runner): the kubeconfig names the
    endpoint itself.
  - private only (kiln's default): a runner outside the VPC cannot reach it, so kiln forwards a free local port to
    the endpoint's port 443 through a running node of the cluster's ``system`` node group (found by its
    ``kiln:eks-cluster`` and ``kiln:node-group`` tags) with ``aws ssm start-session --document-name
    AWS-StartPortForwardingSessionToRemoteHost`` (the AWS CLI and the session-manager-plugin on PATH). The
    kubeconfig names ``https://127.0.0.1:PORT`` with the endpoint's host as ``tls-server-name``, so kubectl still
    verifies the cluster's certificate. The forward is stopped and its session ended after the command, whatever
    its outcome.

On a node the command runs as root (Run Command's user, and Session Manager's on HyperPod unless its Run As
preference names another user), in a login bash in root's home, with Slurm's and kiln's bin directories on PATH.
kiln does not switch to the image's default user: it differs by image (``ubuntu``, ``ec2-user``), and Slurm
accepts root's jobs unless ``DisableRootJobs`` is set. Prefix the command with ``runuser -u USER --`` to switch.

Exit codes: the command's own; 124 when it ran out of time (kiln's timeout, or Run Command's execution or
delivery timeout); 130 when it was cancelled; 255 when a HyperPod session ended without reporting one.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import queue
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws_errors import (
    CREDENTIAL_ERRORS,
    credentials_wording,
    error_message,
    explain,
    one_line,
    raise_if_no_credentials,
)
from kiln.catalog.names import EKS_SYSTEM_NODE_GROUP, TAG_EKS_CLUSTER, TAG_NODE_GROUP
from kiln.ci.reaper_code.kiln_reaper.contract import stack_name
from kiln.ci.reaper_code.kiln_reaper.teardown import error_code
from kiln.contracts.outputs import ComputeOutput

BACKENDS = ("pcs", "parallelcluster", "hyperpod", "eks")
# Kept equal to kiln.stacks.hyperpod.CONTROLLER_GROUP and LOGIN_GROUP by the tests (importing them here would import
# the CDK).
HYPERPOD_CONTROLLER_GROUP = "controller"
HYPERPOD_LOGIN_GROUP = "login"
PCS_NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"
# ParallelCluster tags every instance it launches with its cluster's name and the node's type: HeadNode, Compute, and
# LoginNode for a login pool's instances (which also carry parallelcluster:login-nodes-pool-name). AWS ParallelCluster's
# own sources: cli/src/pcluster/constants.py (PCLUSTER_CLUSTER_NAME_TAG, PCLUSTER_NODE_TYPE_TAG,
# PCLUSTER_LOGIN_NODES_POOL_NAME_TAG), cli/src/pcluster/templates/cdk_builder_utils.py (get_default_instance_tags) and
# cli/src/pcluster/templates/login_nodes_stack.py (the pool's launch template tags its instances "LoginNode"), at
# https://github.com/aws/aws-parallelcluster/tree/451cc5320d5d8a9318075990ead7f76f74372f85
PARALLELCLUSTER_NAME_TAG = "parallelcluster:cluster-name"
PARALLELCLUSTER_NODE_TYPE_TAG = "parallelcluster:node-type"
PARALLELCLUSTER_HEAD_NODE = "HeadNode"
PARALLELCLUSTER_LOGIN_NODE = "LoginNode"

EXIT_TIMED_OUT = 124
EXIT_CANCELLED = 130
EXIT_NO_STATUS = 255
RUN_COMMAND_OUTPUT_LIMIT = 24_000
RUN_COMMAND_ERROR_LIMIT = 8_000
# AWS-RunShellScript's executionTimeout: at most 48 hours. kiln's own timeout fires first; this is the backstop.
MAX_EXECUTION_TIMEOUT_S = 172_800
EXECUTION_TIMEOUT_MARGIN_S = 60
TERMINAL_STATUSES = ("Success", "Failed", "TimedOut", "Cancelled")
# Stacks in these states have no outputs kiln can rely on.
UNUSABLE_STACK_STATES = ("CREATE_IN_PROGRESS", "CREATE_FAILED", "ROLLBACK", "DELETE")

# Run on the node before the command: Slurm lives outside the default PATH on every backend
# (/opt/slurm on ParallelCluster and HyperPod, /opt/aws/pcs/scheduler/slurm-VERSION on PCS), and
# install_launcher.sh links kiln-launch into /usr/local/bin. The login shell adds /etc/profile.d (kiln's NCCL env).
NODE_PREAMBLE = """\
export HOME="${HOME:-/root}"
for kiln_bin in /usr/local/bin /opt/slurm/bin /opt/aws/pcs/scheduler/slurm-*/bin; do
  if [ -d "$kiln_bin" ]; then PATH="$PATH:$kiln_bin"; fi
done
export PATH
cd "$HOME" 2>/dev/null || cd /
"""
_SESSION_BANNER = re.compile(r"^\s*(Starting|Exiting) session with [Ss]essionId: (\S+?)\.?\s*$")
# Session Manager's port forwarding to a host the node reaches (here the EKS API's private endpoint); its parameters
# are host, portNumber and localPortNumber:
# https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
# Port forwarding to a port of the node itself; its parameters are portNumber and localPortNumber (same page, and
# https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-specify-session-document.html).
LOCAL_PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSession"
EKS_API_PORT = 443
# How long the session-manager-plugin may take to listen on the local port.
PORT_FORWARD_READY_S = 60.0
# What the plugin prints once the local port listens (multiplexed forwarding, then the older one-connection kind).
_FORWARD_LISTENING = re.compile(r"Waiting for connections|Port \d+ opened for sessionId")
# The AWS CLI's error when session-manager-plugin is not on PATH.
_PLUGIN_MISSING = "SessionManagerPlugin is not found"


class RemoteError(Exception):
    """A cluster kiln cannot reach or a call AWS refused; str() is one line: what is wrong and what to do."""


class Unreachable(RemoteError):
    """The node to run on does not exist yet or Systems Manager cannot reach it yet; waiting may help."""


class NotRunning(RemoteError):
    """The node asked for by its id is not one of the running candidates; RUNNING lists those that are."""

    def __init__(self, node: str, what: str, running: list[str]) -> None:
        super().__init__(f"{node} is not a running {what}; running: {', '.join(running)}")
        self.node, self.what, self.running = node, what, running


@dataclass(frozen=True)
class ClusterHandle:
    """A CI environment's cluster as the outputs of its ``<environment>-compute`` stack describe it."""

    environment: str
    region: str
    outputs: Mapping[str, str] = field(hash=False)
    # The command that deploys the stack, for messages: `kiln ci up` for an environment, `cdk deploy` for a cluster.
    deployed_by: str = field(default="kiln ci up", compare=False)

    @classmethod
    def from_stack(cls, session: Any, environment: str, region: str, deployed_by: str = "kiln ci up") -> ClusterHandle:
        """Read the outputs of ENVIRONMENT's compute stack in REGION with cloudformation:DescribeStacks.

        ENVIRONMENT is a CI environment's name, or a cluster's (its spec's name); DEPLOYED_BY the command that deploys
        it, named in messages.
        """
        name = stack_name(environment, "compute")
        cloudformation = session.client("cloudformation", region_name=region)
        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except ClientError as error:
            raise_if_no_credentials(error)
            if error_code(error) == "ValidationError" and "does not exist" in error_message(error):
                raise RemoteError(
                    f"stack {name} does not exist in {region}: deploy it with `{deployed_by}` first "
                    "(or pass the region it was deployed in)"
                ) from None
            raise RemoteError(explain(f"cloudformation:DescribeStacks {name}", error)) from None
        except BotoCoreError as error:
            raise_if_no_credentials(error)
            raise RemoteError(f"cloudformation:DescribeStacks {name}: {one_line(str(error))}") from None
        stack = stacks[0]
        status = stack.get("StackStatus", "")
        if any(status.startswith(state) for state in UNUSABLE_STACK_STATES):
            raise RemoteError(
                f"stack {name} is {status}: `{deployed_by}` must finish deploying it before kiln can use it"
            )
        outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
        handle = cls(environment=environment, region=region, outputs=outputs, deployed_by=deployed_by)
        handle.backend  # noqa: B018 - fail here, with the stack named, when the outputs are not kiln's
        return handle

    @property
    def stack_name(self) -> str:
        """Return the compute stack's name."""
        return stack_name(self.environment, "compute")

    def output(self, key: ComputeOutput) -> str:
        """Return the output KEY of the compute stack; one line naming it when the stack lacks it."""
        value = self.outputs.get(key.value, "")
        if not value:
            raise RemoteError(
                f"stack {self.stack_name} has no output {key.value}: it was deployed by an older kiln or another tool; "
                f"redeploy it with `{self.deployed_by}`"
            )
        return value

    @property
    def backend(self) -> str:
        """Return the backend: pcs, parallelcluster, hyperpod or eks."""
        backend = self.output(ComputeOutput.BACKEND)
        if backend not in BACKENDS:
            raise RemoteError(
                f"stack {self.stack_name}: output Backend is {backend!r}, kiln knows {', '.join(BACKENDS)}"
            )
        return backend

    @property
    def orchestrator(self) -> str:
        """Return the orchestrator: slurm, eks or none."""
        return self.output(ComputeOutput.ORCHESTRATOR)

    @property
    def cluster_name(self) -> str:
        """Return the backend's name for the cluster."""
        return self.output(ComputeOutput.CLUSTER_NAME)

    @property
    def uses_kubernetes(self) -> bool:
        """Return whether Kubernetes runs the cluster (EKS, or HyperPod orchestrated by EKS)."""
        return self.backend == "eks" or self.orchestrator == "eks"

    @property
    def pcs_cluster_id(self) -> str:
        """Return the AWS PCS cluster id."""
        return self.output(ComputeOutput.PCS_CLUSTER_ID)

    @property
    def pcs_login_node_group_id(self) -> str | None:
        """Return the PCS login node group's id, or None when the spec has no login nodes."""
        return self.outputs.get(ComputeOutput.PCS_LOGIN_NODE_GROUP_ID.value) or None

    @property
    def hyperpod_cluster_arn(self) -> str:
        """Return the HyperPod cluster's ARN."""
        return self.output(ComputeOutput.HYPERPOD_CLUSTER_ARN)

    @property
    def hyperpod_cluster_id(self) -> str:
        """Return the HyperPod cluster id: the last part of its ARN, as Session Manager targets name it."""
        return self.hyperpod_cluster_arn.rsplit("/", 1)[-1]

    @property
    def eks_cluster_name(self) -> str:
        """Return the EKS cluster's name."""
        return self.output(ComputeOutput.EKS_CLUSTER_NAME)


@dataclass(frozen=True)
class Target:
    """Where run_command runs: an EC2 instance, a HyperPod node's session target, or here with a kubeconfig."""

    kind: Literal["ec2", "hyperpod", "kubernetes"]
    # The instance id, the Session Manager target, or the EKS cluster's name.
    address: str
    region: str
    # What messages call it, e.g. "PCS login node i-0abc".
    label: str


@contextlib.contextmanager
def aws_call(what: str) -> Iterator[None]:
    """Turn a botocore error raised in the block into a one-line RemoteError naming the call WHAT.

    Missing or rejected credentials raise NoCredentials instead: the command says so in its one wording.
    """
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise_if_no_credentials(error)
        if isinstance(error, ClientError):
            raise RemoteError(explain(what, error)) from None
        raise RemoteError(f"{what}: {one_line(str(error))}") from None


def find_head(session: Any, cluster: ClusterHandle) -> Target:
    """Return where CLUSTER runs commands: its login or head node, or this machine for Kubernetes."""
    if cluster.uses_kubernetes:
        name = cluster.eks_cluster_name
        return Target("kubernetes", name, cluster.region, f"EKS cluster {name}")
    backend = cluster.backend
    if backend == "pcs":
        return _pcs_login_node(session, cluster)
    if backend == "parallelcluster":
        return _parallelcluster_node(session, cluster)
    return _hyperpod_node(session, cluster)


def run_command(
    session: Any,
    target: Target,
    command: str,
    *,
    timeout_s: float,
    out: TextIO | None = None,
    err: TextIO | None = None,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run COMMAND on TARGET, streaming its output to OUT and ERR; return its exit code (see the module doc)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if target.kind == "ec2":
        return _run_on_instance(session, target, command, timeout_s, out, err, poll_s, clock, sleep)
    if target.kind == "hyperpod":
        return _run_in_session(session, target, command, timeout_s, out, err, poll_s, clock)
    return _run_with_kubeconfig(session, target, command, timeout_s, out, err, poll_s, clock)


# Finding the head node.


def _pcs_login_node(session: Any, cluster: ClusterHandle, node: str | None = None) -> Target:
    """Return a running login node of CLUSTER (PCS): NODE if it is one, else the oldest."""
    group = cluster.pcs_login_node_group_id
    if group is None:
        raise RemoteError(
            f"{cluster.environment}: the PCS cluster has no login nodes and `kiln ci run` runs commands on one: "
            "set compute.login_nodes.count to 1 or more in the spec and redeploy with `kiln ci up`"
        )
    instance = _running_instance(
        session,
        cluster.region,
        {PCS_NODE_GROUP_TAG: group},
        f"no running PCS login node in node group {group} yet",
        node=node,
        what=f"PCS login node of node group {group}",
    )
    return Target("ec2", instance, cluster.region, f"PCS login node {instance}")


def _parallelcluster_node(
    session: Any, cluster: ClusterHandle, node_type: str = PARALLELCLUSTER_HEAD_NODE, node: str | None = None
) -> Target:
    """Return a running node of CLUSTER (ParallelCluster) of NODE_TYPE (HeadNode, LoginNode): NODE if it is one, else
    the oldest."""
    name = cluster.cluster_name
    kind = "head node" if node_type == PARALLELCLUSTER_HEAD_NODE else "login node"
    instance = _running_instance(
        session,
        cluster.region,
        {PARALLELCLUSTER_NAME_TAG: name, PARALLELCLUSTER_NODE_TYPE_TAG: node_type},
        f"no running {kind} of ParallelCluster cluster {name} yet",
        node=node,
        what=f"{kind} of ParallelCluster cluster {name}",
    )
    return Target("ec2", instance, cluster.region, f"ParallelCluster {kind} {instance}")


def _running_instance(
    session: Any,
    region: str,
    tags: Mapping[str, str],
    missing: str,
    node: str | None = None,
    what: str = "node",
) -> str:
    """Return the oldest running instance carrying TAGS, or NODE when it is one of them (NotRunning, naming WHAT, when
    it is not); Unreachable(MISSING) when there is none."""
    ec2 = session.client("ec2", region_name=region)
    filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": ["running"]})
    with aws_call("ec2:DescribeInstances"):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    if not instances:
        raise Unreachable(missing)
    instances.sort(key=lambda i: (_launched(i), i["InstanceId"]))
    return _chosen([i["InstanceId"] for i in instances], node, what)


def _launched(item: Mapping[str, Any]) -> float:
    """Return when ITEM (an instance or a HyperPod node) launched, as a timestamp; 0 when AWS did not say."""
    launched = item.get("LaunchTime")
    return launched.timestamp() if hasattr(launched, "timestamp") else 0.0


def _chosen(running: list[str], node: str | None, what: str) -> str:
    """Return NODE if it is in RUNNING (oldest first), else the oldest; NotRunning when NODE is not there."""
    if node is None:
        return running[0]
    if node not in running:
        raise NotRunning(node, what, running)
    return node


def _hyperpod_node(
    session: Any, cluster: ClusterHandle, group: str = HYPERPOD_CONTROLLER_GROUP, node: str | None = None
) -> Target:
    """Return the Session Manager target of a running node of CLUSTER's (HyperPod) instance group GROUP: NODE if it is
    one, else the oldest."""
    arn = cluster.hyperpod_cluster_arn
    sagemaker = session.client("sagemaker", region_name=cluster.region)
    with aws_call("sagemaker:ListClusterNodes"):
        pages = sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=arn, InstanceGroupNameContains=group)
        nodes = [n for page in pages for n in page["ClusterNodeSummaries"]]
    running = [
        n
        for n in nodes
        if n.get("InstanceGroupName") == group and n.get("InstanceStatus", {}).get("Status") == "Running"
    ]
    if not running:
        raise Unreachable(f"no running node in HyperPod instance group {group} of {cluster.cluster_name} yet")
    running.sort(key=lambda n: (_launched(n), n["InstanceId"]))
    instance = _chosen([n["InstanceId"] for n in running], node, f"node of HyperPod instance group {group}")
    address = f"sagemaker-cluster:{cluster.hyperpod_cluster_id}_{group}-{instance}"
    return Target("hyperpod", address, cluster.region, f"HyperPod {group} node {instance}")


# Run Command on an EC2 instance.


def _run_on_instance(
    session: Any,
    target: Target,
    command: str,
    timeout_s: float,
    out: TextIO,
    err: TextIO,
    poll_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    ssm = session.client("ssm", region_name=target.region)
    started = clock()
    execution_timeout = min(MAX_EXECUTION_TIMEOUT_S, max(1, math.ceil(timeout_s) + EXECUTION_TIMEOUT_MARGIN_S))
    try:
        sent = ssm.send_command(
            InstanceIds=[target.address],
            DocumentName="AWS-RunShellScript",
            Comment="kiln ci run",
            Parameters={"commands": [node_script(command)], "executionTimeout": [str(execution_timeout)]},
        )
    except ClientError as error:
        raise_if_no_credentials(error)
        if error_code(error) == "InvalidInstanceId":
            raise Unreachable(
                f"{target.label} is not reachable through Systems Manager (yet): its SSM agent must be online, "
                "with an instance role that allows SSM Agent's actions (kiln's node roles hold them)"
            ) from None
        raise RemoteError(explain("ssm:SendCommand", error)) from None
    except BotoCoreError as error:
        raise_if_no_credentials(error)
        raise RemoteError(f"ssm:SendCommand: {one_line(str(error))}") from None
    command_id = sent["Command"]["CommandId"]
    shown = _Shown()
    while True:
        sleep(poll_s)
        invocation = _invocation(ssm, command_id, target.address)
        if invocation is not None:
            shown.write(invocation, out, err)
            if invocation.get("Status") in TERMINAL_STATUSES:
                shown.notice_if_cut(err)
                return _exit_code(invocation, target, err)
        if clock() - started >= timeout_s:
            _cancel(ssm, command_id, target, err)
            err.write(f"kiln: {target.label}: the command did not finish within {timeout_s:g} s; cancelled it\n")
            return EXIT_TIMED_OUT


def node_script(command: str) -> str:
    """Return the shell line that runs COMMAND on a node: a login bash with kiln's preamble."""
    return f"exec bash -l -c {shlex.quote(NODE_PREAMBLE + command)}"


@dataclass
class _Shown:
    """How much of an invocation's output and errors has been written already."""

    output: int = 0
    errors: int = 0
    cut: bool = False

    def write(self, invocation: Mapping[str, Any], out: TextIO, err: TextIO) -> None:
        output = invocation.get("StandardOutputContent") or ""
        errors = invocation.get("StandardErrorContent") or ""
        if len(output) > self.output:
            out.write(output[self.output :])
            out.flush()
            self.output = len(output)
        if len(errors) > self.errors:
            err.write(errors[self.errors :])
            err.flush()
            self.errors = len(errors)
        self.cut = self.output >= RUN_COMMAND_OUTPUT_LIMIT or self.errors >= RUN_COMMAND_ERROR_LIMIT

    def notice_if_cut(self, err: TextIO) -> None:
        if self.cut:
            err.write(
                f"\nkiln: Run Command keeps only the first {RUN_COMMAND_OUTPUT_LIMIT:,} characters of output and "
                f"{RUN_COMMAND_ERROR_LIMIT:,} of errors, so this output was cut; write long output to a file on the "
                "shared file system and print its tail\n"
            )


def _invocation(ssm: Any, command_id: str, instance: str) -> Mapping[str, Any] | None:
    """Return the command's invocation on INSTANCE, or None while Run Command has not created it yet."""
    try:
        return ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)
    except ClientError as error:
        raise_if_no_credentials(error)
        if error_code(error) == "InvocationDoesNotExist":
            return None
        raise RemoteError(explain("ssm:GetCommandInvocation", error)) from None
    except BotoCoreError as error:
        raise_if_no_credentials(error)
        raise RemoteError(f"ssm:GetCommandInvocation: {one_line(str(error))}") from None


def _exit_code(invocation: Mapping[str, Any], target: Target, err: TextIO) -> int:
    status, details = invocation["Status"], invocation.get("StatusDetails", "")
    code = int(invocation.get("ResponseCode", -1))
    if status == "Success":
        return max(code, 0)
    if status == "TimedOut":
        err.write(f"kiln: {target.label}: Run Command ended the command ({details or status})\n")
        return EXIT_TIMED_OUT
    if status == "Cancelled":
        err.write(f"kiln: {target.label}: the command was cancelled\n")
        return EXIT_CANCELLED
    if code > 0:
        return code
    # Failed without an exit code: the agent could not run it at all.
    err.write(f"kiln: {target.label}: Run Command could not run the command ({details or status})\n")
    return 1


def _cancel(ssm: Any, command_id: str, target: Target, err: TextIO) -> None:
    try:
        ssm.cancel_command(CommandId=command_id, InstanceIds=[target.address])
    except (ClientError, BotoCoreError) as error:
        if isinstance(error, ClientError):
            reason = explain("ssm:CancelCommand", error)
        else:
            reason = credentials_wording(error) if isinstance(error, CREDENTIAL_ERRORS) else one_line(str(error))
        err.write(f"kiln: {target.label}: could not cancel command {command_id}: {reason}\n")


# A Session Manager session to a HyperPod node.


def session_command(command: str, marker: str) -> str:
    """Return the session's command: bash running COMMAND in kiln's preamble, then printing MARKER:$?.

    The agent splits the command into words itself (no shell) and merges stdout and stderr; the script travels
    base64-encoded so that no quoting of the user's command can break that split.
    """
    encoded = base64.b64encode((NODE_PREAMBLE + command).encode()).decode()
    inner = f'bash -l -c "$(printf %s {encoded} | base64 -d)"; printf "\\n%s:%d\\n" {marker} "$?"'
    return f"bash -c '{inner}'"


def _run_in_session(
    session: Any,
    target: Target,
    command: str,
    timeout_s: float,
    out: TextIO,
    err: TextIO,
    poll_s: float,
    clock: Callable[[], float],
) -> int:
    marker = f"KILN-EXIT-{secrets.token_hex(8)}"
    parameters = json.dumps({"command": [session_command(command, marker)]})
    argv = [
        "aws",
        "ssm",
        "start-session",
        "--target",
        target.address,
        "--document-name",
        "AWS-StartNonInteractiveCommand",
        "--parameters",
        parameters,
        "--region",
        target.region,
    ]
    filtered = _SessionOutput(marker, out)
    problems: list[str] = []
    try:
        code = _stream(
            argv,
            env=_cli_environment(session),
            on_out=filtered.line,
            on_err=problems.append,
            timeout_s=timeout_s,
            poll_s=poll_s,
            clock=clock,
        )
    except FileNotFoundError:
        raise RemoteError(
            "the AWS CLI (`aws`) is not on PATH: HyperPod nodes are reached with `aws ssm start-session`; "
            "install the AWS CLI v2 and the session-manager-plugin"
        ) from None
    filtered.finish()
    if code is None:
        _terminate_session(session, target, filtered.session_id)
        err.write(f"kiln: {target.label}: the command did not finish within {timeout_s:g} s; ended the session\n")
        return EXIT_TIMED_OUT
    if filtered.exit_code is not None:
        return filtered.exit_code
    said = next((one_line(p) for p in reversed(problems) if p.strip()), one_line(filtered.last_line))
    said = said or f"exit code {code}"
    if code != 0:
        failure = f"aws ssm start-session to {target.label} failed: {said}"
        if "TargetNotConnected" in said:
            raise Unreachable(failure)
        raise RemoteError(failure)
    err.write(f"kiln: {target.label}: the session ended without reporting the command's exit code ({said})\n")
    return EXIT_NO_STATUS


class _SessionOutput:
    """Session output, line by line: drops the plugin's banners and kiln's marker line, keeps the exit code."""

    def __init__(self, marker: str, out: TextIO) -> None:
        self._marker = re.compile(rf"^{re.escape(marker)}:(-?\d+)$")
        self._out = out
        # The wrapper prints a newline before the marker; a blank line just before it is held back and dropped.
        self._held: str | None = None
        self._started = False
        self.exit_code: int | None = None
        self.session_id: str | None = None
        self.last_line = ""

    def line(self, text: str) -> None:
        text = text.replace("\r\n", "\n").replace("\r", "")
        banner = _SESSION_BANNER.match(text)
        if banner:
            if banner.group(1) == "Starting":
                self.session_id = banner.group(2)
            return
        if self.exit_code is not None:
            return
        found = self._marker.match(text.rstrip("\n"))
        if found:
            self.exit_code = int(found.group(1))
            self._held = None
            return
        if not self._started and not text.strip():
            return
        self._started = True
        self.last_line = text.strip() or self.last_line
        if self._held is not None:
            self._out.write(self._held)
            self._held = None
        if text == "\n":
            self._held = text
            return
        self._out.write(text)
        self._out.flush()

    def finish(self) -> None:
        if self._held is not None:
            self._out.write(self._held)
            self._held = None
        self._out.flush()


def _terminate_session(session: Any, target: Target, session_id: str | None) -> None:
    # Killing the CLI closes the session's stream; TerminateSession makes the agent stop the command too.
    if session_id is None:
        return
    with contextlib.suppress(ClientError, BotoCoreError):
        session.client("ssm", region_name=target.region).terminate_session(SessionId=session_id)


# The environment's static credentials, which the AWS CLI prefers to AWS_PROFILE.
STATIC_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _cli_environment(session: Any) -> dict[str, str]:
    """Return the environment for the AWS CLI: this one, with the boto3 session's profile when it names one.

    A session made with an explicit profile (boto3.Session(profile_name=...)) ignores credentials in the environment
    (botocore's resolver drops its environment provider then), so the CLI gets that profile without them too.
    """
    env = dict(os.environ)
    profile = getattr(session, "profile_name", None)
    core = getattr(session, "_session", None)
    explicit = core.instance_variables().get("profile") if core is not None else None
    if explicit:
        env["AWS_PROFILE"] = explicit
        for name in STATIC_CREDENTIALS:
            env.pop(name, None)
    elif profile and profile != "default" and "AWS_ACCESS_KEY_ID" not in env:
        env["AWS_PROFILE"] = profile
    return env


# Kubernetes: run here with a kubeconfig for the cluster.


def _run_with_kubeconfig(
    session: Any,
    target: Target,
    command: str,
    timeout_s: float,
    out: TextIO,
    err: TextIO,
    poll_s: float,
    clock: Callable[[], float],
) -> int:
    name = target.address
    eks = session.client("eks", region_name=target.region)
    with aws_call(f"eks:DescribeCluster {name}"):
        cluster = eks.describe_cluster(name=name)["cluster"]
    endpoint = cluster.get("endpoint")
    authority = (cluster.get("certificateAuthority") or {}).get("data")
    if not endpoint or not authority:
        raise Unreachable(f"EKS cluster {name} has no API endpoint yet (status {cluster.get('status', 'unknown')})")
    env = _cli_environment(session)
    with contextlib.ExitStack() as forwarding:
        server, tls_server_name = endpoint, None
        # A private-only endpoint answers inside the VPC alone: reach it through a system node (see the module doc).
        if not (cluster.get("resourcesVpcConfig") or {}).get("endpointPublicAccess"):
            host = urlsplit(endpoint).hostname or endpoint
            node = _system_node(session, target.region, name)
            port = forwarding.enter_context(_port_forward(session, target, node, host, env, poll_s, clock)).port
            server, tls_server_name = f"https://127.0.0.1:{port}", host
        config = kubeconfig(name, target.region, server, authority, env.get("AWS_PROFILE"), tls_server_name)
        descriptor, path = tempfile.mkstemp(prefix="kiln-kubeconfig-", suffix=".json")
        try:
            os.fchmod(descriptor, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                json.dump(config, handle, indent=2)
            env["KUBECONFIG"] = path

            def write(stream: TextIO) -> Callable[[str], None]:
                def sink(text: str) -> None:
                    stream.write(text)
                    stream.flush()

                return sink

            code = _stream(
                ["bash", "-c", command],
                env=env,
                on_out=write(out),
                on_err=write(err),
                timeout_s=timeout_s,
                poll_s=poll_s,
                clock=clock,
            )
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    if code is None:
        err.write(f"kiln: the command for {target.label} did not finish within {timeout_s:g} s; stopped it\n")
        return EXIT_TIMED_OUT
    return code


def kubeconfig(
    name: str,
    region: str,
    endpoint: str,
    authority: str,
    profile: str | None = None,
    tls_server_name: str | None = None,
) -> dict[str, Any]:
    """Return a kubeconfig (as JSON data) for EKS cluster NAME whose user gets tokens from `aws eks get-token`.

    ENDPOINT is the server kubectl connects to; TLS_SERVER_NAME, when it is a forwarded local port, the name the
    cluster's certificate is checked against.
    """
    exec_user: dict[str, Any] = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "aws",
        "args": ["eks", "get-token", "--cluster-name", name, "--region", region, "--output", "json"],
        "interactiveMode": "Never",
    }
    if profile:
        exec_user["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    server: dict[str, str] = {"server": endpoint, "certificate-authority-data": authority}
    if tls_server_name:
        server["tls-server-name"] = tls_server_name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": server}],
        "users": [{"name": name, "user": {"exec": exec_user}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def _system_node(session: Any, region: str, cluster: str) -> str:
    """Return a running node of EKS cluster CLUSTER's system node group: the one its API is forwarded through."""
    return _running_instance(
        session,
        region,
        {TAG_EKS_CLUSTER: cluster, TAG_NODE_GROUP: EKS_SYSTEM_NODE_GROUP},
        f"EKS cluster {cluster} has a private API endpoint and no running system node to reach it through: check "
        f"that its {EKS_SYSTEM_NODE_GROUP!r} node group is ACTIVE and its instances carry the tags "
        f"{TAG_EKS_CLUSTER}={cluster} and {TAG_NODE_GROUP}={EKS_SYSTEM_NODE_GROUP} (an older kiln did not tag them: "
        "redeploy with `kiln ci up`)",
    )


@contextlib.contextmanager
def _port_forward(
    session: Any,
    target: Target,
    node: str,
    host: str | None,
    env: Mapping[str, str],
    poll_s: float,
    clock: Callable[[], float],
    *,
    remote_port: int = EKS_API_PORT,
    local_port: int | None = None,
    via: str | None = None,
    purpose: str | None = None,
) -> Iterator[_Forward]:
    """Forward LOCAL_PORT (default: a free one) to HOST's REMOTE_PORT through NODE with Session Manager, or to NODE's
    own REMOTE_PORT when HOST is None; yield the forward once it listens (its port, process and session id).

    VIA names NODE in messages (default: TARGET's system node), PURPOSE what the forward reaches (default: TARGET's
    private API endpoint). Afterwards, also when the block fails, stops the AWS CLI and its session-manager-plugin
    (their process group) and ends the session.
    """
    port = local_port or _free_port()
    via = via or f"{target.label}'s system node {node}"
    purpose = purpose or f"the private API endpoint of {target.label}"
    if host is None:
        document, parameters = LOCAL_PORT_FORWARD_DOCUMENT, {}
    else:
        document, parameters = PORT_FORWARD_DOCUMENT, {"host": [host]}
    parameters |= {"portNumber": [str(remote_port)], "localPortNumber": [str(port)]}
    argv = ["aws", "ssm", "start-session", "--target", node, "--document-name", document]
    argv += ["--parameters", json.dumps(parameters), "--region", target.region]
    try:
        process = _spawn(argv, env)
    except FileNotFoundError:
        raise RemoteError(
            f"the AWS CLI (`aws`) is not on PATH: {purpose} is reached with `aws ssm start-session`; install the AWS "
            "CLI v2 and the session-manager-plugin"
        ) from None
    forward = _Forward(process, port)
    try:
        forward.wait_listening(port, via, poll_s, clock, purpose)
        yield forward
    finally:
        _stop(process)
        _terminate_session(session, target, forward.session_id)


class _Forward:
    """A port-forwarding CLI's output, read on threads until it exits: its session id, whether it listens, errors."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        # The local port it forwards.
        self.port = port
        self.session_id: str | None = None
        self.listening = threading.Event()
        self.last: dict[str, str] = {"out": "", "err": ""}
        self._readers = [
            threading.Thread(target=self._read, args=(stream, kind), daemon=True)
            for stream, kind in ((process.stdout, "out"), (process.stderr, "err"))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: TextIO, kind: str) -> None:
        for text in stream:
            line = text.strip()
            banner = _SESSION_BANNER.match(line)
            if banner and banner.group(1) == "Starting":
                self.session_id = banner.group(2)
            if _FORWARD_LISTENING.search(line):
                self.listening.set()
            if line:
                self.last[kind] = line

    def wait_listening(
        self,
        port: int,
        label: str,
        poll_s: float,
        clock: Callable[[], float],
        purpose: str = "a private EKS endpoint",
    ) -> None:
        """Return once the plugin listens on PORT; a one-line error when it exits first or takes too long.

        LABEL names the node it forwards through, PURPOSE what it forwards to.
        """
        started = clock()
        while not self.listening.wait(min(poll_s, 0.5)):
            if self.process.poll() is not None:
                # What it started may still hold the pipes open: stop them all, then read what is left.
                _stop(self.process)
                self.finish_reading()
                said = one_line(self.last["err"] or self.last["out"]) or f"exit code {self.process.returncode}"
                if _PLUGIN_MISSING in said:
                    raise RemoteError(
                        f"the session-manager-plugin is not on PATH: the AWS CLI needs it to forward a port to "
                        f"{purpose}; install it beside the AWS CLI v2"
                    )
                failure = f"aws ssm start-session to {label} failed: {said}"
                if "TargetNotConnected" in said:
                    raise Unreachable(failure)
                raise RemoteError(failure)
            if _accepts(port):
                return
            if clock() - started >= PORT_FORWARD_READY_S:
                said = one_line(self.last["err"] or self.last["out"]) or "nothing"
                raise RemoteError(
                    f"the port forward through {label} did not listen on 127.0.0.1:{port} within "
                    f"{PORT_FORWARD_READY_S:g} s (the AWS CLI last said: {said}); stopped it"
                )

    def finish_reading(self, timeout_s: float = 5.0) -> None:
        """Wait (up to TIMEOUT_S each) for the readers to reach the end of the output, once the process is stopped."""
        for reader in self._readers:
            reader.join(timeout=timeout_s)


def _free_port() -> int:
    """Return a TCP port of 127.0.0.1 that nothing uses now (the system's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _accepts(port: int) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:PORT."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# Subprocesses and errors.


def _stream(
    argv: list[str],
    *,
    env: Mapping[str, str],
    on_out: Callable[[str], Any],
    on_err: Callable[[str], Any],
    timeout_s: float,
    poll_s: float,
    clock: Callable[[], float],
) -> int | None:
    """Run ARGV, handing each line it prints to ON_OUT or ON_ERR; return its exit code, None when it ran out of time."""
    process = _spawn(argv, env)
    lines: queue.Queue[tuple[Callable[[str], Any], str | None]] = queue.Queue()

    def pump(stream: TextIO, sink: Callable[[str], Any]) -> None:
        for text in stream:
            lines.put((sink, text))
        lines.put((sink, None))

    for stream, sink in ((process.stdout, on_out), (process.stderr, on_err)):
        threading.Thread(target=pump, args=(stream, sink), daemon=True).start()
    started, open_streams = clock(), 2
    try:
        while open_streams:
            if clock() - started >= timeout_s:
                _stop(process)
                return None
            try:
                sink, text = lines.get(timeout=poll_s)
            except queue.Empty:
                continue
            if text is None:
                open_streams -= 1
            else:
                sink(text)
        return process.wait()
    except BaseException:
        _stop(process)
        raise


def _spawn(argv: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Start ARGV in a process group of its own (so _stop ends what it starts), its output read as text by lines."""
    return subprocess.Popen(
        argv,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    """End PROCESS and everything it started (the AWS CLI starts session-manager-plugin)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
