"""launcher: the checkpoint path and the launcher's environment."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.names import NODE_PATH, NODE_PATH_RULE, matches
from kiln.catalog.nccl import override_count_problem, override_name_problem, override_value_problem, variable_family
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import key_part, problem_at


def launcher(spec: ClusterSpec) -> Iterator[Problem]:
    """Checkpoints go to a plain absolute path; the launcher's environment (launcher.env, or its older name
    nccl_env, not both) is a few plain NAME=value pairs of NCCL's, libfabric's and Neuron's own variables
    (kiln.catalog.nccl), never ones that change what the node's shells run, and each one read by some group's type."""
    checkpoint = spec.launcher.checkpoint_dir
    if not checkpoint.startswith("/"):
        yield problem_at(("launcher", "checkpoint_dir"), f"must be an absolute path (got {shown(checkpoint)})")
    elif not matches(NODE_PATH, checkpoint):
        yield problem_at(("launcher", "checkpoint_dir"), f"must be {NODE_PATH_RULE} (got {shown(checkpoint)})")
    field = spec.launcher.env_field
    if spec.launcher.env and spec.launcher.nccl_env:
        yield problem_at(
            ("launcher", "nccl_env"),
            "is the older name of launcher.env: set one of the two (move these variables into launcher.env)",
            ("launcher", "env"),
        )
    environment = spec.launcher.environment
    if why := override_count_problem(len(environment)):
        yield problem_at(("launcher", field), why)
    kinds = _group_kinds(spec)
    for name, value in environment.items():
        path = ("launcher", field, key_part(name))
        if why := override_name_problem(name):
            yield problem_at(path, f"{why} (got {shown(name)})")
        elif why := override_value_problem(value):
            yield problem_at(path, f"{why} (got {shown(value)})")
        elif kinds and (family := variable_family(name)) is not None and family not in kinds:
            yield problem_at(path, _unread(name, family), ("compute", "groups"))


def _group_kinds(spec: ClusterSpec) -> set[str]:
    """Return the kinds of the compute groups' types (neuron, not_neuron); empty when one is not in the catalog."""
    kinds = set()
    for group in spec.compute.groups:
        try:
            kinds.add("neuron" if instance_type(group.instance_type).neuron_count else "not_neuron")
        except UnknownInstanceType:
            return set()
    return kinds


def _unread(name: str, family: str) -> str:
    if family == "neuron":
        return (
            f"is a Neuron variable (got {shown(name)}) and no compute group has Neuron devices: only the Neuron "
            "runtime, compiler and collectives read it; remove it"
        )
    return (
        f"is NCCL's own variable (got {shown(name)}) and every compute group has Neuron devices, whose collectives "
        "do not use NCCL (they reach EFA through libfabric: FI_ variables apply); remove it"
    )
