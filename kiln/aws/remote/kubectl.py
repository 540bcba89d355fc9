"""The Kubernetes transport: a command run here with ``KUBECONFIG`` naming a kubeconfig for the EKS cluster (mode 0600,
deleted afterwards), its API reached directly when public, else through a port forwarded by a system node."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from kiln.aws.errors import aws_call
from kiln.aws.remote.cluster import RemoteError, Unreachable
from kiln.aws.remote.exit_codes import EXIT_TIMED_OUT
from kiln.aws.remote.forward import port_forward
from kiln.aws.remote.nodes import Target, system_node
from kiln.aws.remote.processes import cli_environment, stream

if TYPE_CHECKING:
    from kiln.aws.session import Session

EKS_API_PORT = 443


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


@dataclass(frozen=True)
class KubectlTransport:
    """Runs commands here, with a kubeconfig for TARGET (an EKS cluster); reads their output every POLL_S seconds at
    most until done or the timeout passes (CLOCK), then stops them."""

    session: Session
    target: Target
    _: KW_ONLY
    poll_s: float = 2.0
    clock: Callable[[], float] = time.monotonic

    def run(self, command: str, *, out: TextIO, err: TextIO, timeout_s: float) -> int:
        """Run COMMAND in bash with KUBECONFIG set, output on OUT and ERR; return its exit code (124 out of time)."""
        name, region = self.target.address, self.target.region
        cluster = self._describe()
        authority = cluster["certificateAuthority"]["data"]
        env = cli_environment(self.session)
        with (
            self._api_server(cluster, env) as (server, tls_server_name),
            _written(kubeconfig(name, region, server, authority, env.get("AWS_PROFILE"), tls_server_name)) as path,
        ):
            env["KUBECONFIG"] = path
            code = stream(
                ["bash", "-c", command],
                env=env,
                on_out=_sink(out),
                on_err=_sink(err),
                timeout_s=timeout_s,
                poll_s=self.poll_s,
                clock=self.clock,
            )
        if code is None:
            err.write(f"kiln: the command for {self.target.label} did not finish within {timeout_s:g} s; stopped it\n")
            return EXIT_TIMED_OUT
        return code

    def _describe(self) -> Mapping[str, Any]:
        """Return the cluster as eks:DescribeCluster describes it; Unreachable while it has no API endpoint yet."""
        name = self.target.address
        eks = self.session.client("eks", region_name=self.target.region)
        with aws_call(f"eks:DescribeCluster {name}", RemoteError):
            cluster = eks.describe_cluster(name=name)["cluster"]
        if not cluster.get("endpoint") or not (cluster.get("certificateAuthority") or {}).get("data"):
            raise Unreachable(f"EKS cluster {name} has no API endpoint yet (status {cluster.get('status', 'unknown')})")
        return cluster

    @contextlib.contextmanager
    def _api_server(self, cluster: Mapping[str, Any], env: Mapping[str, str]) -> Iterator[tuple[str, str | None]]:
        """Yield the server kubectl connects to and the name to check its certificate against (None: the server's).

        A private-only endpoint answers inside the VPC alone: it is reached through a port forwarded by a system node
        for as long as the block runs (see kiln.aws.remote's doc).
        """
        endpoint = cluster["endpoint"]
        if (cluster.get("resourcesVpcConfig") or {}).get("endpointPublicAccess"):
            yield endpoint, None
            return
        label, region = self.target.label, self.target.region
        host = urlsplit(endpoint).hostname or endpoint
        node = system_node(self.session, region, self.target.address)
        with port_forward(
            self.session,
            region=region,
            node=node,
            host=host,
            remote_port=EKS_API_PORT,
            env=env,
            poll_s=self.poll_s,
            clock=self.clock,
            via=f"{label}'s system node {node}",
            purpose=f"the private API endpoint of {label}",
        ) as forward:
            yield f"https://127.0.0.1:{forward.port}", host


@contextlib.contextmanager
def _written(config: Mapping[str, Any]) -> Iterator[str]:
    """Write CONFIG as JSON to a new file only its owner reads; yield its path, then delete it."""
    descriptor, path = tempfile.mkstemp(prefix="kiln-kubeconfig-", suffix=".json")
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(config, handle, indent=2)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _sink(out: TextIO) -> Callable[[str], None]:
    """Return a function writing each line it gets to OUT at once."""

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    return write
