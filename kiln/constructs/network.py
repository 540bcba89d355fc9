"""TrainingVpc: a new or imported VPC with one private subnet that holds compute, FSx and EFA."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from kiln.catalog.limits import PRIVATE_SUBNET_EXTRA_BITS, PUBLIC_SUBNET_EXTRA_BITS, VPC_PREFIX_MAX, VPC_PREFIX_MIN
from kiln.constructs._checks import require, unresolved
from kiln.constructs.keys import logs_key


@dataclass(frozen=True, kw_only=True)
class ExistingNetwork:
    """An existing VPC and the private subnet kiln puts the cluster in."""

    vpc_id: str
    private_subnet_id: str
    availability_zone: str
    # The VPC's CIDR, where something must admit the whole VPC (ParallelCluster's SSH rule); None: unknown.
    cidr: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingVpcProps:
    """Props for TrainingVpc.

    cidr: CIDR of a new VPC (ignored with `existing`); default 10.0.0.0/16.
    availability_zone: the AZ of compute, FSx and the placement group; default: the region's first AZ.
    existing: import this VPC and subnet instead of creating a VPC.
    flow_log_retention: how long VPC flow logs are kept; default one year.
    retain_flow_logs: keep the flow log group when the stack is deleted; default True (False for short-lived
        environments, whose logs go with them).
    """

    cidr: str = "10.0.0.0/16"
    availability_zone: str | None = None
    existing: ExistingNetwork | None = None
    flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR
    retain_flow_logs: bool = True

    def __post_init__(self) -> None:
        if self.existing is None and not unresolved(self.cidr):
            try:
                network = ipaddress.IPv4Network(self.cidr)
            except ValueError:
                network = None
            require(
                network is not None and VPC_PREFIX_MIN <= network.prefixlen <= VPC_PREFIX_MAX,
                "cidr",
                self.cidr,
                f"an IPv4 CIDR from /{VPC_PREFIX_MIN} to /{VPC_PREFIX_MAX}",
            )


def _second_az(first: str) -> str:
    """Return another AZ of the same region: EKS and NAT placement want two."""
    return first[:-1] + ("b" if first.endswith("a") else "a")


class TrainingVpc(Construct):
    """A VPC for training: public and private subnets in two AZs, one NAT, S3 endpoint, KMS-encrypted flow logs."""

    def __init__(self, scope: Construct, construct_id: str, props: TrainingVpcProps | None = None) -> None:
        super().__init__(scope, construct_id)
        props = props or TrainingVpcProps()
        # The key of the flow logs of a VPC kiln creates (an existing VPC keeps its own logging).
        self.flow_log_key: kms.Key | None = None
        if props.existing:
            self.vpc = self._import(props.existing)
            self.compute_subnet = ec2.Subnet.from_subnet_attributes(
                self,
                "ComputeSubnet",
                subnet_id=props.existing.private_subnet_id,
                availability_zone=props.existing.availability_zone,
            )
            self.availability_zone = props.existing.availability_zone
            return
        self.vpc = self._create(props)
        self.compute_subnet = self.vpc.private_subnets[0]
        self.availability_zone = self.compute_subnet.availability_zone

    def _import(self, existing: ExistingNetwork) -> ec2.IVpc:
        return ec2.Vpc.from_vpc_attributes(
            self,
            "Resource",
            vpc_id=existing.vpc_id,
            vpc_cidr_block=existing.cidr,
            availability_zones=[existing.availability_zone],
            private_subnet_ids=[existing.private_subnet_id],
        )

    def _create(self, props: TrainingVpcProps) -> ec2.Vpc:
        prefix = ipaddress.IPv4Network(props.cidr).prefixlen
        zones = (
            {"availability_zones": [props.availability_zone, _second_az(props.availability_zone)]}
            if props.availability_zone
            else {"max_azs": 2}
        )
        vpc = ec2.Vpc(
            self,
            "Resource",
            ip_addresses=ec2.IpAddresses.cidr(props.cidr),
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=prefix + PUBLIC_SUBNET_EXTRA_BITS,
                    map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=prefix + PRIVATE_SUBNET_EXTRA_BITS,
                ),
            ],
            restrict_default_security_group=True,
            **zones,
        )
        vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
        # Flow logs record who talked to whom in the cluster: encrypted with the cluster's own key, kept as long.
        self.flow_log_key = logs_key(
            self, "FlowLogsKey", description="kiln: encrypts the VPC flow logs", retain=props.retain_flow_logs
        )
        log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=props.flow_log_retention,
            encryption_key=self.flow_log_key,
            removal_policy=RemovalPolicy.RETAIN if props.retain_flow_logs else RemovalPolicy.DESTROY,
        )
        self._mark_deliberate_az_choice(vpc)
        vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        return vpc

    @staticmethod
    def _mark_deliberate_az_choice(vpc: ec2.Vpc) -> None:
        # EFA, FSx and reserved capacity pin one named AZ on purpose; tell cfn-lint (W3010).
        for subnet in vpc.public_subnets + vpc.private_subnets:
            subnet.node.default_child.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
