"""TrainingVpc: a new or imported VPC with one private subnet that holds compute, FSx and EFA."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import CfnResource, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from kiln.catalog.limits import PRIVATE_SUBNET_EXTRA_BITS, PUBLIC_SUBNET_EXTRA_BITS, VPC_PREFIX_MAX, VPC_PREFIX_MIN
from kiln.constructs._checks import require, require_in, unresolved
from kiln.constructs.children import l1_of
from kiln.constructs.keys import logs_key


@dataclass(frozen=True, kw_only=True)
class ExistingNetwork:
    """An existing VPC and the private subnet kiln puts the cluster in.

    vpc_id: the VPC's id.
    private_subnet_id: the private subnet of compute, FSx and the placement group.
    availability_zone: that subnet's AZ.
    cidr: the VPC's CIDR, where something must admit the whole VPC (ParallelCluster's SSH rule); default none:
        unknown.
    kept: the VPC and subnet are the ones a TrainingVpc of `retain_for_data` kept when its stack was deleted (made
        from CIDR, which it then needs): build again what the deletion removed, the public subnet where the VPC had
        it (CIDR's first public-sized block), an internet gateway, a NAT gateway with its Elastic IP, the compute
        subnet's route table with its default route to the NAT, the S3 gateway endpoint and the flow log. Default
        False: the VPC is someone else's, and kiln adds nothing to it.
    """

    vpc_id: str
    private_subnet_id: str
    availability_zone: str
    cidr: str | None = None
    kept: bool = False

    def __post_init__(self) -> None:
        require(self, not self.kept or self.cidr is not None, "cidr", self.cidr, "the kept VPC's CIDR, with kept")


@dataclass(frozen=True, kw_only=True)
class TrainingVpcProps:
    """Props for TrainingVpc.

    cidr: CIDR of a new VPC (ignored with `existing`); default 10.0.0.0/16.
    availability_zone: the AZ of compute, FSx and the placement group; default: the region's first AZ (and then the
        VPC spans the region's first `zone_count`).
    zone_count: without availability_zone, how many of the region's AZs the VPC spans; default 2 (an EKS control
        plane needs two), 1 for a cluster whose every part lies in the compute subnet's AZ.
    second_availability_zone: with availability_zone, a second AZ the VPC's public and private subnets span too (EKS's
        control plane needs two); default none: the VPC lies in availability_zone alone. Never guessed: the caller
        names it.
    interface_endpoints: endpoint services (platforms.json services.vpc_endpoints names: ssm, ecr.api, ...) that
        get an interface endpoint in the compute subnet, admitting HTTPS from the VPC's CIDR alone; default
        none: the nodes reach those services at their public endpoints.
    gateway_endpoints: gateway endpoint services besides S3, which every new VPC gets (dynamodb); default none:
        S3's alone.
    existing: import this VPC and subnet instead of creating a VPC; default none (a new VPC).
    flow_log_retention: how long VPC flow logs are kept; default one year.
    retain_flow_logs: keep the flow log group when the stack is deleted; default True (False for short-lived
        environments, whose logs go with them).
    retain_for_data: keep the new VPC and its compute subnet when the stack is deleted, because a kept file system's
        interfaces stay in that subnet (deleting either would fail the stack's deletion); default False. The rest
        (NAT gateway, Elastic IP, other subnets, routes, endpoints, the flow log) is deleted as ever.
    """

    cidr: str = "10.0.0.0/16"
    availability_zone: str | None = None
    zone_count: int = 2
    second_availability_zone: str | None = None
    interface_endpoints: Sequence[str] = ()
    gateway_endpoints: Sequence[str] = ()
    existing: ExistingNetwork | None = None
    flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR
    retain_flow_logs: bool = True
    retain_for_data: bool = False

    def __post_init__(self) -> None:
        if self.existing is None and not unresolved(self.cidr):
            try:
                network = ipaddress.IPv4Network(self.cidr)
            except ValueError:
                network = None
            require(
                self,
                network is not None and VPC_PREFIX_MIN <= network.prefixlen <= VPC_PREFIX_MAX,
                "cidr",
                self.cidr,
                f"an IPv4 CIDR from /{VPC_PREFIX_MIN} to /{VPC_PREFIX_MAX}",
            )
        second = self.second_availability_zone
        if second is not None:
            zone = "second_availability_zone"
            require(self, self.availability_zone is not None, zone, second, "set together with availability_zone")
            require(self, second != self.availability_zone, zone, second, f"an AZ other than {self.availability_zone}")
        require(self, self.zone_count in (1, 2), "zone_count", self.zone_count, "1 or 2")
        for name in self.gateway_endpoints:
            require_in(self, "gateway_endpoints", name, GATEWAY_SERVICES)
        require(
            self,
            self.existing is None or not (self.interface_endpoints or self.gateway_endpoints),
            "interface_endpoints",
            list(self.interface_endpoints),
            "none with `existing` (kiln adds no endpoint to a VPC it does not own)",
        )


# Gateway endpoint services a new VPC may get besides S3 (CDK's names for them).
GATEWAY_SERVICES = {"dynamodb": ec2.GatewayVpcEndpointAwsService.DYNAMODB}
HTTPS = 443


def endpoint_id(service: str) -> str:
    """Return the construct id of SERVICE's endpoint: ecr.api -> EndpointEcrApi."""
    return "Endpoint" + "".join(part.capitalize() for part in re.split(r"[.-]", service))


class TrainingVpc(Construct):
    """A VPC for training: public and private subnets in one AZ or two, one NAT, an S3 gateway endpoint (and the
    interface endpoints the props name), KMS-encrypted flow logs."""

    def __init__(self, scope: Construct, construct_id: str, props: TrainingVpcProps | None = None) -> None:
        super().__init__(scope, construct_id)
        props = props or TrainingVpcProps()
        # The key of the flow logs of a VPC kiln creates or rebuilds (an existing VPC keeps its own logging).
        self.flow_log_key: kms.Key | None = None
        # The group of the interface endpoints' network interfaces (None without interface endpoints).
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if props.existing:
            existing = props.existing
            # A kept VPC's compute subnet gets a route table of its own again (its old one went with the stack).
            table = ec2.CfnRouteTable(self, "ComputeRouteTable", vpc_id=existing.vpc_id) if existing.kept else None
            route_table_id = table.ref if table is not None else None
            self.vpc = self._import(existing, route_table_id)
            self.compute_subnet = ec2.Subnet.from_subnet_attributes(
                self,
                "ComputeSubnet",
                subnet_id=existing.private_subnet_id,
                availability_zone=existing.availability_zone,
                route_table_id=route_table_id,
            )
            self.availability_zone = existing.availability_zone
            if table is not None:
                self._rebuild_kept(existing, table, props)
            return
        self.vpc = self._create(props)
        self.compute_subnet = self.vpc.private_subnets[0]
        self.availability_zone = self.compute_subnet.availability_zone
        if props.retain_for_data:
            for kept in (self.vpc, self.compute_subnet):
                l1_of(kept, CfnResource).apply_removal_policy(RemovalPolicy.RETAIN)

    def _import(self, existing: ExistingNetwork, route_table_id: str | None) -> ec2.IVpc:
        return ec2.Vpc.from_vpc_attributes(
            self,
            "Resource",
            vpc_id=existing.vpc_id,
            vpc_cidr_block=existing.cidr,
            availability_zones=[existing.availability_zone],
            private_subnet_ids=[existing.private_subnet_id],
            private_subnet_route_table_ids=[route_table_id] if route_table_id else None,
        )

    def _rebuild_kept(self, existing: ExistingNetwork, table: ec2.CfnRouteTable, props: TrainingVpcProps) -> None:
        """Build in the kept VPC what its stack's deletion removed, as _create made it: the public subnet in the
        compute AZ holding the NAT gateway behind an internet gateway, the compute subnet's default route to the NAT,
        the S3 gateway endpoint on its table and the flow log."""
        network = ipaddress.IPv4Network(existing.cidr)
        # Where the VPC had its public subnet: CDK gives the first subnet configuration the VPC's first block.
        public_cidr = next(network.subnets(new_prefix=network.prefixlen + PUBLIC_SUBNET_EXTRA_BITS))
        gateway = ec2.CfnInternetGateway(self, "InternetGateway")
        attachment = ec2.CfnVPCGatewayAttachment(
            self, "InternetGatewayAttachment", vpc_id=existing.vpc_id, internet_gateway_id=gateway.ref
        )
        public = ec2.PublicSubnet(
            self,
            "PublicSubnet",
            vpc_id=existing.vpc_id,
            availability_zone=existing.availability_zone,
            cidr_block=str(public_cidr),
            map_public_ip_on_launch=False,
        )
        public.add_default_internet_route(gateway.ref, attachment)
        nat = public.add_nat_gateway()
        ec2.CfnSubnetRouteTableAssociation(
            self, "ComputeRouteTableAssociation", subnet_id=existing.private_subnet_id, route_table_id=table.ref
        )
        ec2.CfnRoute(
            self,
            "ComputeDefaultRoute",
            route_table_id=table.ref,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.ref,
        )
        ec2.GatewayVpcEndpoint(
            self,
            "S3Endpoint",
            vpc=self.vpc,
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[self.compute_subnet])],
        )
        l1_of(public, ec2.CfnSubnet).add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
        ec2.FlowLog(
            self,
            "FlowLog",
            resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self._flow_log_group(props)),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

    def _flow_log_group(self, props: TrainingVpcProps) -> logs.LogGroup:
        """Return the flow logs' group: encrypted with the cluster's own key, kept as long."""
        self.flow_log_key = logs_key(
            self, "FlowLogsKey", description="kiln: encrypts the VPC flow logs", retain=props.retain_flow_logs
        )
        return logs.LogGroup(
            self,
            "FlowLogs",
            retention=props.flow_log_retention,
            encryption_key=self.flow_log_key,
            removal_policy=RemovalPolicy.RETAIN if props.retain_flow_logs else RemovalPolicy.DESTROY,
        )

    def _create(self, props: TrainingVpcProps) -> ec2.Vpc:
        prefix = ipaddress.IPv4Network(props.cidr).prefixlen
        # The named zones, or else how many of the region's the VPC spans (CDK takes one or the other).
        named: list[str] = []
        if props.availability_zone:
            named = [zone for zone in (props.availability_zone, props.second_availability_zone) if zone]
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
            availability_zones=named or None,
            max_azs=None if named else props.zone_count,
        )
        vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
        self._add_endpoints(vpc, props)
        # Flow logs record who talked to whom in the cluster.
        log_group = self._flow_log_group(props)
        self._mark_deliberate_az_choice(vpc)
        vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        return vpc

    def _add_endpoints(self, vpc: ec2.Vpc, props: TrainingVpcProps) -> None:
        """Give VPC the gateway endpoints PROPS names, and its interface endpoints in the compute subnet behind one
        group that admits HTTPS from the VPC's own addresses and nothing else."""
        for name in props.gateway_endpoints:
            vpc.add_gateway_endpoint(endpoint_id(name), service=GATEWAY_SERVICES[name])
        if not props.interface_endpoints:
            return
        group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=vpc,
            description="kiln: interface VPC endpoints, HTTPS from this VPC only",
            allow_all_outbound=False,
        )
        # The CIDR as given (the VPC's own), a literal in the template that reviewers and cdk-nag can read.
        group.add_ingress_rule(ec2.Peer.ipv4(props.cidr), ec2.Port.tcp(HTTPS), "HTTPS from this VPC")
        self.endpoint_security_group = group
        compute = ec2.SubnetSelection(subnets=[vpc.private_subnets[0]])
        for name in dict.fromkeys(props.interface_endpoints):
            vpc.add_interface_endpoint(
                endpoint_id(name),
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=compute,
                security_groups=[group],
                private_dns_enabled=True,
                # The group above admits the VPC; CDK's `open` would add a second rule of its own.
                open=False,
            )

    @staticmethod
    def _mark_deliberate_az_choice(vpc: ec2.Vpc) -> None:
        # EFA, FSx and reserved capacity pin one named AZ on purpose; tell cfn-lint (W3010).
        for subnet in vpc.public_subnets + vpc.private_subnets:
            l1_of(subnet, ec2.CfnSubnet).add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
