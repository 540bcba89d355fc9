"""Where a local cluster lives: paths under its prefix, network names, addresses and ports."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kiln.bootstrap import BootstrapConfig, LocalCluster, LocalNode
from kiln.bootstrap.render import slurm_layout
from kiln.local.errors import LocalError

DEFAULT_PREFIX = "/var/lib/kiln-local"
PREFIX_ENV = "KILN_LOCAL_PREFIX"
DEFAULT_TAG = "kiln"
DEFAULT_SUBNET = "10.77.0.0/24"
DEFAULT_CLUSTER_NAME = "kiln-local"
NETNS_DIR = Path("/run/netns")
# Interface names stop at 15 characters: "<tag>-v<node>" must fit with up to 999 nodes.
_TAG = re.compile(r"^[a-z][a-z0-9]{0,7}$")
MAX_NODES = 64
# The namespace side of every veth pair: one name, so jobs see the same interface on every node.
NODE_INTERFACE = "eth0"


def default_prefix() -> str:
    """Return the prefix from KILN_LOCAL_PREFIX, else the default."""
    return os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


@dataclass(frozen=True, kw_only=True)
class NodeLayout:
    """One node: its Slurm name, address, network namespace and the host end of its veth pair."""

    name: str
    address: str
    netns: str
    veth: str
    cpus: int
    memory_mib: int

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """Everything about a local cluster that is fixed when it is first brought up."""

    prefix: str
    tag: str
    subnet: str
    cluster_name: str
    controller_address: str
    slurmctld_port: int
    slurmd_port: int
    nodes: tuple[NodeLayout, ...]
    spec: str | None = None
    # The exporters `up` runs (kiln.catalog.exporters names): node on every node, slurm beside slurmctld.
    exporters: tuple[str, ...] = ()
    # Whether `up` runs Prometheus over the exporters (the spec's observability.prometheus).
    prometheus: bool = False
    # Whom node 1 runs code-server as (the spec's code_server: the user who brought the cluster up); '' when off.
    code_server_user: str = ""
    # Whether `up` runs the node replacer (kiln.local.replacer): the spec's resilience.node_recovery, automatic.
    replace_nodes: bool = True
    # Whether kiln's jobs here are requeued after a node fails or hangs (the spec's resilience.auto_resume).
    auto_resume: bool = True

    @property
    def bridge(self) -> str:
        return f"{self.tag}-br0"

    @property
    def prefix_length(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    def path(self, absolute: str) -> Path:
        """Return ABSOLUTE (a node path like /etc/slurm) under the prefix, as the bootstrap's KILN_ROOT places it."""
        return Path(self.prefix.rstrip("/") + absolute)

    @property
    def bundle_dir(self) -> Path:
        return self.path("/bundle")

    @property
    def log_dir(self) -> Path:
        return self.path("/var/log/kiln-local")

    @property
    def hosts_file(self) -> Path:
        return self.path("/etc/kiln-local/hosts")

    @property
    def jobs_dir(self) -> Path:
        return self.path("/jobs")

    @property
    def checkpoint_dir(self) -> Path:
        return self.path("/checkpoints")

    @property
    def tmp_dir(self) -> Path:
        """Return the nodes' /tmp, which local jobs get as TMPDIR."""
        return self.path("/tmp")

    @property
    def munge_key(self) -> Path:
        return self.path("/etc/munge/munge.key")

    @property
    def munge_dirs(self) -> dict[str, Path]:
        """Return the run, lib and log directories configure_munge creates."""
        return {"run": self.path("/run/munge"), "lib": self.path("/var/lib/munge"), "log": self.path("/var/log/munge")}

    @property
    def venv(self) -> Path:
        return self.path("/opt/kiln/venv")

    @property
    def launcher(self) -> Path:
        return self.path("/usr/local/bin/kiln-launch")

    @property
    def launcher_env(self) -> Path:
        return self.path("/etc/kiln/launcher.env")

    @property
    def drain_requests(self) -> Path:
        """Return where jobs' hang watchdogs leave drain requests (configure_health; kiln.launcher.drain_request)."""
        return self.path("/run/kiln/drain-requests")

    @property
    def drain_requests_program(self) -> Path:
        """Return root's side of the drain hand-off that configure_health wrote (a path unit runs it on AWS)."""
        return self.path("/opt/kiln/bin/kiln-drain-requests")

    @property
    def bootstrap_log(self) -> Path:
        return self.path("/var/log/kiln/bootstrap.log")

    def local_cluster(self) -> LocalCluster:
        """Return the bootstrap's description of this cluster."""
        return LocalCluster(
            prefix=self.prefix,
            nodes=tuple(
                LocalNode(name=n.name, address=n.address, cpus=n.cpus, real_memory_mib=n.memory_mib) for n in self.nodes
            ),
            controller_address=self.controller_address,
            cluster_name=self.cluster_name,
            slurmctld_port=self.slurmctld_port,
            slurmd_port=self.slurmd_port,
        )

    def slurm_paths(self) -> dict[str, Path]:
        """Return slurm.conf and the munge socket where the bootstrap's Slurm layout puts them."""
        config = BootstrapConfig(target="local", os="debian12", local=self.local_cluster())
        layout = slurm_layout(config)

        def under_prefix(path: str) -> Path:
            return self.path(path.replace("@KILN_ROOT@", ""))

        return {
            "conf": under_prefix(f"{layout.conf_dir}/slurm.conf"),
            "munge_socket": under_prefix(layout.munge_socket),
            "log_dir": under_prefix(layout.log_dir),
        }

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_paths()["conf"]

    @property
    def munge_socket(self) -> Path:
        return self.slurm_paths()["munge_socket"]

    def node(self, name: str) -> NodeLayout:
        """Return the node called NAME."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise LocalError(f"no node {name!r} in this cluster (nodes: {', '.join(n.name for n in self.nodes)})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ClusterLayout:
        nodes = tuple(NodeLayout(**node) for node in data["nodes"])
        return cls(**{**data, "nodes": nodes, "exporters": tuple(data.get("exporters", ()))})


def plan_layout(
    *,
    prefix: str,
    nodes: int,
    tag: str = DEFAULT_TAG,
    subnet: str = DEFAULT_SUBNET,
    slurmctld_port: int = 6817,
    slurmd_port: int = 6818,
    cluster_name: str = DEFAULT_CLUSTER_NAME,
    spec: str | None = None,
    exporters: tuple[str, ...] = (),
    prometheus: bool = False,
    code_server_user: str = "",
    replace_nodes: bool = True,
    auto_resume: bool = True,
) -> ClusterLayout:
    """Return the layout of a new cluster; raise LocalError for values that cannot work."""
    if not _TAG.match(tag):
        raise LocalError(f"--tag: got {tag!r}, allowed: ^[a-z][a-z0-9]{{0,7}}$ (it prefixes interface names)")
    if not 1 <= nodes <= MAX_NODES:
        raise LocalError(f"--nodes: got {nodes}, allowed: 1..{MAX_NODES}")
    try:
        network = ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        raise LocalError(f"--subnet: got {subnet!r}, allowed: an IPv4 network such as {DEFAULT_SUBNET}") from None
    if network.version != 4 or not network.is_private:
        raise LocalError(f"--subnet: got {subnet!r}, allowed: a private IPv4 network such as {DEFAULT_SUBNET}")
    prefix = os.path.abspath(prefix)
    try:
        # The bootstrap's own helper hands out the addresses, so both always agree.
        cluster = dataclasses.replace(
            LocalCluster.from_subnet(cluster_name, prefix, nodes, str(network)),
            slurmctld_port=slurmctld_port,
            slurmd_port=slurmd_port,
        )
    except ValueError as error:
        raise LocalError(str(error)) from None
    return ClusterLayout(
        prefix=cluster.prefix,
        tag=tag,
        subnet=str(network),
        cluster_name=cluster.cluster_name,
        controller_address=cluster.controller_address,
        slurmctld_port=cluster.slurmctld_port,
        slurmd_port=cluster.slurmd_port,
        nodes=tuple(
            NodeLayout(
                name=node.name,
                address=node.address,
                netns=f"{tag}-{node.name}",
                veth=f"{tag}-v{index}",
                cpus=node.cpus,
                memory_mib=node.real_memory_mib,
            )
            for index, node in enumerate(cluster.nodes, start=1)
        ),
        spec=spec,
        exporters=exporters,
        prometheus=prometheus,
        code_server_user=code_server_user,
        replace_nodes=replace_nodes,
        auto_resume=auto_resume,
    )
