"""NetworkStack: VPC, EFA security group and cluster placement groups, from the spec."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.catalog import instance_type
from kiln.catalog.capacity import CAPACITY
from kiln.constructs import (
    ClusterPlacementGroup,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    ExistingNetwork,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.ids import hashed_id
from kiln.spec import ClusterSpec
from kiln.spec.models import ComputeGroup
from kiln.stacks.ci_mode import CiEnvironment

# Backends whose node groups take a placement group kiln makes; ParallelCluster makes its own, and
# HyperPod places its nodes itself.
BACKENDS_WITH_KILN_PLACEMENT = ("pcs", "eks")


def wants_placement_group(group: ComputeGroup) -> bool:
    """Return whether GROUP gets a cluster placement group.

    Default: yes for EFA types, except when reserved capacity already places the nodes.
    """
    if group.placement_group is not None:
        return group.placement_group
    return instance_type(group.instance_type).efa_supported and not CAPACITY[group.capacity.type].reserved


def vpc_props(spec: ClusterSpec, *, retain_flow_logs: bool = True) -> TrainingVpcProps:
    """Translate the spec's network section into TrainingVpc props."""
    net = spec.network
    if net.vpc_id:
        existing = ExistingNetwork(
            vpc_id=net.vpc_id,
            private_subnet_id=net.private_subnet_id,
            availability_zone=spec.availability_zone,
            cidr=net.vpc_cidr if "vpc_cidr" in net.model_fields_set else None,
        )
        return TrainingVpcProps(existing=existing)
    return TrainingVpcProps(
        cidr=net.vpc_cidr, availability_zone=spec.availability_zone, retain_flow_logs=retain_flow_logs
    )


class NetworkStack(cdk.Stack):
    """Where the cluster lives: one subnet/AZ for compute, FSx and EFA."""

    def __init__(
        self, scope: Construct, construct_id: str, *, spec: ClusterSpec, ci: CiEnvironment | None = None, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, description=f"kiln {spec.name}: network (VPC, EFA, placement)", **kwargs)
        retain_logs = ci is None or ci.retain_data
        self.training_vpc = TrainingVpc(self, "Vpc", vpc_props(spec, retain_flow_logs=retain_logs))
        self.efa = EfaSecurityGroup(self, "Efa", EfaSecurityGroupProps(vpc=self.training_vpc.vpc))
        self.placement_groups: dict[str, ClusterPlacementGroup] = {
            group.name: ClusterPlacementGroup(self, hashed_id("Placement", group.name))
            for group in spec.compute.groups
            if spec.compute.backend in BACKENDS_WITH_KILN_PLACEMENT and wants_placement_group(group)
        }
        cdk.CfnOutput(self, "VpcId", value=self.training_vpc.vpc.vpc_id)
        cdk.CfnOutput(self, "ComputeSubnetId", value=self.training_vpc.compute_subnet.subnet_id)
        cdk.CfnOutput(self, "EfaSecurityGroupId", value=self.efa.security_group_id)
