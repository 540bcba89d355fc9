"""network: a new VPC's CIDR and second AZ, or an existing VPC named whole."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kiln.catalog.limits import (
    AWS_VPC_PREFIX_MAX,
    AWS_VPC_PREFIX_MIN,
    DOCKER_DEFAULT_BRIDGE,
    VPC_PREFIX_MAX,
    VPC_PREFIX_MIN,
    VPC_RANGES_RULE,
    is_vpc_range,
)
from kiln.contracts.backends import PARALLELCLUSTER
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def network(spec: ClusterSpec) -> Iterator[Problem]:
    """A new VPC needs a sane CIDR clear of Docker's bridge; an existing VPC needs its private subnet and AZ (and
    on ParallelCluster its CIDR)."""
    net = spec.network
    if net.vpc_id:
        if not net.private_subnet_id:
            yield problem_at(
                ("network", "private_subnet_id"),
                f"is required with vpc_id (got vpc_id {net.vpc_id!r} alone)",
                ("network", "vpc_id"),
            )
        if not spec.availability_zone:
            yield problem_at(
                ("availability_zone",),
                "is required with an existing vpc_id (the AZ of private_subnet_id)",
                ("network", "vpc_id"),
            )
        if net.kept:
            # kiln made the kept VPC from vpc_cidr by a new VPC's rules, and carves the public subnet it builds
            # again from it.
            yield from _vpc_cidr(spec, existing=False)
        elif "vpc_cidr" in net.model_fields_set:
            yield from _vpc_cidr(spec, existing=True)
        elif spec.platform is PARALLELCLUSTER:
            yield problem_at(
                ("network", "vpc_cidr"),
                "is required with vpc_id on parallelcluster: the existing VPC's CIDR, the only addresses its head "
                "and login nodes admit SSH from (kiln cannot read it offline)",
                ("network", "vpc_id"),
                BACKEND,
            )
        return
    if net.private_subnet_id:
        yield problem_at(("network", "private_subnet_id"), "needs vpc_id (the subnet's VPC)", ("network", "vpc_id"))
    if net.kept:
        yield problem_at(
            ("network", "kept"),
            "needs vpc_id and private_subnet_id: the VPC and compute subnet an earlier deploy of this cluster kept "
            "(`kiln leftovers --spec` prints the lines)",
            ("network", "vpc_id"),
        )
    yield from _vpc_cidr(spec, existing=False)


def network_zones(spec: ClusterSpec) -> Iterator[Problem]:
    """A new VPC's second AZ is another AZ of the cluster's region; it and the interface endpoints are for a VPC kiln
    creates (an existing VPC keeps its own subnets and endpoints, which preflight checks)."""
    net = spec.network
    field = ("network", "second_availability_zone")
    if net.vpc_id:
        for name, what in (("second_availability_zone", "subnets"), ("interface_endpoints", "endpoints")):
            if name in net.model_fields_set and getattr(net, name):
                yield problem_at(
                    ("network", name),
                    f"applies to the VPC kiln creates; existing vpc_id {net.vpc_id} keeps its own {what} "
                    "(`kiln preflight` checks what its nodes need): remove it",
                    ("network", "vpc_id"),
                )
        return
    second, first = net.second_availability_zone, spec.availability_zone
    if second is None:
        return
    if first is None:
        yield problem_at(
            field,
            f"needs availability_zone, the AZ of compute, FSx and EFA (got {second!r} alone); without either, the VPC "
            "takes the region's first two AZs",
            ("availability_zone",),
        )
    elif second == first:
        yield problem_at(field, f"must differ from availability_zone (both are {second!r})", ("availability_zone",))
    elif second[:-1] != first[:-1]:
        yield problem_at(
            field,
            f"must lie in availability_zone's region {first[:-1]} (got {second!r})",
            ("availability_zone",),
            ("region",),
        )


def _vpc_cidr(spec: ClusterSpec, *, existing: bool) -> Iterator[Problem]:
    """A VPC's CIDR is an IPv4 network of a range and size AWS takes for VPCs, clear of Docker's bridge; a new one
    also fits kiln's subnet split."""
    net = spec.network
    field = ("network", "vpc_cidr")
    try:
        cidr = ipaddress.IPv4Network(net.vpc_cidr, strict=True)
    except ValueError as exc:
        yield problem_at(field, f"is not an IPv4 network (got {shown(net.vpc_cidr)}: {shown(str(exc))})")
        return
    if not existing and not VPC_PREFIX_MIN <= cidr.prefixlen <= VPC_PREFIX_MAX:
        yield problem_at(field, f"prefix must be /{VPC_PREFIX_MIN} to /{VPC_PREFIX_MAX} (got /{cidr.prefixlen})")
    elif existing and not AWS_VPC_PREFIX_MIN <= cidr.prefixlen <= AWS_VPC_PREFIX_MAX:
        yield problem_at(
            field,
            f"prefix must be /{AWS_VPC_PREFIX_MIN} to /{AWS_VPC_PREFIX_MAX}, the sizes AWS allows for a VPC "
            f"(got /{cidr.prefixlen})",
        )
    if not is_vpc_range(cidr):
        yield problem_at(field, f"must be {VPC_RANGES_RULE}, such as 10.0.0.0/16 (got {shown(net.vpc_cidr)})")
    elif spec.platform.runs_slurm and cidr.overlaps(DOCKER_DEFAULT_BRIDGE):
        yield problem_at(
            field,
            f"overlaps Docker's default bridge {DOCKER_DEFAULT_BRIDGE} (got {net.vpc_cidr!r}): Slurm nodes run "
            "Docker, which would route those VPC addresses to its bridge; choose a range such as 10.0.0.0/16",
            BACKEND,
            ORCHESTRATOR,
        )
