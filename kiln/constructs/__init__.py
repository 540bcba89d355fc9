"""kiln's reusable construct library: typed props, no spec inside."""

from kiln.constructs.bucket import DataBucket, DataBucketProps
from kiln.constructs.efa import (
    ClusterPlacementGroup,
    ClusterPlacementGroupProps,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
)
from kiln.constructs.eks import EksTrainingCluster, EksTrainingClusterProps, GpuNodeGroup, LustreVolume, SystemNodeGroup
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from kiln.constructs.launch_template import CapacityOption, EfaLaunchTemplate, EfaLaunchTemplateProps
from kiln.constructs.lustre import DataRepositoryLink, LustreFileSystem, LustreFileSystemProps
from kiln.constructs.network import ExistingNetwork, TrainingVpc, TrainingVpcProps

__all__ = [
    "EksTrainingCluster",
    "EksTrainingClusterProps",
    "GpuNodeGroup",
    "HyperPodCluster",
    "HyperPodClusterProps",
    "HyperPodInstanceGroup",
    "LustreVolume",
    "SystemNodeGroup",
    "CapacityOption",
    "EfaLaunchTemplate",
    "EfaLaunchTemplateProps",
    "ClusterPlacementGroup",
    "ClusterPlacementGroupProps",
    "DataBucket",
    "DataBucketProps",
    "DataRepositoryLink",
    "EfaSecurityGroup",
    "EfaSecurityGroupProps",
    "ExistingNetwork",
    "LustreFileSystem",
    "LustreFileSystemProps",
    "TrainingVpc",
    "TrainingVpcProps",
]
