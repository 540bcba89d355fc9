"""Read NCCL_DEBUG=INFO output for the transport NCCL chose, to catch a fall-back to TCP sockets.

The evidence NCCL prints at communicator init: ``Using network Socket`` (TCP),
``Using network Libfabric`` / ``Using network AWS Libfabric`` (the aws-ofi-nccl
plugin), ``Using network IB``; the plugin's ``NET/OFI Selected provider is efa``
(a ``tcp`` or ``sockets`` provider is TCP again, under libfabric); and channel
lines ``via NET/Socket/0``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_;:+-]+)")
_VIA_SOCKET = re.compile(r"via NET/Socket")
_OFI_VERSION = re.compile(r"NET/OFI Using aws-ofi-nccl (\S+)")
_PLUGIN_MISSING = re.compile(r"NET/Plugin.*(?:Could not find|Plugin load returned|No plugin found)")
EFA_PROVIDERS = {"efa"}


@dataclass(frozen=True, kw_only=True)
class Transport:
    """What NCCL said about its network, and whether that means TCP on a node that has EFA."""

    networks: tuple[str, ...]
    providers: tuple[str, ...]
    aws_ofi_nccl: str | None
    plugin_missing: bool
    evidence: tuple[str, ...] = field(default=())

    @property
    def found(self) -> bool:
        """Return whether any line named the network."""
        return bool(self.networks or self.providers)

    @property
    def tcp_fallback(self) -> bool:
        """Return whether traffic goes over TCP sockets: NCCL's own, or libfabric's tcp provider."""
        if any(network == "Socket" for network in self.networks):
            return True
        return any(provider.split(";")[0] not in EFA_PROVIDERS for provider in self.providers)

    @property
    def uses_efa(self) -> bool:
        """Return whether NCCL runs over libfabric's EFA provider and nothing else."""
        libfabric = bool(self.networks) and all("Libfabric" in network for network in self.networks)
        return libfabric and bool(self.providers) and not self.tcp_fallback


def parse(lines: Iterable[str]) -> Transport:
    """Return the transport evidence in NCCL debug output LINES."""
    networks: list[str] = []
    providers: list[str] = []
    evidence: list[str] = []
    version = None
    missing = False
    for raw in lines:
        line = raw.rstrip("\n")
        if match := _NETWORK.search(line):
            networks.append(match.group(1))
            evidence.append(line.strip())
        elif match := _PROVIDER.search(line):
            providers.append(match.group(1))
            evidence.append(line.strip())
        elif _VIA_SOCKET.search(line):
            networks.append("Socket")
            evidence.append(line.strip())
        elif match := _OFI_VERSION.search(line):
            version = match.group(1)
        elif _PLUGIN_MISSING.search(line):
            missing = True
            evidence.append(line.strip())
    return Transport(
        networks=tuple(dict.fromkeys(networks)),
        providers=tuple(dict.fromkeys(providers)),
        aws_ofi_nccl=version,
        plugin_missing=missing,
        evidence=tuple(dict.fromkeys(evidence))[:8],
    )
