"""EFA networking: a self-only security group and a cluster placement group."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from kiln.constructs.children import l1_of

# The rule CDK itself uses to mean "no egress": an ICMP type/code pair no packet carries.
NO_TRAFFIC_EGRESS = {
    "CidrIp": "255.255.255.255/32",
    "Description": "Disallow all traffic",
    "FromPort": 252,
    "IpProtocol": "icmp",
    "ToPort": 86,
}


@dataclass(frozen=True, kw_only=True)
class EfaSecurityGroupProps:
    """Props for EfaSecurityGroup.

    vpc: the VPC of the EFA nodes (and of an EFA-enabled file system).
    description: shown in the console; default 'EFA: all traffic to and from members of this group only'.
    """

    vpc: ec2.IVpc
    description: str = "EFA: all traffic to and from members of this group only"


class EfaSecurityGroup(Construct):
    """The security group EFA requires: all traffic in and out, to and from itself, nothing else."""

    def __init__(self, scope: Construct, construct_id: str, props: EfaSecurityGroupProps) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self, "Resource", vpc=props.vpc, description=props.description, allow_all_outbound=False
        )
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "EFA peers")
        self.security_group.add_egress_rule(self.security_group, ec2.Port.all_traffic(), "EFA peers")
        # A self-reference is a separate SecurityGroupEgress resource, and CDK then drops its inline
        # placeholder; a group without inline egress gets EC2's default allow-all egress. This inline rule
        # matches no traffic and replaces that default, so egress is to members only.
        group = l1_of(self.security_group, ec2.CfnSecurityGroup)
        group.add_property_override("SecurityGroupEgress", [NO_TRAFFIC_EGRESS])

    @property
    def security_group_id(self) -> str:
        return self.security_group.security_group_id

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections


@dataclass(frozen=True, kw_only=True)
class ClusterPlacementGroupProps:
    """Props for ClusterPlacementGroup.

    placement_group_name: a fixed name; default: CloudFormation generates one.
    """

    placement_group_name: str | None = None


class ClusterPlacementGroup(Construct):
    """A `cluster` placement group: EFA nodes packed close together in one AZ."""

    def __init__(self, scope: Construct, construct_id: str, props: ClusterPlacementGroupProps | None = None) -> None:
        super().__init__(scope, construct_id)
        props = props or ClusterPlacementGroupProps()
        self.placement_group = ec2.PlacementGroup(
            self,
            "Resource",
            strategy=ec2.PlacementGroupStrategy.CLUSTER,
            placement_group_name=props.placement_group_name,
        )

    @property
    def placement_group_name(self) -> str:
        return self.placement_group.placement_group_name
