"""The local cluster's Prometheus exporters: Debian's node exporter inside each node's namespace, kiln's Slurm
exporter beside slurmctld; their command lines, endpoints and whether each answers."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog.exporters import EXPORTERS
from kiln.local.layout import ClusterLayout, NodeLayout

# Debian's prometheus-node-exporter package (install_exporters installs it for the local target).
NODE_EXPORTER = "prometheus-node-exporter"
SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class LocalExporter:
    """One exporter process of the local cluster: its daemon role, where it listens, how it starts."""

    role: str
    kind: str
    where: str
    address: str
    port: int
    # The command as /proc shows it once it runs (what procs.start waits for) and how it is started.
    argv: tuple[str, ...]
    launch: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"


def _node_exporter(node: NodeLayout) -> LocalExporter:
    port = EXPORTERS["node"].port
    # Collectors that read the machine as a whole stay; textfile (Debian's directory) would read host files.
    argv = (NODE_EXPORTER, f"--web.listen-address={node.address}:{port}", "--no-collector.textfile")
    return LocalExporter(
        role=f"node-exporter:{node.name}",
        kind="node",
        where=node.name,
        address=node.address,
        port=port,
        argv=argv,
        # Inside the node's network namespace: it listens on the node's address and reports the node's interfaces.
        launch=("nsenter", f"--net={node.netns_path}", *argv),
    )


def _slurm_exporter(layout: ClusterLayout) -> LocalExporter:
    port = EXPORTERS["slurm"].port
    python = str(Path(layout.venv) / "bin" / "python")
    argv = (python, "-m", "kiln.metrics", "slurm", "--listen", f"{layout.controller_address}:{port}")
    return LocalExporter(
        role="slurm-exporter",
        kind="slurm",
        where="controller",
        address=layout.controller_address,
        port=port,
        argv=argv,
        launch=argv,
    )


def exporter_processes(layout: ClusterLayout) -> tuple[LocalExporter, ...]:
    """Return the exporter processes LAYOUT's cluster runs, in start order."""
    found: list[LocalExporter] = []
    if "node" in layout.exporters:
        found += [_node_exporter(node) for node in layout.nodes]
    if "slurm" in layout.exporters:
        found.append(_slurm_exporter(layout))
    return tuple(found)


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str | None:
    """Return the metrics text at URL, or None when it does not answer with 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http to the cluster's own nodes
            return response.read().decode() if response.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None
