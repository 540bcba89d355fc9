"""The cluster's private network: one bridge on the host, one namespace and veth pair per node."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from pathlib import Path

from kiln.local.errors import LocalError, LocalFailure
from kiln.local.layout import NETNS_DIR, NODE_INTERFACE, ClusterLayout, NodeLayout

SYS_NET = Path("/sys/class/net")
# Namespaces and veths vanish asynchronously once released; wait this long for them.
REMOVE_TIMEOUT_S = 10.0


def link_exists(name: str) -> bool:
    """True when the host's network namespace has an interface NAME."""
    return (SYS_NET / name).exists()


def netns_exists(node: NodeLayout) -> bool:
    return node.netns_path.exists()


def ip_batch(commands: list[str], namespace: str | None = None) -> None:
    """Run COMMANDS through one `ip -batch`; raise LocalFailure naming the command that failed."""
    if not commands:
        return
    argv = ["ip", *(["-n", namespace] if namespace else []), "-batch", "-"]
    result = subprocess.run(argv, input="\n".join(commands) + "\n", capture_output=True, text=True)
    if result.returncode != 0:
        detail = " ".join(result.stderr.split())
        raise LocalFailure(f"`{' '.join(argv)}` failed: {detail}")


def create_bridge(layout: ClusterLayout) -> None:
    """Create the bridge (if missing) and give it the controller's address."""
    commands = []
    if not link_exists(layout.bridge):
        commands.append(f"link add {layout.bridge} type bridge")
    commands += [
        f"address replace {layout.controller_address}/{layout.prefix_length} dev {layout.bridge}",
        f"link set {layout.bridge} up",
    ]
    ip_batch(commands)


def node_mac(address: str) -> str:
    """Return the locally administered unicast hardware address of the node at IPv4 ADDRESS: 02:6b and its 4 bytes."""
    return ":".join(f"{byte:02x}" for byte in (0x02, 0x6B, *ipaddress.IPv4Address(address).packed))


def create_node(layout: ClusterLayout, node: NodeLayout) -> None:
    """Create NODE's namespace and veth pair (where missing), plug it into the bridge and address it."""
    host = []
    if not netns_exists(node):
        host.append(f"netns add {node.netns}")
    if not link_exists(node.veth):
        host.append(f"link add {node.veth} type veth peer name {NODE_INTERFACE} netns {node.netns}")
    host += [f"link set {node.veth} master {layout.bridge}", f"link set {node.veth} up"]
    ip_batch(host)
    ip_batch(
        [
            # The same hardware address every time the node is created: a replaced node keeps it, so the other nodes'
            # neighbour caches stay right and their first connection to the new node does not time out on the old one.
            f"link set {NODE_INTERFACE} address {node_mac(node.address)}",
            f"address replace {node.address}/{layout.prefix_length} dev {NODE_INTERFACE}",
            f"link set {NODE_INTERFACE} up",
            "link set lo up",
        ],
        namespace=node.netns,
    )


def remove(bridge: str | None, veths: tuple[str, ...], namespaces: tuple[str, ...]) -> None:
    """Delete the given veths, namespaces and bridge where they still exist, and wait until they are gone."""
    commands = [f"link delete {veth}" for veth in veths if link_exists(veth)]
    commands += [f"netns delete {name}" for name in namespaces if (NETNS_DIR / name).exists()]
    if bridge and link_exists(bridge):
        commands.append(f"link delete {bridge}")
    ip_batch(commands)
    deadline = time.monotonic() + REMOVE_TIMEOUT_S
    links = [*veths, *([bridge] if bridge else [])]
    while (left := [name for name in links if link_exists(name)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    if left:
        raise LocalFailure(f"interfaces {', '.join(left)} are still there after {REMOVE_TIMEOUT_S:.0f}s")


def hosts_text(layout: ClusterLayout) -> str:
    """Return the /etc/hosts the nodes see: loopback plus every node, so node names resolve inside."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{node.address}\t{node.name}" for node in layout.nodes]
    # Dual-stack servers (torch's c10d store) see peers as ::ffff:a.b.c.d; without a name for those
    # their reverse lookups fall through to DNS, which no namespace can reach, and warn on every
    # connection. A name of their own keeps forward lookups of the node name IPv4 only.
    lines += [f"::ffff:{node.address}\t{node.name}-v4mapped" for node in layout.nodes]
    return "\n".join(lines) + "\n"


def write_hosts(layout: ClusterLayout) -> None:
    layout.hosts_file.parent.mkdir(parents=True, exist_ok=True)
    layout.hosts_file.write_text(hosts_text(layout))


def overlapping_routes(subnet: str, routes: list[dict]) -> list[str]:
    """Return 'DST dev DEV' for each route of ROUTES (`ip -j route` output) that overlaps SUBNET."""
    network = ipaddress.ip_network(subnet)
    clashes = []
    for route in routes:
        destination = route.get("dst", "")
        # A default route covers everything and is what leaves the machine: never ours to worry about.
        if destination in ("", "default"):
            continue
        try:
            other = ipaddress.ip_network(destination, strict=False)
        except ValueError:
            continue
        if other.version == network.version and other.overlaps(network):
            clashes.append(f"{destination} dev {route.get('dev', '?')}")
    return clashes


def host_routes() -> list[dict]:
    """Return the host's IPv4 routes as `ip -j route` prints them."""
    result = subprocess.run(["ip", "-j", "-4", "route", "show"], capture_output=True, text=True)
    if result.returncode != 0:
        raise LocalError(f"`ip -j -4 route show` failed: {' '.join(result.stderr.split())}")
    return json.loads(result.stdout or "[]")
