"""What a spec asks of an AWS account: the nodes it launches, the addresses, image, storage and services it needs.

Pure: no AWS call. Every check reads one Plan, so the derivation lives here once.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kiln.catalog import instance_type
from kiln.catalog.interfaces import addresses_with_efa_everywhere, layout_addresses, parallelcluster_addresses
from kiln.catalog.limits import (
    EKS_SYSTEM_NODE_COUNT,
    EKS_SYSTEM_NODE_TYPE,
    PRIVATE_SUBNET_EXTRA_BITS,
    SUBNET_RESERVED_ADDRESSES,
)
from kiln.catalog.names import ec2_type_name
from kiln.catalog.network import node_endpoints
from kiln.catalog.platforms import root_device_name
from kiln.contracts.backends import HYPERPOD, PARALLELCLUSTER, Platform
from kiln.contracts.environment import environment_bucket_name, stack_name
from kiln.spec import ClusterSpec
from kiln.spec.models import Lustre


@dataclass(frozen=True, kw_only=True)
class NodeNeed:
    """One kind of node the cluster launches, at most COUNT at once."""

    role: str  # what the user calls it: "group p5", "login nodes", "head node"
    instance_type: str  # EC2 name, also for HyperPod (its ml. name is derived)
    count: int
    capacity: str = "on-demand"
    reservation_id: str | None = None
    addresses: int = 1  # private IPv4 addresses one node takes from the subnet
    hyperpod: bool = False  # bought through SageMaker HyperPod (its quotas), not EC2
    boots_ami: bool = False  # boots compute.image.ami_id

    @property
    def vcpus(self) -> int:
        return instance_type(self.instance_type).vcpus * self.count


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything preflight asks AWS about, for one spec in one region."""

    spec_path: str
    name: str
    region: str
    availability_zone: str | None
    backend: str
    nodes: tuple[NodeNeed, ...]
    ami_id: str | None
    smallest_root_gib: int | None  # the smallest root volume booting ami_id (its snapshot must fit)
    # The device kiln's launch templates map the root volume of nodes booting ami_id to (the OS's, platforms.json
    # ec2.root_device_names); None where the backend sizes its nodes' root volumes itself (ParallelCluster, HyperPod).
    root_device_name: str | None = None
    image_os: str | None = None  # compute.image.os in force (ClusterSpec.image_os)
    lustre: Lustre | None
    bucket_name: str | None  # the data bucket's fixed name; None: CloudFormation generates one
    import_bucket: str | None  # a data repository bucket kiln does not create
    storage_stack: str
    vpc_id: str | None
    subnet_id: str | None
    new_subnet_addresses: int | None  # usable addresses of the private subnet a new VPC gets
    services: tuple[str, ...]
    # The new VPC's second AZ as the spec names it (None: the account's first other AZ, or none on one AZ).
    second_availability_zone: str | None = None
    # The VPC endpoints (kiln.catalog.network names) the nodes call AWS through where no NAT carries them.
    node_endpoints: tuple[str, ...] = ()
    # The spec asks for interface endpoints in the VPC kiln creates.
    interface_endpoints: bool = False
    # The spec attaches bucket_name (storage.bucket.existing) rather than creating it.
    bucket_existing: bool = False
    # A short-lived environment's plan (`kiln ci up`): name is that environment's, its resources carry its tag.
    environment: str | None = None
    # vpc_id and subnet_id are the VPC and compute subnet an earlier deploy kept (network.kept): kiln builds their
    # egress again, and must prove them this cluster's.
    kept: bool = False
    # The CIDR of the VPC kiln creates, or of the kept one (network.vpc_cidr).
    vpc_cidr: str = "10.0.0.0/16"

    @property
    def kubernetes(self) -> bool:
        """Return True when the cluster has an EKS control plane (EKS, or HyperPod orchestrated by EKS)."""
        return "eks" in self.services

    @property
    def address_need(self) -> int:
        return sum(node.count * node.addresses for node in self.nodes)

    @property
    def instance_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(node.instance_type for node in self.nodes))

    @property
    def ec2_types(self) -> tuple[str, ...]:
        """The types EC2 itself launches (HyperPod's run in SageMaker's account)."""
        return tuple(dict.fromkeys(node.instance_type for node in self.nodes if not node.hyperpod))


# ParallelCluster's kind of node (kiln.catalog.interfaces.parallelcluster_addresses) for each role launched_nodes
# names; every other role is a queue's compute nodes.
PARALLELCLUSTER_NODES = {"head node": "head_node", "login nodes": "login_node"}


def _addresses(platform: Platform, role: str, name: str) -> int:
    """Return the subnet addresses one node of ROLE and EC2 type NAME takes on PLATFORM: PCS and EKS attach kiln's
    launch template layout, ParallelCluster its own (one address per compute node with EFA, its EFA interfaces
    EFA-only); HyperPod its own, which kiln does not choose: one per EFA interface, the most it can take."""
    if platform.kiln_launch_template:
        return layout_addresses(name)
    if platform is PARALLELCLUSTER:
        return parallelcluster_addresses(name, PARALLELCLUSTER_NODES.get(role, "compute"))
    return addresses_with_efa_everywhere(name)


def launched_nodes(spec: ClusterSpec) -> tuple[NodeNeed, ...]:
    """Return every node the spec's cluster runs at its largest, with how each is bought and addressed."""
    compute, platform = spec.compute, spec.platform
    hyperpod = platform.backend == HYPERPOD.backend
    boots_ami = compute.image.ami_id is not None

    def need(role: str, name: str, count: int, **more: object) -> NodeNeed:
        ec2_name = ec2_type_name(name)
        return NodeNeed(
            role=role,
            instance_type=ec2_name,
            count=count,
            addresses=_addresses(platform, role, ec2_name),
            hyperpod=hyperpod,
            boots_ami=boots_ami,
            **more,
        )

    nodes: list[NodeNeed] = []
    if "controller" in platform.roles:
        nodes.append(need("head node", compute.head_node.instance_type, 1))
    if "login" in platform.roles and compute.login_nodes.count:
        nodes.append(need("login nodes", compute.login_nodes.instance_type, compute.login_nodes.count))
    if platform.system_group is not None:
        nodes.append(need("EKS system nodes", EKS_SYSTEM_NODE_TYPE, EKS_SYSTEM_NODE_COUNT))
    for group in compute.groups:
        nodes.append(
            need(
                f"group {group.name}",
                group.instance_type,
                max(group.max_count, group.min_count),
                capacity=group.capacity.type,
                reservation_id=group.capacity.reservation_id,
            )
        )
    return tuple(node for node in nodes if node.count > 0)


def _services(spec: ClusterSpec) -> tuple[str, ...]:
    services = ["ec2", "s3", "cloudformation", *spec.platform.services]
    if spec.storage.lustre is not None:
        services.append("fsx")
    if spec.compute.image.bake:
        services.append("imagebuilder")
    if spec.ci.ttl_hours is not None:
        services += ["scheduler", "lambda"]
    return tuple(dict.fromkeys(services))


def private_subnet_addresses(vpc_prefix: int) -> int:
    """Return the usable addresses of the private subnet kiln's new VPC of prefix length VPC_PREFIX gets."""
    return 2 ** (32 - vpc_prefix - PRIVATE_SUBNET_EXTRA_BITS) - SUBNET_RESERVED_ADDRESSES


def _new_subnet_addresses(spec: ClusterSpec) -> int | None:
    if spec.network.vpc_id is not None:
        return None
    return private_subnet_addresses(ipaddress.IPv4Network(spec.network.vpc_cidr).prefixlen)


def _import_bucket(spec: ClusterSpec) -> str | None:
    lustre = spec.storage.lustre
    if lustre is None or not lustre.data_repository.import_path:
        return None
    return lustre.data_repository.import_path.removeprefix("s3://").partition("/")[0]


def _node_endpoints(spec: ClusterSpec) -> tuple[str, ...]:
    prometheus = spec.observability is not None and spec.observability.prometheus
    found = node_endpoints(spec.platform.name, prometheus_agent=prometheus and spec.platform.runs_slurm)
    return tuple(endpoint.name for endpoint in found)


def plan_for(
    spec: ClusterSpec, *, spec_path: str, region: str, environment: str | None = None, account: str | None = None
) -> Plan:
    """Return what SPEC asks of ACCOUNT in REGION (the spec's own region unless it has none).

    ENVIRONMENT: the plan of a short-lived environment of that name (`kiln ci up`), whose stacks and data bucket
    carry its name (the bucket's ends in ACCOUNT) instead of the spec's.
    """
    if environment is not None and account is None:
        raise ValueError("an environment's plan needs the account (its bucket names end in it)")
    name = environment or spec.name
    bucket_name = environment_bucket_name(environment, "data", account) if environment else spec.storage.bucket.name
    nodes = launched_nodes(spec)
    ami_id = spec.compute.image.ami_id
    return Plan(
        spec_path=spec_path,
        name=name,
        region=region,
        availability_zone=spec.availability_zone,
        backend=spec.compute.backend,
        nodes=nodes,
        ami_id=ami_id,
        smallest_root_gib=spec.smallest_root_volume_gib if ami_id else None,
        root_device_name=root_device_name(spec.image_os) if ami_id and spec.platform.kiln_launch_template else None,
        image_os=spec.image_os,
        lustre=spec.storage.lustre,
        bucket_name=bucket_name,
        bucket_existing=spec.storage.bucket.existing and environment is None,
        import_bucket=_import_bucket(spec),
        storage_stack=stack_name(name, "storage"),
        vpc_id=spec.network.vpc_id,
        subnet_id=spec.network.private_subnet_id,
        new_subnet_addresses=_new_subnet_addresses(spec),
        services=_services(spec),
        second_availability_zone=spec.network.second_availability_zone,
        node_endpoints=_node_endpoints(spec),
        interface_endpoints=spec.network.interface_endpoints,
        environment=environment,
        kept=spec.network.kept,
        vpc_cidr=spec.network.vpc_cidr,
    )
