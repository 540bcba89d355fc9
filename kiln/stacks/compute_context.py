"""What every backend's spec -> props translation shares: the spec and the network and storage built for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2

from kiln.constructs import CapacityOption, IPrometheusWorkspace
from kiln.spec import ClusterSpec
from kiln.spec.models import ComputeGroup
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.network import NetworkStack, wants_placement_group
from kiln.stacks.storage import StorageStack

# Where every backend mounts the kiln file system on its nodes.
MOUNT_POINT = "/fsx"


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

    def client_groups(self) -> list[ec2.ISecurityGroup]:
        """Return the groups every node joins besides its own: the file system's client group, if any."""
        return [self.storage.lustre_clients] if self.storage.lustre_clients is not None else []

    def placement_group(self, group: ComputeGroup) -> ec2.IPlacementGroup | None:
        """Return the cluster placement group the network stack made for GROUP, if it gets one."""
        placement = self.network.placement_groups.get(group.name)
        return placement.placement_group if placement and wants_placement_group(group) else None

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
