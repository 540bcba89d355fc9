"""ParallelCluster constructs built from props, the capacities they are built with, and both verdicts on an update."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2

from kiln.changes.parallelcluster import update_verdicts
from kiln.constructs import (
    CapacityOption,
    LustreFileSystem,
    LustreFileSystemAttributes,
)
from kiln.constructs.parallelcluster import (
    ParallelCluster,
    ParallelClusterProps,
    SlurmQueue,
)
from tests.support.constructs import (
    imported_vpc,
    plain_bootstrap,
    stack,
)

CAPACITIES = {
    "on-demand": CapacityOption(),
    "spot": CapacityOption(type="spot"),
    "reservation": CapacityOption(type="reservation", reservation_id="cr-0abcdef0123456789"),
    "capacity-block": CapacityOption(type="capacity-block", reservation_id="cr-0123456789abcdef0"),
}


def build_props(capacity: str, fsx: str | None, login_count: int = 1) -> tuple[Stack, ParallelClusterProps]:
    """Return a new stack and the props of a cluster of CAPACITY, with FSX (an id) or none, and LOGIN_COUNT login
    nodes."""
    st = stack(f"Pc{capacity.title().replace('-', '')}{'Fsx' if fsx else 'NoFsx'}{login_count}")
    vpc = imported_vpc(st)
    clients = ec2.SecurityGroup(st, "LustreClients", vpc=vpc)
    bootstrap = plain_bootstrap(st, "on-node-configured.sh")
    count = 2 if capacity == "capacity-block" else 0
    return st, ParallelClusterProps(
        cluster_name="llm-pcluster",
        subnet=vpc.private_subnets[0],
        bootstrap=bootstrap,
        cluster_env={"KILN_CLUSTER_NAME": "llm-pcluster", "KILN_REGION": st.region},
        queues=[
            SlurmQueue(
                name="p5",
                instance_type="p5.48xlarge",
                min_count=count,
                max_count=count or 4,
                capacity=CAPACITIES[capacity],
                placement_group=capacity in ("on-demand", "spot"),
                root_volume_gib=512,
            ),
            SlurmQueue(name="cpu", instance_type="c5.4xlarge", max_count=2, placement_group=False),
        ],
        file_system=LustreFileSystem.from_lustre_attributes(
            st,
            "Fsx",
            LustreFileSystemAttributes(
                file_system_id=fsx,
                dns_name=f"{fsx}.fsx.us-east-1.amazonaws.com",
                mount_name="abcdefgh",
                security_group=clients,
            ),
        )
        if fsx
        else None,
        security_groups=[clients],
        login_count=login_count,
        ssh_allowed_ips=vpc.vpc_cidr_block,
    )


def build(capacity: str, fsx: str | None, login_count: int = 1) -> ParallelCluster:
    """Return a cluster of CAPACITY, with FSX (an id) or none, and LOGIN_COUNT login nodes, in a stack of its own."""
    st, props = build_props(capacity, fsx, login_count)
    return ParallelCluster(st, "Cluster", props)


def parallelclusters_verdict(before: dict, after: dict) -> tuple[bool, set[str]]:
    """Return whether ParallelCluster's update check lets BEFORE become AFTER, and the settings it refuses."""
    from pcluster.config.config_patch import ConfigPatch

    allowed, rows = ConfigPatch(RunningCluster(before), before, after).check()
    header, *changes = rows
    column = {name: index for index, name in enumerate(header)}
    refused = {
        "/".join([*row[column["param_path"]], row[column["parameter"]]])
        for row in changes
        if row[column["check"]] != "SUCCEEDED"
    }
    return allowed, refused


def kilns_verdict(before: dict, after: dict) -> tuple[list[str], set[str]]:
    """Return update_refusals' lines, and the settings they refuse named as ParallelCluster's rows name them (an
    item added to or removed from a list by the list's path)."""
    verdicts = update_verdicts(before, after, "llm-pcluster")
    refused = {
        "/".join((*change.parents, change.key) if change.is_item else change.segments)
        for change, line in verdicts
        if line is not None
    }
    return [line for _, line in verdicts if line is not None], refused


class RunningCluster:
    """What ConfigPatch asks of a cluster: its compute fleet runs, and the login pools BEFORE gives nodes are up."""

    name = stack_name = "llm-pcluster"

    def __init__(self, before: dict) -> None:
        self.pools = {p["Name"] for p in before.get("LoginNodes", {}).get("Pools", []) if p.get("Count", 0) > 0}

    def has_running_capacity(self, updated_value: bool = False) -> bool:
        return True

    def has_running_login_nodes(self, updated_value: bool = False, pool_name: str | None = None) -> bool:
        return bool(self.pools) if pool_name is None else pool_name in self.pools
