"""EfaLaunchTemplate: one EFA interface per network card, IMDSv2, encrypted gp3 root, reserved capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import CfnTag, Fn
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from kiln.catalog import instance_type as catalog_instance_type
from kiln.catalog.capacity import CAPACITY, CAPACITY_TYPES, CapacityType, is_reservation_id
from kiln.catalog.interfaces import InterfaceLayout, efa_layout
from kiln.catalog.limits import (
    IMDS_HOP_LIMIT_MAX,
    IMDS_HOP_LIMIT_MIN,
    MAX_TAGS_PER_RESOURCE,
    ROOT_VOLUME_MAX_GIB,
    ROOT_VOLUME_MIN_GIB,
)
from kiln.catalog.platforms import root_device_names, service_fact
from kiln.constructs._checks import require, require_in, unresolved

SHELL_SCRIPT = 'text/x-shellscript; charset="utf-8"'
# An IMDSv2 token reaches the host's own network and no container behind a bridge (platforms.json,
# ec2.imds_host_hop_limit): nothing kiln runs needs more (PCS's agent, slurmd, enroot's containers share the host's
# network; EKS pods get their own identity), and a container should not take the node role.
IMDS_HOP_LIMIT: int = service_fact("ec2", "imds_host_hop_limit").value
# What a launch template's TagSpecifications tag at launch (platforms.json, ec2.launch_template_tag_resource_types):
# the instance, its volumes and its network interfaces. Every kiln template launches each (an encrypted root volume,
# one interface per network card): naming a type the launch does not create would fail it.
LAUNCH_TAG_RESOURCE_TYPES: tuple[str, ...] = tuple(service_fact("ec2", "launch_template_tag_resource_types").value)


def launch_tag_specifications(tags: Mapping[str, str]) -> list[ec2.CfnLaunchTemplate.TagSpecificationProperty] | None:
    """Return TAGS for the instance, the volumes and the network interfaces a launch creates (None without tags), in
    key order: the same tags give the same launch template data."""
    if not tags:
        return None
    listed = [CfnTag(key=key, value=value) for key, value in sorted(tags.items())]
    return [
        ec2.CfnLaunchTemplate.TagSpecificationProperty(resource_type=kind, tags=listed)
        for kind in LAUNCH_TAG_RESOURCE_TYPES
    ]


@dataclass(frozen=True, kw_only=True)
class CapacityOption:
    """How instances are bought: on-demand, spot, or into a capacity block or reservation (cr-...).

    type: on-demand (default), spot, capacity-block or reservation.
    reservation_id: the capacity block's or reservation's id (cr- and 17 hex digits), required for those two;
        default none (on-demand and spot take none).
    """

    type: CapacityType = "on-demand"
    reservation_id: str | None = None

    def __post_init__(self) -> None:
        require_in(self, "type", self.type, CAPACITY_TYPES)
        reserved = self.reserved
        if reserved and not unresolved(self.reservation_id):
            require(
                self,
                is_reservation_id(self.reservation_id),
                "reservation_id",
                self.reservation_id,
                f"cr- and 17 hex digits for {self.type}",
            )
        if not reserved:
            require(self, self.reservation_id is None, "reservation_id", self.reservation_id, f"unset for {self.type}")

    @property
    def reserved(self) -> bool:
        """Return True for a capacity block or reservation (a cr-... id that also places the nodes)."""
        return CAPACITY[self.type].reserved

    @property
    def purchase_option(self) -> str:
        """Return the type in AWS PCS PurchaseOption / ParallelCluster CapacityType words."""
        return CAPACITY[self.type].purchase_option


@dataclass(frozen=True, kw_only=True)
class EfaLaunchTemplateProps:
    """Props for EfaLaunchTemplate.

    instance_type: the EC2 type; its network cards and EFA limits come from kiln's catalog.
    efa_security_group: joins every interface (EFA traffic must stay inside it).
    root_device_name: the device the image boots from, which the root volume is mapped to: the AMI's RootDeviceName
        (aws ec2 describe-images), or kiln.catalog.platforms.root_device_name(os) for an AMI named only at deploy
        (/dev/xvda for Amazon Linux 2023, /dev/sda1 for Ubuntu). Any other name leaves the root at the image's size and
        adds a second, unformatted volume.
    security_groups: further groups for the primary interface only (cluster, egress, file systems); default
        none: the primary interface joins the EFA group alone.
    root_volume_gib: size of the encrypted gp3 root volume, 40-16384 (kiln.catalog.limits); default 200.
    capacity: on-demand (default), spot, capacity-block or reservation.
    user_data_parts: shell scripts, each one part of the MIME multi-part user data, in order; default none (no user
        data).
    image_id: the AMI; default none (PCS and EKS name it on the node group).
    placement_group: a cluster placement group (ec2.IPlacementGroup); default none: EC2 places the instances
        where it has capacity.
    hop_limit: IMDSv2 hop limit; default 1 (IMDS_HOP_LIMIT): the host's processes only, no bridged container.
    tags: the tags of every instance, volume and network interface launched from it (the spec's and kiln:cluster,
        say), at most 50 (EC2's per resource); default none: what it launches carries only the tags its
        launcher adds. A change is a new template version.
    """

    instance_type: str
    efa_security_group: ec2.ISecurityGroup
    root_device_name: str
    security_groups: Sequence[ec2.ISecurityGroup] = ()
    root_volume_gib: int = 200
    capacity: CapacityOption = field(default_factory=CapacityOption)
    user_data_parts: Sequence[str] = ()
    image_id: str | None = None
    placement_group: ec2.IPlacementGroup | None = None
    hop_limit: int = IMDS_HOP_LIMIT
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        catalog_instance_type(self.instance_type)
        require(
            self, len(self.tags) <= MAX_TAGS_PER_RESOURCE, "tags", len(self.tags), f"at most {MAX_TAGS_PER_RESOURCE}"
        )
        require(
            self,
            ROOT_VOLUME_MIN_GIB <= self.root_volume_gib <= ROOT_VOLUME_MAX_GIB,
            "root_volume_gib",
            self.root_volume_gib,
            f"{ROOT_VOLUME_MIN_GIB} to {ROOT_VOLUME_MAX_GIB}",
        )
        require(
            self,
            IMDS_HOP_LIMIT_MIN <= self.hop_limit <= IMDS_HOP_LIMIT_MAX,
            "hop_limit",
            self.hop_limit,
            f"{IMDS_HOP_LIMIT_MIN} to {IMDS_HOP_LIMIT_MAX}",
        )
        require_in(self, "root_device_name", self.root_device_name, sorted(set(root_device_names().values())))


class EfaLaunchTemplate(Construct):
    """A launch template that gives a node every EFA its instance type can carry."""

    def __init__(self, scope: Construct, construct_id: str, props: EfaLaunchTemplateProps) -> None:
        super().__init__(scope, construct_id)
        self._props = props
        self.layout = efa_layout(props.instance_type)
        self.user_data = ec2.MultipartUserData()
        for script in props.user_data_parts:
            self.user_data.add_part(ec2.MultipartBody.from_raw_body(content_type=SHELL_SCRIPT, body=script))
        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=props.instance_type,
            image_id=props.image_id,
            network_interfaces=[self._interface(i) for i in self.layout],
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=props.hop_limit
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name=props.root_device_name,
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=props.root_volume_gib, volume_type="gp3", encrypted=True, delete_on_termination=True
                    ),
                )
            ],
            instance_market_options=self._market(props.capacity),
            capacity_reservation_specification=self._reservation(props.capacity),
            placement=ec2.CfnLaunchTemplate.PlacementProperty(group_name=props.placement_group.placement_group_name)
            if props.placement_group
            else None,
            user_data=Fn.base64(self.user_data.render()) if props.user_data_parts else None,
            tag_specifications=launch_tag_specifications(props.tags),
        )
        self.launch_template = ec2.CfnLaunchTemplate(self, "Resource", launch_template_data=data)

    def _interface(self, layout: InterfaceLayout) -> ec2.CfnLaunchTemplate.NetworkInterfaceProperty:
        groups = [self._props.efa_security_group]
        if layout.network_card_index == 0:
            groups += list(self._props.security_groups)
        return ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=layout.network_card_index,
            device_index=layout.device_index,
            interface_type=layout.interface_type,
            groups=[g.security_group_id for g in groups],
            delete_on_termination=True,
        )

    @staticmethod
    def _market(capacity: CapacityOption) -> ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty | None:
        if capacity.type == "spot":
            return ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="spot")
        if capacity.type == "capacity-block":
            return ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
        return None

    @staticmethod
    def _reservation(capacity: CapacityOption) -> ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty | None:
        if capacity.reservation_id is None:
            return None
        return ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
            capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                capacity_reservation_id=capacity.reservation_id
            )
        )

    @property
    def launch_template_id(self) -> str:
        return self.launch_template.ref

    @property
    def latest_version(self) -> str:
        return self.launch_template.attr_latest_version_number

    @property
    def default_version(self) -> str:
        return self.launch_template.attr_default_version_number
