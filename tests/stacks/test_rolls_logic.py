"""kiln.changes.rolls on its own (issue 46, item 4): which node group updates roll nodes, resize a group or delete
it, from templates alone, with EKS's facts from the data."""

from __future__ import annotations

import copy

from kiln.catalog.platforms import service_fact
from kiln.changes import GroupDeleted, NodeRoll, deleted_groups, node_rolls, resizes
from kiln.changes.replacement import Moves

GROUP = {
    "Type": "AWS::EKS::Nodegroup",
    "Properties": {
        "ReleaseVersion": "1.35.0-20260101",
        "Labels": {"kiln.io/node-group": "p5"},
        "ScalingConfig": {"MinSize": 0, "MaxSize": 4, "DesiredSize": 0},
    },
}
MOVES = Moves(replaced={}, updated={"G"}, changed_outputs=set())


def _newer(**properties) -> dict:
    group = copy.deepcopy(GROUP)
    group["Properties"].update(properties)
    return group


def test_the_rolling_properties_and_drain_times_are_eks_documented_facts() -> None:
    fact = service_fact("eks", "node_group_rolls")
    assert fact.source == "https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html"
    assert fact.value["rolling_properties"] == ["LaunchTemplate", "ReleaseVersion", "Version"]
    assert (fact.value["drain_minutes"], fact.value["delete_drain_minutes"]) == (15, 5)
    assert "delete-managed-node-group.html" in fact.note


def test_a_new_release_version_rolls_an_updated_group_only() -> None:
    newer = _newer(ReleaseVersion="1.35.0-20260201")
    [roll] = node_rolls({"G": GROUP}, {"G": newer}, {"G": "update"}, MOVES, stack="s")
    assert roll == NodeRoll(
        stack="s",
        logical_id="G",
        group="p5",
        max_nodes=4,
        because=("ReleaseVersion 1.35.0-20260101 -> 1.35.0-20260201",),
    )
    assert "rolls up to 4 nodes of group p5" in roll.line()
    # A group the deploy creates or replaces is no roll: replacement and deleted_groups speak for it.
    assert node_rolls({"G": GROUP}, {"G": newer}, {"G": "replace"}, MOVES, stack="s") == []
    assert node_rolls({}, {"G": newer}, {"G": "create"}, MOVES, stack="s") == []


def test_labels_taints_and_scaling_roll_nothing() -> None:
    newer = _newer(Labels={"kiln.io/node-group": "p5", "team": "ml"}, Taints=[], ScalingConfig={"MaxSize": 8})
    assert node_rolls({"G": GROUP}, {"G": newer}, {"G": "update"}, MOVES, stack="s") == []


def test_a_launch_template_version_bumped_by_the_update_rolls_the_group() -> None:
    spec = {"Id": {"Ref": "Lt"}, "Version": {"Fn::GetAtt": ["Lt", "LatestVersionNumber"]}}
    old, new = _newer(LaunchTemplate=spec), _newer(LaunchTemplate=spec)
    moves = Moves(replaced={}, updated={"G", "Lt"}, changed_outputs=set())
    [roll] = node_rolls({"G": old}, {"G": new}, {"G": "update"}, moves, stack="s")
    assert roll.because == ("a new launch template version",)
    # The launch template unchanged: the same version, no roll.
    assert node_rolls({"G": old}, {"G": new}, {"G": "update"}, MOVES, stack="s") == []


def test_a_desired_size_change_is_a_resize_and_one_left_out_is_none() -> None:
    [resize] = resizes(
        {"G": GROUP}, {"G": _newer(ScalingConfig={"MinSize": 1, "MaxSize": 4, "DesiredSize": 1})}, {"G": "update"}
    )
    assert (resize.group, resize.before, resize.after) == ("p5", 0, 1)
    assert "sets group p5's size to 1 node (was 0 in the template)" in resize.line()
    # A size the new template leaves out stays as it is ("no action occurs", NodegroupScalingConfig).
    assert resizes({"G": GROUP}, {"G": _newer(ScalingConfig={"MinSize": 0, "MaxSize": 4})}, {"G": "update"}) == []


def test_a_replaced_or_removed_group_is_deleted_with_its_nodes() -> None:
    moves = Moves(replaced={"G": ("CapacityType",)}, updated=set(), changed_outputs=set())
    [replaced] = deleted_groups({"G": GROUP}, {"G": GROUP}, {"G": "replace"}, moves, stack="s")
    assert replaced == GroupDeleted(stack="s", logical_id="G", group="p5", because=("CapacityType",))
    assert "group p5 is replaced (CapacityType is create-only)" in replaced.line()
    [removed] = deleted_groups({"G": GROUP}, {}, {"G": "delete"}, MOVES, stack="s")
    assert "group p5 is removed" in removed.line() and "at most 5 minutes" in removed.line()
    assert deleted_groups({"G": GROUP}, {"G": GROUP}, {"G": "update"}, MOVES, stack="s") == []


def test_a_replaced_or_removed_pcs_node_group_ends_its_jobs() -> None:
    # PCS deletes a node group with its nodes and drains nothing (platforms.json, pcs.node_group_deletion).
    pcs_group = {"Type": "AWS::PCS::ComputeNodeGroup", "Properties": {"Name": "p5-1a2b3c4d"}}
    moves = Moves(replaced={"N": ("Name",)}, updated=set(), changed_outputs=set())
    [replaced] = deleted_groups({"N": pcs_group}, {"N": pcs_group}, {"N": "replace"}, moves, stack="s")
    assert replaced.group == "p5-1a2b3c4d" and replaced.resource_type == "AWS::PCS::ComputeNodeGroup"
    fact = service_fact("pcs", "node_group_deletion")
    assert replaced.line() == (
        f"s N: PCS node group p5-1a2b3c4d is replaced (Name is create-only): deleting it {fact.value}, draining "
        f"nothing ({fact.source}), so a job running there ends; let the group's jobs finish (or stop them) first"
    )
    [removed] = deleted_groups({"N": pcs_group}, {}, {"N": "delete"}, MOVES, stack="s")
    assert "PCS node group p5-1a2b3c4d is removed" in removed.line()
    assert deleted_groups({"N": pcs_group}, {"N": pcs_group}, {"N": "update"}, MOVES, stack="s") == []


def test_a_hyperpod_group_removed_or_made_smaller_loses_nodes() -> None:
    from kiln.changes import shrunk_instance_groups

    def cluster(**counts) -> dict:
        groups = [{"InstanceGroupName": name, "InstanceCount": count} for name, count in counts.items()]
        return {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": groups}}

    old = cluster(controller=1, p5=4, login=1)
    found = shrunk_instance_groups({"C": old}, {"C": cluster(controller=1, p5=2)}, {"C": "update"}, stack="s")
    assert [(g.group, g.before, g.after) for g in found] == [("p5", 4, 2), ("login", 1, None)]
    fact = service_fact("hyperpod", "scale_down")
    assert found[0].line() == (
        f"s C: HyperPod instance group p5 goes from 4 to 2 nodes: HyperPod {fact.value} of its choosing without "
        f"draining them ({fact.source}), so a job running there ends; let the group's jobs finish (or stop them) first"
    )
    assert "HyperPod instance group login is removed" in found[1].line()
    # More nodes, a new group, a count known only at deploy, or a cluster replaced: nothing here.
    grown = cluster(controller=1, p5=8, login=1, extra=2)
    assert shrunk_instance_groups({"C": old}, {"C": grown}, {"C": "update"}, stack="s") == []
    unknown = cluster(controller=1, p5={"Ref": "Count"}, login=1)
    assert shrunk_instance_groups({"C": old}, {"C": unknown}, {"C": "update"}, stack="s") == []
    assert shrunk_instance_groups({"C": old}, {"C": cluster(p5=1)}, {"C": "replace"}, stack="s") == []


def test_a_hyperpod_group_given_another_instance_type_loses_its_nodes() -> None:
    from kiln.changes import retyped_instance_groups

    def cluster(kind: str) -> dict:
        group = {"InstanceGroupName": "p5", "InstanceCount": 2, "InstanceType": kind}
        return {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}}

    old, new = cluster("ml.p5.48xlarge"), cluster("ml.p5e.48xlarge")
    [changed] = retyped_instance_groups({"C": old}, {"C": new}, {"C": "update"}, stack="s")
    fact = service_fact("hyperpod", "instance_type_change")
    assert changed.line().startswith(
        f"s C: HyperPod instance group p5 InstanceType ml.p5.48xlarge -> ml.p5e.48xlarge: UpdateCluster {fact.value} "
        f"({fact.source}), so a job running there ends"
    )
    assert retyped_instance_groups({"C": old}, {"C": old}, {"C": "update"}, stack="s") == []
