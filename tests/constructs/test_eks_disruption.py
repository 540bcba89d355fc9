"""Node group updates do not kill training (issue 46, item 4): the cluster carries a disruption budget over kiln's
training pods, and every accelerated group rolls without surge and without force. The clusters are test_eks.py's,
synthesized once."""

from __future__ import annotations

import kubernetes_validate
import pytest

from kiln.catalog.kubernetes import JOB_NAMESPACE, TRAINING_POD_LABEL, kubernetes_fact
from kiln.catalog.platforms import service_fact
from kiln.constructs.eks_disruption import TRAINING_BUDGET_NAME, accelerated_update_config, training_budget_manifest
from tests.support.eks_clusters import _gpu_group, _manifest, _props


def _budgets(template) -> list[dict]:
    found = []
    for resource in template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = resource["Properties"]["Manifest"]
        if "PodDisruptionBudget" in str(manifest):
            found.append(resource)
    return found


def test_the_training_cluster_applies_one_budget_over_every_training_pod(eks) -> None:
    cluster = eks["cluster"]
    [budget] = _manifest(eks["template"], cluster.training_budget)
    kubernetes_validate.validate(budget, cluster.kubernetes_version, strict=True)
    assert budget["kind"] == "PodDisruptionBudget" and budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["name"] == TRAINING_BUDGET_NAME
    # The namespace `kiln job submit` puts its jobs in.
    assert budget["metadata"]["namespace"] == JOB_NAMESPACE
    spec = budget["spec"]
    assert spec["selector"] == {"matchLabels": TRAINING_POD_LABEL}
    # Pods of an operator take an integer minAvailable only (kubernetes.json, training_disruption_budget): one at
    # least the training pods that can run (a node each: 4 + 2 + 2) refuses every eviction of a running one.
    assert "maxUnavailable" not in spec
    assert spec["minAvailable"] == sum(g.max_count for g in eks["props"].accelerated_groups) == 8
    assert spec["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"
    assert len(_budgets(eks["template"])) == 1


def test_a_cluster_without_node_groups_has_no_budget(eks) -> None:
    # HyperPod's instance groups are no managed node groups: nothing rolls them through the eviction API (HyperPod's
    # UpdateClusterSoftware drains no pod, `kiln hyperpod update-software` says so).
    assert eks["orchestrator"].training_budget is None
    assert _budgets(eks["hp_template"]) == []


@pytest.mark.parametrize("group", ["p5", "spot", "odcr"])
def test_every_accelerated_group_rolls_one_node_at_a_time_without_surge_or_force(eks, group: str) -> None:
    props = _gpu_group(eks, group)
    capacity = next(g for g in eks["props"].accelerated_groups if g.name == group).capacity.type
    facts = service_fact("eks", "node_group_update_strategy").value
    assert props["UpdateConfig"] == {
        "MaxUnavailable": facts["max_unavailable"],
        "UpdateStrategy": facts["by_capacity"][capacity],
    }
    # MINIMAL terminates a node before it launches its replacement (EKS API reference, NodegroupUpdateConfig).
    assert props["UpdateConfig"]["UpdateStrategy"] == "MINIMAL"
    assert props["ForceUpdateEnabled"] is False


def test_the_system_group_keeps_eks_surge_default_and_is_never_forced_either(eks) -> None:
    props = _props(eks["template"], eks["cluster"].system_node_group.node.default_child)
    assert "UpdateStrategy" not in props.get("UpdateConfig", {})
    # CDK's node groups force their updates unless told otherwise; kiln never does (platforms.json,
    # eks.node_group_rolls).
    assert props["ForceUpdateEnabled"] is False


def test_the_budget_and_the_update_config_come_from_the_data() -> None:
    assert kubernetes_fact("training_disruption_budget").source.startswith("https://kubernetes.io/docs/")
    assert service_fact("eks", "node_group_update_strategy").source == (
        "https://docs.aws.amazon.com/eks/latest/APIReference/API_NodegroupUpdateConfig.html"
    )
    for capacity in ("on-demand", "spot", "capacity-block", "reservation"):
        assert accelerated_update_config(capacity)["UpdateStrategy"] in ("DEFAULT", "MINIMAL")
    with pytest.raises(ValueError, match="max_training_pods"):
        training_budget_manifest(0)


def test_every_node_group_runs_the_cluster_version(eks) -> None:
    # EKS upgrades a cluster only while each managed node group is at its version (platforms.json,
    # eks.node_group_version): a group pinned to the version it was made with would block the second upgrade.
    template = eks["template"]
    [cluster] = template.find_resources("AWS::EKS::Cluster").values()
    groups = template.find_resources("AWS::EKS::Nodegroup")
    assert len(groups) >= 2
    assert {name: g["Properties"].get("Version") for name, g in groups.items()} == dict.fromkeys(
        groups, cluster["Properties"]["Version"]
    )
    assert service_fact("eks", "node_group_version").source.endswith("API_UpdateClusterVersion.html")
