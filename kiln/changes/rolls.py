"""Which deploys replace the nodes of an EKS managed node group (AWS::EKS::Nodegroup), and which resize it.

Facts: platforms.json eks.node_group_rolls, with EKS's pages.
- A version update (LaunchTemplate: a new version of its launch template, which any change of the template data
  makes; ReleaseVersion; Version) rolls every node of the group: EKS drains each through the eviction API, which
  honours disruption budgets, and fails the update after 15 minutes on a node whose pods do not leave (CloudFormation
  then rolls the deploy back). kiln's training pods have a budget that refuses their eviction
  (kiln.constructs.eks_disruption), so a roll takes the idle nodes and waits at a busy one: a line to read, not a
  refusal.
- A changed desired size is applied as given, and EKS's scaling does not honour disruption budgets: the pods of the
  nodes beyond the new size are evicted for up to 15 minutes regardless, then the nodes are terminated. With the
  cluster-autoscaler the group may run more nodes than either template says, so any change of it may end running
  jobs: a line that stops the user.
- A node group the deploy replaces (a create-only property: instance types, AMI type, capacity type, ...) or removes
  is deleted: EKS drains each node for at most 5 minutes, then terminates it whatever the budgets say, so jobs
  running there end: a line that stops the user.
- A HyperPod instance group (InstanceGroups of AWS::SageMaker::Cluster, updated in place) left out of the new template,
  or given a smaller InstanceCount, loses nodes HyperPod chooses, with the jobs on them (platforms.json
  hyperpod.scale_down): a line that stops the user.
- A PCS compute node group the deploy replaces (its name carries the instance type) or removes is deleted with its
  nodes, draining nothing (platforms.json pcs.node_group_deletion): the same line, PCS's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.catalog.platforms import service_fact
from kiln.changes.findings import Action
from kiln.changes.replacement import Moves, updated_in_place, value_change

NODEGROUP = "AWS::EKS::Nodegroup"
# A PCS compute node group: deleted, its nodes go with the jobs on them (platforms.json, pcs.node_group_deletion).
PCS_NODE_GROUP = "AWS::PCS::ComputeNodeGroup"


@cache
def rolling_properties() -> tuple[str, ...]:
    """Return the AWS::EKS::Nodegroup properties whose change replaces every node (a version update)."""
    return tuple(service_fact("eks", "node_group_rolls").value["rolling_properties"])


@cache
def drain_minutes() -> int:
    """Return how long EKS waits for a node's pods to leave before it fails an unforced version update."""
    return int(service_fact("eks", "node_group_rolls").value["drain_minutes"])


@cache
def delete_drain_minutes() -> int:
    """Return how long EKS drains a node of a deleted node group before it terminates the node anyway."""
    return int(service_fact("eks", "node_group_rolls").value["delete_drain_minutes"])


def _group(resource: Mapping[str, Any], logical_id: str) -> str:
    """Return kiln's name of the node group (its nodes' kiln.io/node-group label, a PCS group's Name), else its
    logical id."""
    properties = resource.get("Properties", {})
    labels = properties.get("Labels")
    name = labels.get(NODE_GROUP_LABEL) if isinstance(labels, Mapping) else properties.get("Name")
    return name if isinstance(name, str) else logical_id


def _size(resource: Mapping[str, Any], key: str) -> Any:
    scaling = resource.get("Properties", {}).get("ScalingConfig")
    return scaling.get(key) if isinstance(scaling, Mapping) else None


@dataclass(frozen=True)
class NodeRoll:
    """A node group whose update replaces every node (EKS's version update)."""

    stack: str
    logical_id: str
    group: str
    # The most nodes it runs (ScalingConfig MaxSize of the new template), None when not known before deploy.
    max_nodes: int | None
    because: tuple[str, ...]
    capacity_type: str | None = None

    def line(self) -> str:
        nodes = f"up to {self.max_nodes} nodes" if isinstance(self.max_nodes, int) else "every node"
        block = (
            "; EKS asks that a Capacity Block group be at desired size 0 when it is updated, so let the autoscaler "
            "empty it first"
            if self.capacity_type == "CAPACITY_BLOCK"
            else ""
        )
        return (
            f"{self.stack} {self.logical_id}: rolls {nodes} of group {self.group} ({'; '.join(self.because)}); "
            "training pods wait for their disruption budget: a node running one is not drained, and after "
            f"{drain_minutes()} minutes EKS fails the update and CloudFormation rolls the deploy back, with the job "
            f"still running; deploy again once the job ends, or stop it first{block}"
        )


@dataclass(frozen=True)
class Resize:
    """A node group whose desired size the deploy changes: EKS applies it without the pods' disruption budgets."""

    stack: str
    logical_id: str
    group: str
    before: Any
    after: Any

    def line(self) -> str:
        was = f"was {self.before}" if self.before is not None else "none before"
        nodes = f"{self.after} node{'' if self.after == 1 else 's'}"
        return (
            f"{self.stack} {self.logical_id}: sets group {self.group}'s size to {nodes} ({was} in the "
            f"template): EKS applies a desired size as given, evicting the pods of the nodes beyond it for up to "
            f"{drain_minutes()} minutes without their disruption budgets, then terminating those nodes, and the "
            "autoscaler may be running more; stop the group's jobs first, or keep its min_count as it is"
        )


@dataclass(frozen=True)
class GroupDeleted:
    """A node group the deploy replaces or removes: EKS deletes it, ending what runs on its nodes."""

    stack: str
    logical_id: str
    group: str
    # The create-only properties whose change replaces it; () when the new template drops it.
    because: tuple[str, ...] = ()
    resource_type: str = NODEGROUP

    def line(self) -> str:
        if self.because:
            many = len(self.because) != 1
            what = f"is replaced ({', '.join(self.because)} {'are' if many else 'is'} create-only)"
        else:
            what = "is removed"
        if self.resource_type == PCS_NODE_GROUP:
            fact = service_fact("pcs", "node_group_deletion")
            return (
                f"{self.stack} {self.logical_id}: PCS node group {self.group} {what}: deleting it {fact.value}, "
                f"draining nothing ({fact.source}), so a job running there ends; let the group's jobs finish (or "
                "stop them) first"
            )
        return (
            f"{self.stack} {self.logical_id}: group {self.group} {what}: EKS deletes the old group, draining each "
            f"node for at most {delete_drain_minutes()} minutes before it terminates the instance whatever its pods' "
            "disruption budgets, so a job running there ends; let the group's jobs finish (or stop them) first"
        )


def _why_rolled(old: Mapping[str, Any], new: Mapping[str, Any], moves: Moves) -> tuple[str, ...]:
    before, after = old.get("Properties", {}), new.get("Properties", {})
    reasons = []
    for key in rolling_properties():
        why = value_change(before.get(key), after.get(key), moves)
        if why is None:
            continue
        if key == "LaunchTemplate":
            reasons.append("a new launch template version" if why else "another launch template")
        else:
            reasons.append(f"{key} {before.get(key)} -> {after.get(key)}" if not why else f"{key} ({why})")
    return tuple(reasons)


def node_rolls(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    moves: Moves,
    *,
    stack: str = "",
) -> list[NodeRoll]:
    """Return the node groups of one stack that the deploy updates (ACTIONS, MOVES: replacement.stack_changes) with a
    version update: each replaces every node."""
    found = []
    for lid, old, new in updated_in_place(old_resources, new_resources, actions, (NODEGROUP,)):
        because = _why_rolled(old, new, moves)
        if because:
            capacity = new.get("Properties", {}).get("CapacityType")
            found.append(
                NodeRoll(
                    stack=stack,
                    logical_id=lid,
                    group=_group(new, lid),
                    max_nodes=_size(new, "MaxSize"),
                    because=because,
                    capacity_type=capacity if isinstance(capacity, str) else None,
                )
            )
    return found


def resizes(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    *,
    stack: str = "",
) -> list[Resize]:
    """Return the node groups of one stack whose desired size the deploy changes (an update, not a new group)."""
    found = []
    for lid, old, new in updated_in_place(old_resources, new_resources, actions, (NODEGROUP,)):
        before, after = _size(old, "DesiredSize"), _size(new, "DesiredSize")
        # Left out of the new template, the size stays as it is ("no action occurs", NodegroupScalingConfig).
        if after is not None and before != after:
            found.append(Resize(stack=stack, logical_id=lid, group=_group(new, lid), before=before, after=after))
    return found


def deleted_groups(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    moves: Moves,
    *,
    stack: str = "",
) -> list[GroupDeleted]:
    """Return the node groups of one stack that the deploy replaces or removes (ACTIONS, MOVES:
    replacement.stack_changes)."""
    found = []
    for lid, old in old_resources.items():
        kind = old.get("Type")
        if kind not in (NODEGROUP, PCS_NODE_GROUP) or actions.get(lid) not in ("replace", "delete"):
            continue
        because = tuple(moves.replaced.get(lid, ())) if actions.get(lid) == "replace" else ()
        found.append(
            GroupDeleted(stack=stack, logical_id=lid, group=_group(old, lid), because=because, resource_type=kind)
        )
    return found


HYPERPOD_CLUSTER = "AWS::SageMaker::Cluster"


@dataclass(frozen=True)
class InstanceGroupShrunk:
    """A HyperPod instance group the deploy removes (AFTER None) or gives fewer nodes: HyperPod terminates nodes."""

    stack: str
    logical_id: str
    group: str
    before: int | None
    after: int | None

    def line(self) -> str:
        fact = service_fact("hyperpod", "scale_down")
        if self.after is None:
            what = "is removed"
        else:
            was = self.before if self.before is not None else "more"
            what = f"goes from {was} to {self.after} node{'' if self.after == 1 else 's'}"
        return (
            f"{self.stack} {self.logical_id}: HyperPod instance group {self.group} {what}: HyperPod {fact.value} of "
            f"its choosing without draining them ({fact.source}), so a job running there ends; let the group's jobs "
            "finish (or stop them) first"
        )


@dataclass(frozen=True)
class InstanceTypeChanged:
    """A HyperPod instance group the deploy gives another instance type: its nodes go (platforms.json,
    hyperpod.instance_type_change)."""

    stack: str
    logical_id: str
    group: str
    before: Any
    after: Any

    def line(self) -> str:
        fact = service_fact("hyperpod", "instance_type_change")
        return (
            f"{self.stack} {self.logical_id}: HyperPod instance group {self.group} InstanceType {self.before} -> "
            f"{self.after}: UpdateCluster {fact.value} ({fact.source}), so a job running there ends, and "
            "CloudFormation's reference calls the change a replacement, which the cluster's fixed name refuses; "
            "let the group's jobs finish first, or add a group of the new type and remove this one"
        )


def _instance_groups(resource: Mapping[str, Any], key: str = "InstanceCount") -> dict[str, Any]:
    """Return each instance group's KEY by its name."""
    groups = resource.get("Properties", {}).get("InstanceGroups")
    if not isinstance(groups, list):
        return {}
    return {
        g["InstanceGroupName"]: g.get(key)
        for g in groups
        if isinstance(g, Mapping) and isinstance(g.get("InstanceGroupName"), str)
    }


def retyped_instance_groups(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    *,
    stack: str = "",
) -> list[InstanceTypeChanged]:
    """Return the instance groups of each HyperPod cluster of one stack updated in place whose instance type changes."""
    found = []
    for lid, old, new in updated_in_place(old_resources, new_resources, actions, (HYPERPOD_CLUSTER,)):
        after = _instance_groups(new, "InstanceType")
        for name, was in _instance_groups(old, "InstanceType").items():
            if name in after and after[name] != was:
                found.append(
                    InstanceTypeChanged(stack=stack, logical_id=lid, group=name, before=was, after=after[name])
                )
    return found


def shrunk_instance_groups(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    *,
    stack: str = "",
) -> list[InstanceGroupShrunk]:
    """Return the instance groups of each HyperPod cluster of one stack that the deploy updates in place (ACTIONS)
    and that lose nodes: removed, or a smaller count (a count only known at deploy is not judged)."""
    found = []
    for lid, old, new in updated_in_place(old_resources, new_resources, actions, (HYPERPOD_CLUSTER,)):
        before, after = _instance_groups(old), _instance_groups(new)
        for name, count in before.items():
            if name not in after:
                found.append(InstanceGroupShrunk(stack=stack, logical_id=lid, group=name, before=count, after=None))
                continue
            now = after[name]
            if isinstance(count, int) and isinstance(now, int) and now < count:
                found.append(InstanceGroupShrunk(stack=stack, logical_id=lid, group=name, before=count, after=now))
    return found
