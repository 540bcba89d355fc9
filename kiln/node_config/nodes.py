"""The kinds of node a spec boots with kiln's bootstrap, and the one architecture they share."""

from __future__ import annotations

from kiln.bootstrap.checks import BootstrapInputError
from kiln.bootstrap.config import ARCHITECTURES
from kiln.catalog import instance_type
from kiln.catalog.names import ec2_type_name
from kiln.spec import ClusterSpec


def one_architecture(instance_types: tuple[str, ...]) -> str:
    """Return the one architecture (x86_64 or arm64) all of INSTANCE_TYPES offer."""
    offered = [set(instance_type(name).architectures) for name in instance_types]
    for arch in ARCHITECTURES:
        if all(arch in archs for archs in offered):
            return arch
    raise BootstrapInputError(f"instance types {', '.join(instance_types)}: no one architecture all of them offer")


def node_kinds(spec: ClusterSpec) -> dict[str, str]:
    """Return each kind of node SPEC's backend boots with kiln's bootstrap -> its instance type, in spec order."""
    compute, roles = spec.compute, spec.platform.roles
    kinds = {}
    # PCS runs the controller itself, and EKS has no Slurm head node.
    if "controller" in roles:
        kinds["head node"] = compute.head_node.instance_type
    if "login" in roles and compute.login_nodes.count:
        kinds["login"] = compute.login_nodes.instance_type
    for group in compute.groups:
        kinds[group.name] = group.instance_type
    return {kind: ec2_type_name(name) for kind, name in kinds.items()}


def node_architecture(spec: ClusterSpec) -> str:
    """Return the one architecture every node SPEC boots offers (x86_64 or arm64)."""
    return one_architecture(tuple(dict.fromkeys(node_kinds(spec).values())))


# The bootstrap role of each kind of node node_kinds names; every other kind is a compute group's (worker).
KIND_ROLES = {"head node": "controller", "login": "login"}
