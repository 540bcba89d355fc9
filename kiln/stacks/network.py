"""NetworkStack: VPC and EFA security group, from the spec (the placement groups live in the compute stack)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kiln.catalog.network import node_endpoints, zone_in_region, zones_context_file, zones_fallback_key
from kiln.constructs import (
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    ExistingNetwork,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.retention import retain_all
from kiln.spec import ClusterSpec
from kiln.stacks.ci_mode import CiEnvironment
from kiln.stacks.retention import retention
from kiln.stacks.zones import looked_up_line, needs_two_zones, second_availability_zone, wants_zone_lookup


def account_zones(stack: cdk.Stack) -> list[str] | None:
    """Return the region's AZs by CDK's availability-zones context lookup, or None when STACK's account or region is
    unknown at synth (env-agnostic: no lookup can run) and the app was given no recorded list.

    Before the CDK CLI has run the lookup, CDK answers with placeholders (and records the lookup as missing, so the
    CLI runs it and synthesizes again with the account's answer). kiln's own synthesis gives a stack without an
    account the list the CLI recorded (kiln.stacks.zones.zone_choice) as CDK's fallback list.
    """
    if cdk.Token.is_unresolved(stack.region):
        return None
    if cdk.Token.is_unresolved(stack.account) and stack.node.try_get_context(zones_fallback_key()) is None:
        return None
    return list(stack.availability_zones)


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
            # A kept VPC is the one kiln made from vpc_cidr (its default included); another VPC's is known only
            # when the spec says it.
            cidr=net.vpc_cidr if net.kept or "vpc_cidr" in net.model_fields_set else None,
            kept=net.kept,
        )
        return TrainingVpcProps(existing=existing)
    interface, gateway = endpoint_names(spec)
    return TrainingVpcProps(
        cidr=net.vpc_cidr,
        availability_zone=spec.availability_zone,
        # Without availability_zone as with it: two AZs only where an EKS control plane needs them.
        zone_count=2 if needs_two_zones(spec) else 1,
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
        super().__init__(scope, construct_id, description=f"kiln {spec.name}: network (VPC, EFA)", **kwargs)
        retain_logs = ci is None or ci.retain_data
        # The account's AZs where the spec leaves the second to them (CDK's Vpc also reads them, to check that the
        # AZs it is given are the account's).
        zones = account_zones(self) if wants_zone_lookup(spec) else None
        self.training_vpc = TrainingVpc(self, "Vpc", vpc_props(spec, retain_flow_logs=retain_logs, zones=zones))
        looked_up = zones is not None and any(zone_in_region(zone, self.region) for zone in zones)
        if looked_up and not cdk.Token.is_unresolved(self.account):
            # The CDK CLI prints it on synth and deploy: which AZ its lookup gave (not CDK's placeholders).
            cdk.Annotations.of(self).add_info(looked_up_line(spec, zones, self.account, zones_context_file()))
        self.efa = EfaSecurityGroup(self, "Efa", EfaSecurityGroupProps(vpc=self.training_vpc.vpc))
        if retention(spec).efa_group:
            # A kept EFA-enabled file system's interfaces carry this group (and its rules) as well.
            retain_all(self.efa)
        cdk.CfnOutput(self, "VpcId", value=self.training_vpc.vpc.vpc_id)
        cdk.CfnOutput(self, "ComputeSubnetId", value=self.training_vpc.compute_subnet.subnet_id)
        cdk.CfnOutput(self, "EfaSecurityGroupId", value=self.efa.security_group_id)
