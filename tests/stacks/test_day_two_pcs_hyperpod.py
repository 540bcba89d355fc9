"""Day two on PCS and HyperPod: each spec change, synthesized before and after, deploys as an update or as a
replacement that takes no name an existing resource holds (kiln.changes, from cfn-lint's create-only properties)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kiln.catalog.platforms import service_fact
from kiln.changes import CUSTOM_NAME_RULE, Action, create_only, plan
from kiln.constructs.pcs import node_group_name
from tests.support.day_two import assert_refused, deploy_plan, example, templates

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

AMI = "ami-0123456789abcdef0"


def _compute(data: dict[str, Any]) -> dict[str, Any]:
    """Return the compute stack's template of spec DATA."""
    return templates(data)[f"{data['name']}-compute"]


def _group(data: dict[str, Any]) -> dict[str, Any]:
    return data["compute"]["groups"][0]


def _mutated(base: dict[str, Any], mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    mutate(data)
    return data


def _deploys(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Action]:
    """Return what deploying spec AFTER over BEFORE does to each compute resource, having checked that CloudFormation
    refuses nothing: no replacement keeps a name it holds, no resource is created under a name another one holds."""
    result = deploy_plan(before, after)
    assert not result.refused, "\n".join(result.findings())
    return dict(result.actions[f"{after['name']}-compute"])


PCS_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "instance type": lambda d: _group(d).update(instance_type="g5.24xlarge"),
    "min and max counts": lambda d: _group(d).update(min_count=1, max_count=3),
    "max count past 32 nodes": lambda d: _group(d).update(max_count=40),
    "AMI": lambda d: d["compute"]["image"].update(ami_id="ami-0fedcba9876543210"),
    "spot instead of on-demand": lambda d: _group(d).update(capacity={"type": "spot"}),
    "a second group": lambda d: d["compute"]["groups"].append(
        {"name": "cpu", "instance_type": "c5n.18xlarge", "max_count": 2}
    ),
    "login instance type": lambda d: d["compute"]["login_nodes"].update(instance_type="m5.2xlarge"),
}


@pytest.fixture(scope="module")
def pcs() -> dict[str, dict[str, Any]]:
    """Return the specs: quickstart (one g5.12xlarge group of 0-2 nodes and a login node) with an AMI id, so AMI
    changes show in the template, then each change of it."""
    base = example("quickstart")
    base["compute"]["image"] = {"ami_id": AMI}
    return {"before": base} | {change: _mutated(base, mutate) for change, mutate in PCS_CHANGES.items()}


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == resource_type}


def _pcs_actions(pcs: dict[str, dict[str, Any]], change: str) -> dict[str, dict[str, Action]]:
    """Return, per PCS resource type, each resource's PCS name (or logical id) -> what the deploy does to it."""
    actions = _deploys(pcs["before"], pcs[change])
    before, after = _compute(pcs["before"]), _compute(pcs[change])
    out: dict[str, dict[str, Action]] = {}
    for kind in ("Cluster", "ComputeNodeGroup", "Queue"):
        for lid, resource in (_of_type(before, f"AWS::PCS::{kind}") | _of_type(after, f"AWS::PCS::{kind}")).items():
            name = resource["Properties"].get("Name", lid)
            if kind == "ComputeNodeGroup":
                name = name.rsplit("-", 1)[0]
            out.setdefault(kind, {})[name] = actions[lid]
    return out


def _node_group(template: dict[str, Any], group: str) -> dict[str, Any]:
    (props,) = [
        r["Properties"]
        for r in _of_type(template, "AWS::PCS::ComputeNodeGroup").values()
        if r["Properties"]["Name"].rsplit("-", 1)[0] == group
    ]
    return props


@pytest.mark.parametrize(
    ("change", "cluster", "groups", "queues"),
    [
        # PCS cannot change a group's instance types: a new group under a new name, then the old one goes; the
        # queue keeps its name and moves to the new group in place.
        ("instance type", "same", {"gpu": "replace", "login": "update"}, {"gpu": "update"}),
        ("min and max counts", "same", {"gpu": "update", "login": "same"}, {"gpu": "same"}),
        # 42 nodes need a MEDIUM controller; PCS cannot resize one: a second cluster (no fixed name), its groups and
        # queues anew under the same names, which the new cluster does not hold yet.
        ("max count past 32 nodes", "replace", {"gpu": "replace", "login": "replace"}, {"gpu": "replace"}),
        ("AMI", "same", {"gpu": "update", "login": "update"}, {"gpu": "same"}),
        ("spot instead of on-demand", "same", {"gpu": "update", "login": "same"}, {"gpu": "same"}),
        (
            "a second group",
            "same",
            {"gpu": "update", "login": "update", "cpu": "create"},
            {"gpu": "same", "cpu": "create"},
        ),
        ("login instance type", "same", {"gpu": "update", "login": "replace"}, {"gpu": "same"}),
    ],
)
def test_each_pcs_change_updates_in_place_or_replaces_without_a_name_collision(
    pcs, change: str, cluster: str, groups: dict[str, str], queues: dict[str, str]
) -> None:
    actions = _pcs_actions(pcs, change)
    (cluster_action,) = actions["Cluster"].values()
    assert cluster_action == cluster
    assert actions["ComputeNodeGroup"] == groups
    assert actions["Queue"] == queues


def test_a_replaced_node_group_gets_a_new_name_and_its_queue_keeps_its_own(pcs) -> None:
    before, after = _compute(pcs["before"]), _compute(pcs["instance type"])
    old, new = _node_group(before, "gpu"), _node_group(after, "gpu")
    assert old["Name"] == node_group_name("gpu", ["g5.12xlarge"]) and new["Name"] == node_group_name(
        "gpu", ["g5.24xlarge"]
    )
    assert old["Name"] != new["Name"] and new["InstanceConfigs"] == [{"InstanceType": "g5.24xlarge"}]
    (queue,) = _of_type(after, "AWS::PCS::Queue").values()
    assert queue["Properties"]["Name"] == "gpu"


def test_scaling_ami_and_purchase_option_keep_the_group_and_its_name(pcs) -> None:
    before = _node_group(_compute(pcs["before"]), "gpu")
    for change, field, value in [
        ("min and max counts", "ScalingConfiguration", {"MinInstanceCount": 1, "MaxInstanceCount": 3}),
        ("AMI", "AmiId", "ami-0fedcba9876543210"),
        ("spot instead of on-demand", "PurchaseOption", "SPOT"),
    ]:
        after = _node_group(_compute(pcs[change]), "gpu")
        assert after["Name"] == before["Name"] and after[field] == value, change


def test_a_replaced_cluster_is_named_by_cloudformation(pcs) -> None:
    for data, size in ((pcs["before"], "SMALL"), (pcs["max count past 32 nodes"], "MEDIUM")):
        (cluster,) = _of_type(_compute(data), "AWS::PCS::Cluster").values()
        assert cluster["Properties"]["Size"] == size
        assert "Name" not in cluster["Properties"]


def test_the_old_fixed_group_name_is_caught_as_a_collision(pcs) -> None:
    # The check itself: with the name kiln used to give (the group's, fixed), the same change cannot deploy.
    before, after = _compute(pcs["before"]), _compute(pcs["instance type"])
    for template in (before, after):
        for resource in _of_type(template, "AWS::PCS::ComputeNodeGroup").values():
            resource["Properties"]["Name"] = resource["Properties"]["Name"].rsplit("-", 1)[0]
    result = plan({"compute": before}, {"compute": after})
    (kept,) = [r for r in result.replacements if r.refused]
    assert (kept.type, kept.custom_name, kept.because) == ("AWS::PCS::ComputeNodeGroup", "gpu", ("InstanceConfigs",))
    assert result.refused and [line for line in result.findings() if CUSTOM_NAME_RULE in line] == [kept.line()]


@pytest.mark.parametrize(
    ("resource_type", "service", "fact"),
    [
        ("AWS::PCS::Cluster", "pcs", "cluster_fixed"),
        ("AWS::PCS::ComputeNodeGroup", "pcs", "node_group_fixed"),
        ("AWS::PCS::Queue", "pcs", "queue_fixed"),
        ("AWS::SageMaker::Cluster", "hyperpod", "cluster_fixed"),
    ],
)
def test_the_create_only_properties_kiln_designs_around_are_cloudformations(
    resource_type: str, service: str, fact: str
) -> None:
    paths = [path.removeprefix("/properties/") for path in create_only(resource_type)]
    assert sorted(paths) == sorted(service_fact(service, fact).value)


HYPERPOD_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "more nodes": lambda d: _group(d).update(min_count=3, max_count=3),
    "a second group": lambda d: d["compute"]["groups"].append(
        {"name": "g5", "instance_type": "g5.12xlarge", "min_count": 1, "max_count": 1}
    ),
    # What the nodes run changes, nothing of the cluster's.
    "lifecycle scripts only": lambda d: d.update(launcher={"nccl_env": {"NCCL_DEBUG": "INFO"}}),
}


@pytest.fixture(scope="module")
def hyperpod() -> dict[str, dict[str, Any]]:
    """Return the specs: the HyperPod Slurm example (controller, login, two p5 nodes, Lustre), then each change."""
    base = example("p5-hyperpod-slurm")
    return {"before": base} | {change: _mutated(base, mutate) for change, mutate in HYPERPOD_CHANGES.items()}


@pytest.mark.parametrize(
    ("change", "cluster", "scripts"),
    [
        ("more nodes", "update", "same"),
        ("a second group", "update", "update"),
        ("lifecycle scripts only", "same", "update"),
    ],
)
def test_hyperpod_changes_update_the_cluster_in_place(hyperpod, change: str, cluster: str, scripts: str) -> None:
    actions = _deploys(hyperpod["before"], hyperpod[change])
    after = _compute(hyperpod[change])
    (cluster_id,) = _of_type(after, "AWS::SageMaker::Cluster")
    (deployment_id,) = _of_type(after, "Custom::CDKBucketDeployment")
    assert (actions[cluster_id], actions[deployment_id]) == (cluster, scripts)


def test_changed_scripts_leave_the_cluster_and_the_place_nodes_read_them_alone(hyperpod) -> None:
    # So CloudFormation calls no UpdateCluster and running nodes keep their scripts: `kiln hyperpod update-software`
    # finds the nodes that predate them.
    before, after = _compute(hyperpod["before"]), _compute(hyperpod["lifecycle scripts only"])
    (old,) = _of_type(before, "AWS::SageMaker::Cluster").values()
    (new,) = _of_type(after, "AWS::SageMaker::Cluster").values()
    assert old == new
    entry = {k: v["Value"] for k, v in after["Outputs"].items() if k.startswith("HyperPodLifecycleEntryPoint")}
    assert len(entry) == 1 and "on_create.sh" in str(entry)
    assert {k: v["Value"] for k, v in before["Outputs"].items() if k in entry} == entry


def test_dropping_lustre_on_hyperpod_is_refused_in_one_line_naming_the_cluster(hyperpod) -> None:
    # The nodes leave the file system's client group: VpcConfig is create-only, and the cluster's name is the
    # spec's, so CloudFormation would have to replace it under the name it holds. kiln diff refuses it first.
    without = {**hyperpod["before"], "storage": {"bucket": hyperpod["before"].get("storage", {}).get("bucket", {})}}
    assert_refused(hyperpod["before"], without, "(HyperPod cluster) would be replaced (VpcConfig is create-only)")


def test_fewer_hyperpod_nodes_or_a_group_removed_is_said_to_end_jobs(hyperpod) -> None:
    # The reverse of "more nodes" and "a second group": HyperPod terminates nodes of its choosing, draining nothing
    # (platforms.json hyperpod.scale_down), and kiln diff says so before the deploy.
    fewer = deploy_plan(hyperpod["more nodes"], hyperpod["before"])
    assert not fewer.refused
    [shrunk] = fewer.shrunk_groups
    assert shrunk.after is not None and shrunk.before is not None and shrunk.after < shrunk.before
    assert fewer.findings() == [shrunk.line()]
    removed = deploy_plan(hyperpod["a second group"], hyperpod["before"])
    assert [g.after for g in removed.shrunk_groups] == [None]
    assert removed.shrunk_groups[0].line() in removed.findings()
