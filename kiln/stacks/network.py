"""NetworkStack: VPC, EFA security group and cluster placement groups, from the spec."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.catalog import instance_type
from kiln.catalog.capacity import CAPACITY
from kiln.catalog.network import eks_control_plane_zones, node_endpoints, second_zone, zone_in_region
from kiln.constructs import (
    ClusterPlacementGroup,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    ExistingNetwork,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.ids import hashed_id
from kiln.constructs.retention import retain_all
from kiln.contracts.backends import HYPERPOD_EKS
from kiln.spec import ClusterSpec, SpecError
from kiln.spec.models import ComputeGroup
from kiln.spec.problems import Problem
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.retention import retention


def wants_placement_group(group: ComputeGroup) -> bool:
    """Return whether GROUP gets a cluster placement group.

    Default: yes for EFA types, except when reserved capacity already places the nodes.
    """
    if group.placement_group is not None:
        return group.placement_group
    return instance_type(group.instance_type).efa_supported and not CAPACITY[group.capacity.type].reserved


def needs_two_zones(spec: ClusterSpec) -> bool:
    """Return True when something of the cluster needs subnets in two AZs: an EKS control plane (the EKS backend, or
    HyperPod orchestrated by EKS, with the managed collector that needs two as well). Nothing else kiln builds uses
    the second AZ's subnets: compute, FSx, HyperPod's and PCS's interfaces and the image builds take the compute
    subnet, and the NAT gateway lies in the first AZ's public subnet."""
    return spec.platform.uses_kubernetes


def wants_zone_lookup(spec: ClusterSpec) -> bool:
    """Return True when the second AZ comes from the account's AZ list: a new VPC pinned to availability_zone whose
    spec names no second."""
    net = spec.network
    return net.vpc_id is None and spec.availability_zone is not None and net.second_availability_zone is None


def account_zones(stack: cdk.Stack) -> list[str] | None:
    """Return the region's AZs by CDK's availability-zones context lookup, or None when STACK's account or region is
    unknown at synth (env-agnostic: no lookup can run).

    Before the CDK CLI has run the lookup, CDK answers with placeholders (and records the lookup as missing, so the
    CLI runs it and synthesizes again with the account's answer).
    """
    if cdk.Token.is_unresolved(stack.account) or cdk.Token.is_unresolved(stack.region):
        return None
    return list(stack.availability_zones)


def second_availability_zone(spec: ClusterSpec, zones: Sequence[str] | None) -> str | None:
    """Return the new VPC's second AZ: the spec's, else the first other AZ of the account's list ZONES (None: no
    lookup possible); None for a VPC in one AZ, which only a cluster without an EKS control plane may have.

    Raises SpecError (one line) when the cluster needs two AZs and neither the spec nor the account names a second.
    """
    first, net = spec.availability_zone, spec.network
    if first is None or net.vpc_id is not None:
        return None
    if net.second_availability_zone is not None:
        return net.second_availability_zone
    region = first[:-1]
    if zones is not None:
        chosen = second_zone(first, zones)
        if chosen is not None:
            return chosen
        if not any(zone_in_region(zone, region) for zone in zones):
            # CDK's placeholders: the CLI replaces them with the account's answer before anything deploys.
            return next(zone for zone in zones if zone != first)
    if not needs_two_zones(spec):
        return None
    where = "HyperPod orchestrated by EKS" if spec.platform is HYPERPOD_EKS else "eks"
    why = (
        f"the account lists no AZ of {region} besides {first}"
        if zones is not None
        else "kiln cannot look up the account's AZs (synthesized without an account)"
    )
    message = (
        f"is required on {where}, whose control plane needs subnets in {eks_control_plane_zones()} AZs, when {why}: "
        f"set it to another AZ of {region} than {first} (`aws ec2 describe-availability-zones --region {region}` "
        "lists them; `kiln preflight` checks it), or deploy with credentials so that CDK looks the AZs up"
    )
    raise SpecError(spec.name, [Problem(path=("network", "second_availability_zone"), message=message)])


def endpoint_names(spec: ClusterSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return the interface and the gateway endpoints (S3's aside) network.interface_endpoints gives the new VPC."""
    if not spec.network.interface_endpoints or spec.network.vpc_id is not None:
        return (), ()
    prometheus = spec.observability is not None and spec.observability.prometheus
    wanted = node_endpoints(spec.platform.name, prometheus_agent=prometheus and spec.platform.runs_slurm)
    interface = tuple(e.name for e in wanted if not e.gateway)
    gateway = tuple(e.name for e in wanted if e.gateway)
    return interface, gateway


def vpc_props(
    spec: ClusterSpec, *, retain_flow_logs: bool = True, zones: Sequence[str] | None = None
) -> TrainingVpcProps:
    """Translate the spec's network section into TrainingVpc props; ZONES: the account's AZs (account_zones), when
    CDK can look them up."""
    net = spec.network
    if net.vpc_id:
        existing = ExistingNetwork(
            vpc_id=net.vpc_id,
            private_subnet_id=net.private_subnet_id,
            availability_zone=spec.availability_zone,
            cidr=net.vpc_cidr if "vpc_cidr" in net.model_fields_set else None,
        )
        return TrainingVpcProps(existing=existing)
    interface, gateway = endpoint_names(spec)
    return TrainingVpcProps(
        cidr=net.vpc_cidr,
        availability_zone=spec.availability_zone,
        second_availability_zone=second_availability_zone(spec, zones),
        interface_endpoints=interface,
        gateway_endpoints=gateway,
        retain_flow_logs=retain_flow_logs,
        retain_for_data=retention(spec).network,
    )


class NetworkStack(cdk.Stack):
    """Where the cluster lives: one subnet/AZ for compute, FSx and EFA."""

    def __init__(
        self, scope: Construct, construct_id: str, *, spec: ClusterSpec, ci: CiEnvironment | None = None, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, description=f"kiln {spec.name}: network (VPC, EFA, placement)", **kwargs)
        retain_logs = ci is None or ci.retain_data
        # The account's AZs where the spec leaves the second to them (CDK's Vpc also reads them, to check that the
        # AZs it is given are the account's).
        zones = account_zones(self) if wants_zone_lookup(spec) else None
        self.training_vpc = TrainingVpc(self, "Vpc", vpc_props(spec, retain_flow_logs=retain_logs, zones=zones))
        self.efa = EfaSecurityGroup(self, "Efa", EfaSecurityGroupProps(vpc=self.training_vpc.vpc))
        if retention(spec).efa_group:
            # A kept EFA-enabled file system's interfaces carry this group (and its rules) as well.
            retain_all(self.efa)
        self.placement_groups: dict[str, ClusterPlacementGroup] = {
            group.name: ClusterPlacementGroup(self, hashed_id("Placement", group.name))
            for group in spec.compute.groups
            if spec.platform.kiln_launch_template and wants_placement_group(group)
        }
        cdk.CfnOutput(self, "VpcId", value=self.training_vpc.vpc.vpc_id)
        cdk.CfnOutput(self, "ComputeSubnetId", value=self.training_vpc.compute_subnet.subnet_id)
        cdk.CfnOutput(self, "EfaSecurityGroupId", value=self.efa.security_group_id)
