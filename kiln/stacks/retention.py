"""What outlives `cdk destroy`: decided here once, for every stack of a cluster.

Data is kept unless the spec says storage.bucket.retain: false (a short-lived environment keeps it only when its
spec sets retain itself, kiln.stacks.ci_mode): the data bucket with its access-log bucket and their policies, and the
metrics workspace with its keys and logs. A PERSISTENT_2 file system kiln creates is kept with the data (a scratch
one holds no durable copy), and so is everything it needs to keep working, or whose deletion it would block:

- its own security group, the group its clients join, every rule between them, and its link to S3 (storage stack);
- the VPC kiln made and the subnet holding its interfaces (network stack), and the EFA group when it joins that.

What is only a bill (NAT gateway, Elastic IP) and what nothing kept needs (other subnets, routes, endpoints, the
flow log itself) goes with its stack. A file system or bucket the spec attaches (file_system_id, existing) is
never the stacks' to keep or delete. tests/stacks/test_retention_and_placement.py walks the templates: nothing kept
needs anything deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.spec import ClusterSpec


@dataclass(frozen=True)
class Retention:
    """What a cluster's stacks keep when they are deleted."""

    data: bool  # the data bucket (when kiln creates it) and the metrics workspace, with their keys and logs
    file_system: bool  # kiln's Lustre file system, its security groups, their rules and its link to S3
    efa_group: bool  # the EFA security group, which the kept file system's interfaces carry

    @property
    def network(self) -> bool:
        """Whether the VPC kiln made and its compute subnet stay: the kept file system's interfaces are there."""
        return self.file_system


def retention(spec: ClusterSpec) -> Retention:
    """Return what SPEC's stacks keep (SPEC as it is deployed: a short-lived environment's, for one)."""
    data = spec.storage.bucket.retain
    fs = spec.storage.lustre
    file_system = data and fs is not None and not fs.attached and fs.deployment == "PERSISTENT_2"
    return Retention(data=data, file_system=file_system, efa_group=file_system and fs.efa)
