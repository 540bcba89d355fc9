"""The network interfaces kiln gives one node, and the private addresses they take (standard library only).

The launch templates (PCS, EKS) attach exactly this layout; preflight counts a subnet's addresses from it, and from
the interfaces ParallelCluster's own templates attach (platforms.json, parallelcluster.node_addresses).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.catalog.facts import instance_type as catalog_instance_type
from kiln.catalog.platforms import service_fact

# An EFA-only interface carries no IP address (EC2: "EFA-only interfaces ... do not have IP addresses").
EFA_ONLY = "efa-only"


@dataclass(frozen=True, kw_only=True)
class InterfaceLayout:
    """One network interface of a node."""

    network_card_index: int
    device_index: int
    interface_type: str | None

    @property
    def takes_address(self) -> bool:
        """Return True when the interface takes a private IPv4 address from the subnet."""
        return self.interface_type != EFA_ONLY


def efa_layout(instance_type: str) -> list[InterfaceLayout]:
    """Return the interfaces for INSTANCE_TYPE: card 0 device 0 (efa where card 0 has EFA, else ENA); every
    other EFA card device 1, efa-only where possible."""
    facts = catalog_instance_type(instance_type)
    cards = facts.efa_cards
    secondary = EFA_ONLY if facts.efa_only_interfaces else "efa"
    primary = InterfaceLayout(network_card_index=0, device_index=0, interface_type="efa" if 0 in cards else None)
    return [primary] + [
        InterfaceLayout(network_card_index=card, device_index=1, interface_type=secondary) for card in cards if card
    ]


def layout_addresses(instance_type: str) -> int:
    """Return the subnet addresses one node with kiln's layout takes: one per interface that is not EFA-only."""
    return sum(1 for interface in efa_layout(instance_type) if interface.takes_address)


def addresses_with_efa_everywhere(instance_type: str) -> int:
    """Return the addresses a node takes when every EFA interface carries an IP (a backend that attaches its own
    interfaces, as ParallelCluster and HyperPod do): one per EFA interface, or one for a type without EFA."""
    return max(1, catalog_instance_type(instance_type).efa_interface_count)


# ParallelCluster's kinds of node, as platforms.json's parallelcluster.node_addresses names them.
PARALLELCLUSTER_NODES = ("compute", "head_node", "login_node")
PER_NETWORK_CARD = "per_network_card"


def parallelcluster_addresses(instance_type: str, node: str) -> int:
    """Return the subnet addresses one ParallelCluster NODE (compute, head_node or login_node) of INSTANCE_TYPE takes:
    ParallelCluster attaches its own interfaces, and a compute node with EFA (on wherever the type supports it) takes
    one, its EFA interfaces being EFA-only."""
    if node not in PARALLELCLUSTER_NODES:
        raise ValueError(f"ParallelCluster has no {node!r} nodes; expected one of {', '.join(PARALLELCLUSTER_NODES)}")
    facts = catalog_instance_type(instance_type)
    rules = service_fact("parallelcluster", "node_addresses").value
    if node == "compute":
        node = "compute_with_efa" if facts.efa_supported else "compute_without_efa"
    rule = rules[node]
    return facts.network_cards if rule == PER_NETWORK_CARD else int(rule)
