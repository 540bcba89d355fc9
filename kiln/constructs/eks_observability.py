"""EksObservability: node and GPU exporters on EKS, scraped into Amazon Managed Prometheus by AWS's collector."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from aws_cdk import Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kiln.catalog.exporters import EXPORTERS, SCRAPE_INTERVAL_S
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.constructs._checks import PropError, refuse, require
from kiln.constructs.eks_addons import GPU_PRESENT_LABEL, TOLERATE_EVERYTHING, HelmAddon, kiln_labels
from kiln.constructs.prometheus import IPrometheusWorkspace
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP

MONITORING_NAMESPACE = "kiln-monitoring"
# The labels kiln's GPU node groups carry (EksTrainingCluster: the NVIDIA device plugin selects them by it too); they
# carry no taints. Pass it as gpu_node_selector for a cluster with GPU node groups.
GPU_NODE_SELECTOR: Mapping[str, str] = GPU_PRESENT_LABEL

# prometheus-community/helm-charts, chart prometheus-node-exporter 4.52.1 (published March 2026). Its pods carry
# app.kubernetes.io/name=prometheus-node-exporter and serve on the host network, container port "metrics" (9100).
# It runs on every node, tainted or not.
NODE_EXPORTER = HelmAddon(
    chart="prometheus-node-exporter",
    repository="https://prometheus-community.github.io/helm-charts",
    version="4.52.1",
    namespace=MONITORING_NAMESPACE,
    release="prometheus-node-exporter",
    values={"tolerations": TOLERATE_EVERYTHING},
)
# NVIDIA/dcgm-exporter, chart dcgm-exporter 4.8.3 (DCGM 4.6.0, exporter 4.8.3; published July 2026). Its pods carry
# app.kubernetes.io/name=dcgm-exporter, container port "metrics" (9400). The chart's ServiceMonitor needs the
# Prometheus operator's CRDs, which kiln does not install: the managed collector finds the pods itself.
DCGM_EXPORTER = HelmAddon(
    chart="dcgm-exporter",
    repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
    version="4.8.3",
    namespace=MONITORING_NAMESPACE,
    release="dcgm-exporter",
    values={"serviceMonitor": {"enabled": False}, "tolerations": TOLERATE_EVERYTHING},
    accelerator="gpu",
)
# Both charts name their container's metrics port so.
METRICS_PORT_NAME = "metrics"

# AWS's managed collectors scrape no more often than every 30 s (AMP User Guide, "Using an AWS managed collector",
# limitations of the scraper configuration); kiln's upper bound keeps a target's staleness under five minutes.
MIN_SCRAPE_INTERVAL_SECONDS = 30
MAX_SCRAPE_INTERVAL_SECONDS = 300
# Job names other engineers' dashboards select on (kiln.catalog.exporters, the one place they are written).
NODE_JOB = EXPORTERS["node"].job
DCGM_JOB = EXPORTERS["dcgm"].job
EFA_JOB = EXPORTERS["efa"].job
# The port kiln's EFA exporter (a systemd service on EFA nodes) listens on.
EFA_EXPORTER_PORT = EXPORTERS["efa"].port
# The AMP collector's service principal: it assumes the source role of a scraper's role configuration.
SCRAPER_PRINCIPAL = "scraper.aps.amazonaws.com"


def prometheus_label(name: str) -> str:
    """Return a Kubernetes label NAME as Prometheus's service discovery spells it (kiln.io/x -> kiln_io_x)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


@dataclass(frozen=True, kw_only=True)
class EksObservabilityProps:
    """Props for EksObservability.

    cluster: the EKS cluster (EksTrainingCluster.cluster, or eks.Cluster.from_cluster_attributes with a kubectl
        provider). Its endpoint must include private access and its authentication mode the EKS API (kiln's: API):
        AMP then gives its collector an access entry by itself (see EksObservability).
    workspace: where the metrics go, in this stack's account (PrometheusWorkspace, or
        PrometheusWorkspace.from_workspace_attributes); default None: the exporters run, and no collector scrapes
        them (a Prometheus of the platform team's own may).
    node_exporter: install Prometheus's node exporter on every node and scrape it as job "node"; default True.
    dcgm_exporter: install NVIDIA's DCGM exporter on the GPU nodes and scrape it as job "dcgm"; default True, but
        only a cluster with GPU nodes (gpu_node_selector) gets it.
    gpu_node_selector: the labels that select the GPU nodes; default None: the cluster has no GPU nodes. kiln's GPU
        node groups carry GPU_NODE_SELECTOR (nvidia.com/gpu.present=true). The exporter tolerates every taint.
    subnet_ids: subnets of the cluster's VPC for the collector's interfaces, at least two in two availability zones;
        default the VPC's private subnets.
    security_group_ids: the groups of those interfaces, which must reach the exporters and the private endpoint;
        default the cluster security group (control plane and every kiln node are members, and it admits itself).
    scrape_interval_seconds: 30 to 300 (AMP's collectors scrape at most every 30 s); default 30.
    cluster_label: the value of the `cluster` label every series gets (kiln's dashboards select clusters by it);
        default None: no such label.
    efa_exporter_port: also scrape this host port of every node but kiln's system nodes (Kubernetes node role) as job
        "efa"; default None (no EFA job). kiln's EFA exporter listens on EFA_EXPORTER_PORT (9342).
    """

    cluster: eks.ICluster
    workspace: IPrometheusWorkspace | None = None
    node_exporter: bool = True
    dcgm_exporter: bool = True
    gpu_node_selector: Mapping[str, str] | None = None
    subnet_ids: Sequence[str] = ()
    security_group_ids: Sequence[str] = ()
    scrape_interval_seconds: int = SCRAPE_INTERVAL_S
    efa_exporter_port: int | None = None
    cluster_label: str | None = None

    def __post_init__(self) -> None:
        require(
            self,
            self.workspace is None or isinstance(self.workspace, IPrometheusWorkspace),
            "workspace",
            type(self.workspace).__name__,
            "a PrometheusWorkspace or PrometheusWorkspace.from_workspace_attributes(...), or None",
        )
        interval = self.scrape_interval_seconds
        require(
            self,
            isinstance(interval, int)
            and not isinstance(interval, bool)
            and MIN_SCRAPE_INTERVAL_SECONDS <= interval <= MAX_SCRAPE_INTERVAL_SECONDS,
            "scrape_interval_seconds",
            interval,
            f"an integer from {MIN_SCRAPE_INTERVAL_SECONDS} to {MAX_SCRAPE_INTERVAL_SECONDS} "
            "(AWS's managed collectors scrape at most every 30 s)",
        )
        port = self.efa_exporter_port
        if port is not None:
            require(
                self,
                isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535,
                "efa_exporter_port",
                port,
                f"a port from 1 to 65535 (kiln's EFA exporter: {EFA_EXPORTER_PORT}), or None",
            )
        selector = self.gpu_node_selector
        if selector is not None:
            require(
                self,
                bool(selector) and all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()),
                "gpu_node_selector",
                selector,
                f"labels of the GPU nodes as strings, such as {dict(GPU_NODE_SELECTOR)}, or None for no GPU nodes",
            )
        subnets = list(self.subnet_ids)
        if subnets:
            require(
                self,
                len(subnets) >= 2 and len(set(subnets)) == len(subnets),
                "subnet_ids",
                subnets,
                "at least two different subnets, in at least two availability zones",
            )
        require(
            self,
            self.node_exporter or self.installs_dcgm or port is not None,
            "node_exporter/dcgm_exporter/efa_exporter_port",
            (self.node_exporter, self.dcgm_exporter if selector is not None else None, port),
            "at least one exporter to scrape (a DCGM exporter needs gpu_node_selector)",
        )

    @property
    def installs_dcgm(self) -> bool:
        """Whether the DCGM exporter is installed: it is wanted and the cluster has GPU nodes."""
        return self.dcgm_exporter and self.gpu_node_selector is not None


def _pod_job(job: str, addon: HelmAddon) -> dict[str, Any]:
    """A job scraping the running pods of ADDON's chart on their metrics port, labelled with their node."""
    return {
        "job_name": job,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [addon.namespace]}}],
        "relabel_configs": [
            {
                "source_labels": [
                    "__meta_kubernetes_pod_label_app_kubernetes_io_name",
                    "__meta_kubernetes_pod_container_port_name",
                    "__meta_kubernetes_pod_phase",
                ],
                "regex": f"{addon.chart};{METRICS_PORT_NAME};Running",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def _efa_job(port: int) -> dict[str, Any]:
    """A job scraping PORT on every node's internal address, but kiln's system nodes (which have no EFA)."""
    return {
        "job_name": EFA_JOB,
        "kubernetes_sd_configs": [{"role": "node"}],
        "relabel_configs": [
            {
                "source_labels": [f"__meta_kubernetes_node_label_{prometheus_label(NODE_GROUP_LABEL)}"],
                "regex": EKS_SYSTEM_NODE_GROUP,
                "action": "drop",
            },
            {
                "source_labels": ["__meta_kubernetes_node_address_InternalIP"],
                "regex": "(.+)",
                "target_label": "__address__",
                "replacement": f"$1:{port}",
            },
            {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
        ],
    }


def scrape_config(
    *,
    interval_seconds: int,
    node_exporter: bool,
    dcgm_exporter: bool,
    efa_exporter_port: int | None,
    cluster_label: str | None = None,
) -> dict[str, Any]:
    """Return the Prometheus scrape configuration of kiln's exporters: jobs node, dcgm and efa, as chosen."""
    jobs = []
    if node_exporter:
        jobs.append(_pod_job(NODE_JOB, NODE_EXPORTER))
    if dcgm_exporter:
        jobs.append(_pod_job(DCGM_JOB, DCGM_EXPORTER))
    if efa_exporter_port is not None:
        jobs.append(_efa_job(efa_exporter_port))
    settings: dict[str, Any] = {"scrape_interval": f"{interval_seconds}s"}
    if cluster_label is not None:
        settings["external_labels"] = {"cluster": cluster_label}
    return {"global": settings, "scrape_configs": jobs}


class EksObservability(Construct):
    """Exporters on an EKS cluster and an AWS managed collector (AMP scraper) that writes their metrics to a workspace.

    The node exporter (every node) and NVIDIA's DCGM exporter (GPU nodes) come from their Helm charts, pinned, in the
    kiln-monitoring namespace. The collector (child "Scraper") discovers their pods, and the nodes for kiln's EFA
    exporter, through the Kubernetes API and scrapes them from interfaces in the cluster's VPC.

    Cluster access: on a cluster whose authentication mode includes the EKS API, AMP creates the collector's access
    entry itself, with the read access AWS documents (get/list/watch on nodes, nodes/metrics, pods, services,
    endpoints and more; get on /metrics), and
    deletes it with the collector; an entry of kiln's own for the same role would collide with it, so kiln makes none.
    A CONFIG_MAP-only cluster needs the role (scraper_role_arn) mapped in aws-auth by hand (AMP User Guide,
    "Manually configuring Amazon EKS for scraper access").

    Writes: the collector writes through a role configuration (AWS's way for workspaces under a customer-managed
    key): AMP assumes source_role, which assumes target_role, which may only write to this workspace.
    """

    def __init__(self, scope: Construct, construct_id: str, props: EksObservabilityProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        cluster = props.cluster
        self.namespace = eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=cluster,
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": MONITORING_NAMESPACE, "labels": kiln_labels(MONITORING_NAMESPACE)},
                }
            ],
        )
        self.charts: dict[str, eks.HelmChart] = {}
        if props.node_exporter:
            self.charts[NODE_EXPORTER.chart] = self._chart("NodeExporter", NODE_EXPORTER, {})
        if props.installs_dcgm:
            self.charts[DCGM_EXPORTER.chart] = self._chart(
                "DcgmExporter", DCGM_EXPORTER, {"nodeSelector": dict(props.gpu_node_selector or {})}
            )
        self.scrape_config = scrape_config(
            interval_seconds=props.scrape_interval_seconds,
            node_exporter=props.node_exporter,
            dcgm_exporter=props.installs_dcgm,
            efa_exporter_port=props.efa_exporter_port,
            cluster_label=props.cluster_label,
        )
        self.scraper: aps.CfnScraper | None = None
        if props.workspace is not None:
            self._collector(props.workspace)

    def _collector(self, workspace: IPrometheusWorkspace) -> None:
        cluster = self._props.cluster
        self.source_role, self.target_role = self._write_roles(workspace)
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster.cluster_arn,
                    subnet_ids=self._subnet_ids(),
                    security_group_ids=self._security_group_ids(),
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=workspace.workspace_arn)
            ),
            # CloudFormation takes the YAML itself (AWS::APS::Scraper's example) and encodes it for the API.
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(configuration_blob=self.configuration_yaml),
            role_configuration=aps.CfnScraper.RoleConfigurationProperty(
                source_role_arn=self.source_role.role_arn, target_role_arn=self.target_role.role_arn
            ),
        )
        # The write grant must be in place before the collector first writes.
        self.scraper.node.add_dependency(self.target_role)

    def _chart(self, construct_id: str, addon: HelmAddon, values: Mapping[str, Any]) -> eks.HelmChart:
        chart = eks.HelmChart(
            self,
            construct_id,
            cluster=self._props.cluster,
            chart=addon.chart,
            repository=addon.repository,
            version=addon.version,
            namespace=addon.namespace,
            release=addon.release,
            values={**addon.values, **values},
            create_namespace=False,
        )
        chart.node.add_dependency(self.namespace)
        return chart

    def _write_roles(self, workspace: IPrometheusWorkspace) -> tuple[iam.Role, iam.Role]:
        """The roles of the collector's role configuration, as AMP documents them for same-account writes."""
        stack = Stack.of(self)
        # The collector's ARN holds an id AMP assigns, and the collector names these roles: the trust can name only
        # this account's collectors.
        scrapers = stack.format_arn(service="aps", resource="scraper", resource_name="*")
        source = iam.Role(
            self,
            "SourceRole",
            assumed_by=iam.ServicePrincipal(SCRAPER_PRINCIPAL).with_conditions(
                {
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": scrapers},
                }
            ),
            description="kiln: AMP's collector of this EKS cluster assumes this to reach its write role",
        )
        target = iam.Role(
            self,
            "TargetRole",
            assumed_by=iam.ArnPrincipal(source.role_arn).with_conditions({"StringLike": {"sts:ExternalId": scrapers}}),
            description="kiln: AMP's collector of this EKS cluster writes its metrics to one workspace",
        )
        workspace.grant_remote_write(target)
        iam.Grant.add_to_principal(grantee=source, actions=["sts:AssumeRole"], resource_arns=[target.role_arn])
        return source, target

    def _subnet_ids(self) -> list[str]:
        if self._props.subnet_ids:
            return list(self._props.subnet_ids)
        vpc = _cluster_vpc(self._props.cluster)
        subnets = [s.subnet_id for s in vpc.private_subnets] if vpc is not None else []
        require(
            self,
            len(subnets) >= 2,
            "subnet_ids",
            subnets,
            "at least two subnets in two availability zones: pass subnet_ids when the cluster's VPC is unknown or "
            "has fewer private subnets",
        )
        return subnets

    def _security_group_ids(self) -> list[str]:
        if self._props.security_group_ids:
            return list(self._props.security_group_ids)
        group = _cluster_security_group_id(self._props.cluster)
        if group is None:
            refuse(
                self,
                "security_group_ids",
                [],
                "the collector's security groups: pass them when the cluster's security group is unknown",
            )
        return [group]

    @property
    def scraper_arn(self) -> str:
        return self._scraper("scraper_arn").attr_arn

    @property
    def scraper_role_arn(self) -> str:
        """The service-linked role AMP's collector reaches the cluster with (its access entry's principal)."""
        return self._scraper("scraper_role_arn").attr_role_arn

    def _scraper(self, attribute: str) -> aps.CfnScraper:
        """Return the collector; raise PropError naming ATTRIBUTE when the props give no workspace."""
        if self.scraper is None:
            raise PropError(f"{self.node.path} has no collector (its props give no workspace), so no {attribute}")
        return self.scraper

    @property
    def configuration_yaml(self) -> str:
        """The scrape configuration as the collector receives it."""
        return yaml.safe_dump(self.scrape_config, sort_keys=False)


def _cluster_vpc(cluster: eks.ICluster) -> ec2.IVpc | None:
    """Return the cluster's VPC; None for an imported cluster given none (jsii raises RuntimeError then)."""
    try:
        return cluster.vpc
    except RuntimeError:
        return None


def _cluster_security_group_id(cluster: eks.ICluster) -> str | None:
    """Return the cluster security group's id; None for an imported cluster given none."""
    try:
        return cluster.cluster_security_group_id
    except RuntimeError:
        return None
