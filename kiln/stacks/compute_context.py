"""What every backend's spec -> props translation shares: the spec, the network and storage built for it, and the
cluster placement groups its node groups launch into."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from kiln.catalog import instance_type
from kiln.catalog.capacity import CAPACITY
from kiln.constructs import CapacityOption, ClusterPlacementGroup, IPrometheusWorkspace
from kiln.constructs.ids import hashed_id
from kiln.spec import ClusterSpec
from kiln.spec.models import ComputeGroup
from kiln.stacks.ci_mode import CiEnvironment, own_tags
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack

# Where every backend mounts the kiln file system on its nodes.
MOUNT_POINT = "/fsx"


def wants_placement_group(group: ComputeGroup) -> bool:
    """Return whether GROUP gets a cluster placement group.

    Default: yes for EFA types, except when reserved capacity already places the nodes.
    """
    if group.placement_group is not None:
        return group.placement_group
    return instance_type(group.instance_type).efa_supported and not CAPACITY[group.capacity.type].reserved


def cluster_placement_groups(scope: Construct, spec: ClusterSpec) -> dict[str, ec2.IPlacementGroup]:
    """Make in SCOPE (the compute stack) the cluster placement group of each group of SPEC that gets one, on the
    backends whose node groups take kiln's launch template (ParallelCluster makes its own, HyperPod takes none).

    They live beside the launch templates that name them: renaming or removing a group, or a change that gives it no
    placement group, is then a change within one stack. CloudFormation deletes a dropped one in the update's cleanup,
    after the node group that refers to it (which names it in DependsOn, kiln.stacks.compute) is replaced or deleted.
    """
    if not spec.platform.kiln_launch_template:
        return {}
    return {
        group.name: ClusterPlacementGroup(scope, hashed_id("Placement", group.name)).placement_group
        for group in spec.compute.groups
        if wants_placement_group(group)
    }


@dataclass(frozen=True)
class ComputeContext:
    """The spec plus the stacks a compute backend builds on, and the short-lived environment it is, if one."""

    spec: ClusterSpec
    network: NetworkStack
    storage: StorageStack
    ci: CiEnvironment | None = None
    # The AMI nodes boot: the newest baked image, else the spec's ami_id; None: the backend's default image.
    image_id: str | None = None
    # The Prometheus workspace the nodes' agent remote-writes to (observability.prometheus on a Slurm backend).
    agent_workspace: IPrometheusWorkspace | None = None
    # The cluster placement group of each spec group that gets one, by group name (cluster_placement_groups).
    placement_groups: Mapping[str, ec2.IPlacementGroup] = field(default_factory=dict)

    def cluster_env(self, *, mounts_fsx: bool) -> dict[str, str]:
        """Return the deploy-time values nodes read from cluster.env (FSx only where the nodes mount it)."""
        values = {
            "KILN_CLUSTER_NAME": self.spec.name,
            "KILN_REGION": cdk.Aws.REGION,
            "KILN_BUCKET": self.storage.bucket.bucket_name,
        }
        lustre = self.storage.lustre
        if mounts_fsx and lustre is not None:
            values |= {
                "KILN_FSX_DNS": lustre.dns_name,
                "KILN_FSX_MOUNT_NAME": lustre.mount_name,
                "KILN_MOUNT_POINT": MOUNT_POINT,
            }
        if self.agent_workspace is not None:
            values["KILN_PROMETHEUS_REMOTE_WRITE_URL"] = self.agent_workspace.remote_write_url
        return values

    @property
    def node_tags(self) -> dict[str, str]:
        """Return the tags of every node's instance, volumes and network interfaces: the compute stack's resources'
        (kiln's own and the spec's), which no stack tag passes on to what a service launches."""
        return {**own_tags(self.spec, self.ci, "compute"), **self.spec.tags}

    def client_groups(self) -> list[ec2.ISecurityGroup]:
        """Return the groups every node joins besides its own: the file system's client group, if any."""
        return [self.storage.lustre_clients] if self.storage.lustre_clients is not None else []

    def placement_group(self, group: ComputeGroup) -> ec2.IPlacementGroup | None:
        """Return GROUP's cluster placement group, if it gets one."""
        return self.placement_groups.get(group.name)

    def node_group_fields(self, group: ComputeGroup) -> dict[str, Any]:
        """Return what a spec group says about a node group, in the PCS and EKS node-group props' terms."""
        return {
            "name": group.name,
            "instance_type": group.instance_type,
            "min_count": group.min_count,
            "max_count": group.max_count,
            "capacity": capacity_option(group),
            "root_volume_gib": group.root_volume_gib,
            "placement_group": self.placement_group(group),
        }


def capacity_option(group: ComputeGroup) -> CapacityOption:
    """Return GROUP's capacity as construct props."""
    return CapacityOption(type=group.capacity.type, reservation_id=group.capacity.reservation_id)
