"""The local target's input: the nodes and ports of a local Slurm cluster (stdlib only)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kiln.bootstrap.checks import (
    SLURM_NAME,
    SLURM_NAME_RULE,
    BootstrapInputError,
    check_node_path,
    check_pattern,
    check_positive,
)


@dataclass(frozen=True, kw_only=True)
class LocalNode:
    """One node of the local cluster: a network namespace running `slurmd -N name`."""

    name: str
    address: str
    cpus: int = 1
    real_memory_mib: int = 1024

    def __post_init__(self) -> None:
        check_pattern("local node name", self.name, SLURM_NAME, SLURM_NAME_RULE)
        try:
            ipaddress.ip_address(self.address)
        except ValueError:
            raise BootstrapInputError(
                f"local node {self.name} address: got {self.address!r}, allowed: an IP address"
            ) from None
        check_positive(f"local node {self.name} cpus", self.cpus)
        check_positive(f"local node {self.name} real_memory_mib", self.real_memory_mib)


@dataclass(frozen=True, kw_only=True)
class LocalCluster:
    """The local cluster: one slurmctld and munged plus N slurmd nodes, all state under PREFIX."""

    prefix: str
    nodes: tuple[LocalNode, ...]
    # The address slurmd reaches slurmctld at (e.g. the bridge address of the namespaces).
    controller_address: str
    # slurmctld only starts on the host its SlurmctldHost names; None: the machine's short host name at boot.
    controller_host: str | None = None
    cluster_name: str = "kiln-local"
    partition: str = "local"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818

    @classmethod
    def from_subnet(cls, name: str, prefix: str, nodes: int, subnet: str) -> LocalCluster:
        """Return a cluster of NODES nodes named node1..N, addressed in order from SUBNET after the controller."""
        network = ipaddress.ip_network(subnet, strict=False)
        if nodes < 1 or nodes + 1 > network.num_addresses - 2:
            raise BootstrapInputError(f"nodes: got {nodes}, allowed: 1..{network.num_addresses - 3} for {subnet}")
        hosts = network.hosts()
        controller = str(next(hosts))
        members = tuple(LocalNode(name=f"node{index}", address=str(next(hosts))) for index in range(1, nodes + 1))
        return cls(prefix=prefix, nodes=members, controller_address=controller, cluster_name=name[:63])

    def __post_init__(self) -> None:
        check_node_path("local.prefix", self.prefix)
        if self.prefix.rstrip("/") == "":
            raise BootstrapInputError(
                "local.prefix: got '/', allowed: a private directory (the host's /etc must stay untouched)"
            )
        if not self.nodes:
            raise BootstrapInputError("local.nodes: got none, allowed: at least one LocalNode")
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names) or (self.controller_host and self.controller_host in names):
            raise BootstrapInputError(f"local node names must be unique and differ from the controller's: got {names}")
        LocalNode(name=self.controller_host or "controller", address=self.controller_address)
        check_pattern("local.cluster_name", self.cluster_name, SLURM_NAME, SLURM_NAME_RULE)
        check_pattern("local.partition", self.partition, SLURM_NAME, SLURM_NAME_RULE)
        for what, port in (("slurmctld_port", self.slurmctld_port), ("slurmd_port", self.slurmd_port)):
            if not isinstance(port, int) or not 1024 <= port <= 65535:
                raise BootstrapInputError(f"local.{what}: got {port!r}, allowed: 1024..65535")
        if self.slurmctld_port == self.slurmd_port:
            raise BootstrapInputError(
                f"local ports: slurmctld_port and slurmd_port must differ (got {self.slurmd_port} twice)"
            )
