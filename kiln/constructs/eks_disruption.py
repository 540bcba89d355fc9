"""What keeps a node group update from killing training on EKS: a disruption budget over kiln's training pods, and how
each accelerated node group replaces its nodes.

A change to the launch template (pins, `launcher.env`, bootstrap steps) makes EKS roll every node of a group: it
drains each node through the eviction API, which honours PodDisruptionBudgets, and fails the update (CloudFormation
rolls the deploy back) when a node's pods do not leave within 15 minutes; kiln never forces it (platforms.json,
eks.node_group_rolls). Without a budget the drain evicts a running job's pods. The budget here refuses every eviction
of a running training pod, so the roll takes the idle nodes and stops at a busy one: the user waits for the job (or
stops it) and deploys again. Facts and sources: kubernetes.json training_disruption_budget, platforms.json
eks.node_group_update_strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.catalog.kubernetes import JOB_NAMESPACE, TRAINING_POD_LABEL, kubernetes_fact
from kiln.catalog.platforms import service_fact
from kiln.constructs._checks import PropError
from kiln.constructs.eks_addons import kiln_labels

BUDGET_FACTS: Mapping[str, Any] = kubernetes_fact("training_disruption_budget").value
UPDATE_STRATEGY_FACTS: Mapping[str, Any] = service_fact("eks", "node_group_update_strategy").value
TRAINING_BUDGET_NAME = "kiln-training"


def training_budget_manifest(max_training_pods: int, namespace: str = JOB_NAMESPACE) -> dict[str, Any]:
    """Return the PodDisruptionBudget that refuses to evict any running training pod (TRAINING_POD_LABEL) in
    NAMESPACE, where at most MAX_TRAINING_PODS of them can run at once (one per accelerated node).

    An integer minAvailable, the only kind a budget over an operator's pods takes: the disruption controller then
    allows healthy - minAvailable evictions, none while minAvailable is at least the pods that can run."""
    if max_training_pods < 1:
        raise PropError(f"max_training_pods: got {max_training_pods}; allowed: 1 or more")
    return {
        "apiVersion": BUDGET_FACTS["api_version"],
        "kind": "PodDisruptionBudget",
        "metadata": {"name": TRAINING_BUDGET_NAME, "namespace": namespace, "labels": kiln_labels("training-budget")},
        "spec": {
            BUDGET_FACTS["budget_field"]: max_training_pods,
            "selector": {"matchLabels": dict(TRAINING_POD_LABEL)},
            "unhealthyPodEvictionPolicy": BUDGET_FACTS["healthy_pod_policy"],
        },
    }


def accelerated_update_config(capacity_type: str) -> dict[str, Any]:
    """Return the AWS::EKS::Nodegroup UpdateConfig of an accelerated group of CAPACITY_TYPE (kiln's words: on-demand,
    spot, capacity-block, reservation): how many nodes a roll takes out at once, and no surge beyond the group."""
    return {
        "MaxUnavailable": UPDATE_STRATEGY_FACTS["max_unavailable"],
        "UpdateStrategy": UPDATE_STRATEGY_FACTS["by_capacity"][capacity_type],
    }
