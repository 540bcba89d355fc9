"""The local cluster's Prometheus exporters: Debian's node exporter inside each node's namespace, kiln's Slurm
exporter beside slurmctld, and (observability.prometheus) Debian's Prometheus over them, configured by the same
kiln-metrics targets and agent-config as a cloud node's agent; their command lines, endpoints and whether each
answers."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog.exporters import EXPORTERS, PROMETHEUS_PORT
from kiln.local.errors import LocalFailure
from kiln.local.layout import ClusterLayout, NodeLayout

# Debian's prometheus-node-exporter package (install_exporters installs it for the local target).
NODE_EXPORTER = "prometheus-node-exporter"
# Debian's prometheus package (install_exporters installs it when the spec asks for Prometheus).
PROMETHEUS = "prometheus"
SCRAPE_TIMEOUT_S = 5.0
PREPARE_TIMEOUT_S = 60.0


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
    # Commands to run, in order and to success, before it starts (with Slurm's client environment).
    prepare: tuple[tuple[str, ...], ...] = ()
    path: str = "/metrics"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}{self.path}"

    @property
    def title(self) -> str:
        return "Prometheus" if self.kind == PROMETHEUS else f"{self.kind} exporter"


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


def _kiln_metrics(layout: ClusterLayout, *args: str) -> tuple[str, ...]:
    return (str(Path(layout.venv) / "bin" / "python"), "-m", "kiln.metrics", *args)


def prometheus_dir(layout: ClusterLayout) -> Path:
    """Return where the local Prometheus keeps its configuration, targets and data."""
    return layout.path("/var/lib/kiln-local/prometheus")


def _slurm_exporter(layout: ClusterLayout) -> LocalExporter:
    port = EXPORTERS["slurm"].port
    argv = _kiln_metrics(layout, "slurm", "--listen", f"{layout.controller_address}:{port}")
    return LocalExporter(
        role="slurm-exporter",
        kind="slurm",
        where="controller",
        address=layout.controller_address,
        port=port,
        argv=argv,
        launch=argv,
    )


def _prometheus(layout: ClusterLayout) -> LocalExporter:
    """Prometheus as a server (nothing to remote-write to here), with the agent's configuration: the nodes' exporters
    from sinfo (the local nodes are fixed, so once), the Slurm exporter on the controller's address."""
    directory = prometheus_dir(layout)
    config, targets = directory / "prometheus.yml", directory / "targets"
    per_node = [name for name in layout.exporters if name != "slurm"]
    prepare = []
    if per_node:
        prepare.append(
            _kiln_metrics(layout, "targets", "--dir", str(targets), "--exporters", ",".join(per_node), "--once")
        )
    prepare.append(
        _kiln_metrics(
            layout,
            "agent-config",
            "--cluster",
            layout.cluster_name,
            "--targets-dir",
            str(targets),
            "--exporters",
            ",".join(layout.exporters),
            "--self",
            "controller",
            "--self-address",
            layout.controller_address,
            "--self-exporters",
            "slurm" if "slurm" in layout.exporters else "",
            "--out",
            str(config),
        )
    )
    argv = (
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address={layout.controller_address}:{PROMETHEUS_PORT}",
    )
    return LocalExporter(
        role="prometheus",
        kind=PROMETHEUS,
        where="controller",
        address=layout.controller_address,
        port=PROMETHEUS_PORT,
        argv=argv,
        launch=argv,
        prepare=tuple(prepare),
        path="/-/ready",
    )


def exporter_processes(layout: ClusterLayout) -> tuple[LocalExporter, ...]:
    """Return the exporter processes LAYOUT's cluster runs, in start order (Prometheus, when it runs, last)."""
    found: list[LocalExporter] = []
    if "node" in layout.exporters:
        found += [_node_exporter(node) for node in layout.nodes]
    if "slurm" in layout.exporters:
        found.append(_slurm_exporter(layout))
    if layout.prometheus and layout.exporters:
        found.append(_prometheus(layout))
    return tuple(found)


def prepare(exporter: LocalExporter, env: dict[str, str]) -> None:
    """Run what EXPORTER needs before it starts (ENV: Slurm's client environment); LocalFailure names what failed."""
    for command in exporter.prepare:
        shown = " ".join(command[2:4])
        try:
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PREPARE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LocalFailure(f"{exporter.role}: `{shown}` took over {PREPARE_TIMEOUT_S:g}s") from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            reason = detail[-1] if detail else f"exit {result.returncode}"
            raise LocalFailure(f"{exporter.role}: `{shown}` failed: {reason}")


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str | None:
    """Return the metrics text at URL, or None when it does not answer with 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http to the cluster's own nodes
            return response.read().decode() if response.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None
