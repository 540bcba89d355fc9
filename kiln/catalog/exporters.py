"""The Prometheus exporters kiln runs on nodes: their names, ports and scrape jobs. Standard library only.

The bootstrap (systemd units), the local cluster, the scrape configurations and the dashboards all read these,
so a port or a job name is written once. Ports follow Prometheus's default port allocations where an exporter
has one (node 9100, DCGM 9400, Slurm 9341); kiln's EFA counter exporter takes the next free one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Exporter:
    """One exporter: its name in specs and bundles, the port it serves /metrics on, and its scrape job."""

    name: str
    port: int
    job: str
    # Which nodes run it: every node, the node of the Slurm controller, GPU nodes or EFA nodes.
    runs_on: str
    description: str


# How often kiln's agents and AMP's collector scrape the exporters (AMP's collectors scrape at most every 30 s); the
# dashboards' data source is told, so Grafana's $__rate_interval spans enough samples.
SCRAPE_INTERVAL_S = 30

# The port Prometheus serves on where kiln runs it: the agent on a Slurm backend's node (loopback only), the
# local cluster's server (on the controller's address).
PROMETHEUS_PORT = 9090

EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        Exporter(
            name="node",
            port=9100,
            job="node",
            runs_on="every node",
            description="Prometheus's node exporter: CPU, memory, disks, network",
        ),
        Exporter(
            name="slurm",
            port=9341,
            job="slurm",
            runs_on="the Slurm controller's node (PCS: login nodes)",
            description="kiln's Slurm exporter: nodes, CPUs and GPUs allocated, jobs by state and pending reason",
        ),
        Exporter(
            name="dcgm",
            port=9400,
            job="dcgm",
            runs_on="GPU nodes",
            description="NVIDIA's DCGM exporter: GPU use, memory, temperature, power, XID and ECC errors",
        ),
        Exporter(
            name="efa",
            port=9342,
            job="efa",
            runs_on="every node of a cluster with EFA nodes (0 devices on the others); on EKS the training nodes",
            description="kiln's EFA exporter: the EFA devices' hardware counters (bytes, RDMA, drops, retransmits)",
        ),
    )
}
