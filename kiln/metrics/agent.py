"""The Prometheus agent's configuration: Slurm's nodes from kiln-metrics targets, its own node at localhost.

Written as JSON, which Prometheus reads as the YAML it is. Valid for the agent (Prometheus 3 ``--agent``, 2.x
``--enable-feature=agent``) and for a plain server alike: no rule files, no alerting.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from kiln.catalog.exporters import EXPORTERS, SCRAPE_INTERVAL_S, Exporter
from kiln.catalog.names import REGION
from kiln.metrics.targets import EVERY_NODE_EXPORTERS, PER_NODE_EXPORTERS, render, targets_file, write_if_changed

# Longer than the Slurm exporter's clients may take (kiln.metrics.slurm.DEFAULT_TIMEOUT_S), so a slow
# controller reads as kiln_slurm_up 0 rather than a failed scrape; below the interval, as Prometheus requires.
SCRAPE_TIMEOUT_S = 20
# file_sd follows its files with inotify; the refresh is the fallback, as often as kiln-metrics targets writes.
FILE_SD_REFRESH_S = 30
# Plain HTTP only to this machine (tests, a local receiver); anything remote is HTTPS.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
SLURM_EXPORTER = "slurm"
SLURM_INSTANCE = "slurmctld"
# Amazon Managed Prometheus's high-availability label: one agent per value, deduplicated per cluster label.
REPLICA_LABEL = "__replica__"


def check_label_value(what: str, value: str) -> str:
    """Return VALUE if it is a non-empty, printable label value; raise ValueError naming WHAT otherwise."""
    if not value.strip() or not value.isprintable():
        raise ValueError(f"expected a non-empty, printable {what} (got {value!r})")
    return value


def check_remote_write_url(url: str) -> str:
    """Return URL if Prometheus may remote-write to it: https://HOST/..., or http:// to loopback; else ValueError."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise ValueError(f"expected an https:// URL (got {url!r}: {exc})") from None
    if parts.username is not None or parts.password is not None:
        # The configuration file is world-readable; Amazon Managed Prometheus signs with sigv4 instead.
        raise ValueError(f"expected a URL without credentials (got {parts.scheme}://...@{parts.hostname})")
    local = parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS
    if not (parts.scheme == "https" or local) or not parts.hostname or not url.isprintable() or " " in url:
        raise ValueError(f"expected an https:// URL, or http:// to 127.0.0.1 or localhost (got {url!r})")
    return url


def check_region(region: str) -> str:
    """Return REGION if it is shaped like an AWS region name (us-east-1); raise ValueError otherwise."""
    if not REGION.fullmatch(region):
        raise ValueError(f"expected an AWS region name such as us-east-1 (got {region!r})")
    return region


def agent_config(
    *,
    cluster: str,
    targets_dir: Path,
    exporters: Iterable[Exporter],
    self_name: str,
    remote_write_url: str | None = None,
    region: str | None = None,
    self_address: str = "localhost",
    self_exporters: Iterable[str] | None = None,
) -> dict:
    """Return the agent's Prometheus configuration: one scrape job per exporter, remote_write when a URL is given.

    Per-node exporters' targets come from file_sd files in TARGETS_DIR (kiln-metrics targets); the agent's own
    node (SELF_NAME) is scraped at SELF_ADDRESS (localhost) for SELF_EXPORTERS: by default the Slurm exporter and
    those that run on every node, of the ones asked.
    REGION signs the remote writes with sigv4 (Amazon Managed Prometheus). Raises ValueError on a bad value.
    """
    check_label_value("cluster name", cluster)
    check_label_value("node name", self_name)
    asked = {exporter.name for exporter in exporters}
    on_self = asked if self_exporters is None else set(self_exporters)
    # One job per exporter, in the catalog's order whatever the order asked.
    scrape_configs = [
        _scrape_config(exporter, targets_dir, self_name, self_address if exporter.name in on_self else None)
        | {"relabel_configs": [{"target_label": "cluster", "replacement": cluster}]}
        for exporter in EXPORTERS.values()
        if exporter.name in asked
    ]
    config: dict = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "scrape_timeout": f"{SCRAPE_TIMEOUT_S}s",
            # Every series carries cluster=<name> as the dashboards select it: set on each target (so a Prometheus
            # queried where it scrapes has it too) and as an external label (kept on what is remote-written).
            "external_labels": {"cluster": cluster},
        },
        "scrape_configs": scrape_configs,
    }
    if remote_write_url:
        # Several agents of one cluster (PCS with more than one login node) send the same series: Amazon Managed
        # Prometheus keeps one replica's samples per cluster label and drops the replica label (its HA
        # deduplication), so the Slurm and compute-node series are not counted twice.
        config["global"]["external_labels"][REPLICA_LABEL] = self_name
        # Queue settings stay Prometheus's own defaults: nothing measured here argues for others.
        remote_write: dict = {"url": check_remote_write_url(remote_write_url)}
        if region:
            remote_write["sigv4"] = {"region": check_region(region)}
        config["remote_write"] = [remote_write]
    return config


def _scrape_config(exporter: Exporter, targets_dir: Path, self_name: str, self_address: str | None) -> dict:
    job: dict = {"job_name": exporter.job}
    target = f"{self_address}:{exporter.port}"
    if self_address is not None and exporter.name == SLURM_EXPORTER:
        # One instance name whichever node serves it: the exporter describes the cluster (its samples carry a node
        # label of their own, naming the node they describe), so every agent's copy is the same series.
        job["static_configs"] = [{"targets": [target], "labels": {"instance": SLURM_INSTANCE}}]
    elif self_address is not None and exporter.name in EVERY_NODE_EXPORTERS:
        job["static_configs"] = [{"targets": [target], "labels": {"instance": self_name, "node": self_name}}]
    if exporter.name in PER_NODE_EXPORTERS:
        files = [os.path.abspath(targets_file(targets_dir, exporter))]
        job["file_sd_configs"] = [{"files": files, "refresh_interval": f"{FILE_SD_REFRESH_S}s"}]
    if len(job) == 1:
        raise ValueError(f"kiln-metrics does not know which nodes run the {exporter.name!r} exporter")
    return job


def write_agent_config(path: Path, config: dict) -> bool:
    """Write CONFIG to PATH as JSON, atomically, unless PATH holds it already; return whether it wrote."""
    return write_if_changed(path, render(config))
