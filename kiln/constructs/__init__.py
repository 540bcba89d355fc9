"""kiln's reusable construct library: typed props, no spec inside."""

from kiln.constructs.bootstrap_assets import BootstrapAssets, BootstrapAssetsProps
from kiln.constructs.bucket import DataBucket, DataBucketProps
from kiln.constructs.ci_identity import GithubDeployIdentity, GithubDeployIdentityProps
from kiln.constructs.efa import (
    ClusterPlacementGroup,
    ClusterPlacementGroupProps,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
)
from kiln.constructs.eks import EksTrainingCluster
from kiln.constructs.eks_code_server import CodeServerPod
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup, SystemNodeGroup
from kiln.constructs.eks_props import EksTrainingClusterProps, LustreVolume
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from kiln.constructs.launch_template import CapacityOption, EfaLaunchTemplate, EfaLaunchTemplateProps
from kiln.constructs.lustre import (
    DataRepositoryLink,
    ILustreFileSystem,
    ImportedLustreFileSystem,
    LustreFileSystem,
    LustreFileSystemAttributes,
    LustreFileSystemProps,
)
from kiln.constructs.network import ExistingNetwork, TrainingVpc, TrainingVpcProps
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.parallelcluster import ParallelCluster, ParallelClusterProps, SlurmQueue, attachable_policy
from kiln.constructs.pcs import PcsCluster, PcsClusterProps, PcsNodeGroup
from kiln.constructs.training_image import TrainingImage, TrainingImageProps

# Metrics: Amazon Managed Service for Prometheus and the exporters that feed it on EKS.
from kiln.constructs.prometheus import (  # isort: skip
    ImportedPrometheusWorkspace,
    IPrometheusWorkspace,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
)
from kiln.constructs.eks_observability import EksObservability, EksObservabilityProps  # isort: skip

# Dashboards: Amazon Managed Grafana with kiln's dashboards on it.
from kiln.constructs.grafana import GrafanaWorkspace, GrafanaWorkspaceProps  # isort: skip

__all__ = [
    "AcceleratedNodeGroup",
    "BootstrapAssets",
    "BootstrapAssetsProps",
    "CapacityOption",
    "ClusterPlacementGroup",
    "ClusterPlacementGroupProps",
    "CodeServerPod",
    "DataBucket",
    "DataBucketProps",
    "DataRepositoryLink",
    "EfaLaunchTemplate",
    "EfaLaunchTemplateProps",
    "EfaSecurityGroup",
    "EfaSecurityGroupProps",
    "EksTrainingCluster",
    "EksTrainingClusterProps",
    "ExistingNetwork",
    "GithubDeployIdentity",
    "GithubDeployIdentityProps",
    "HyperPodCluster",
    "HyperPodClusterProps",
    "HyperPodInstanceGroup",
    "ILustreFileSystem",
    "ImportedLustreFileSystem",
    "LustreFileSystem",
    "LustreFileSystemAttributes",
    "LustreFileSystemProps",
    "LustreVolume",
    "NodeBootstrap",
    "ParallelCluster",
    "ParallelClusterProps",
    "attachable_policy",
    "PcsCluster",
    "PcsClusterProps",
    "PcsNodeGroup",
    "SlurmQueue",
    "SystemNodeGroup",
    "TrainingImage",
    "TrainingImageProps",
    "TrainingVpc",
    "TrainingVpcProps",
    # Metrics.
    "EksObservability",
    "EksObservabilityProps",
    "IPrometheusWorkspace",
    "ImportedPrometheusWorkspace",
    "PrometheusWorkspace",
    "PrometheusWorkspaceProps",
    # Dashboards.
    "GrafanaWorkspace",
    "GrafanaWorkspaceProps",
]
