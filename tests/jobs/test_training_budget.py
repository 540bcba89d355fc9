"""Every training pod `kiln job submit` makes is one the cluster's disruption budget protects: same namespace, labels
its selector matches, in every replica; and the budget, as the disruption controller counts it, allows no eviction of
a running one however many run (issue 46, item 4)."""

from __future__ import annotations

import pytest

from kiln.catalog.kubernetes import TRAINING_POD_LABEL
from kiln.constructs.eks_disruption import training_budget_manifest
from kiln.jobs.pytorchjob import JobRequest, cluster_facts, job_manifests
from kiln.spec import load_spec
from tests.support.jobs import EXAMPLES, IMAGE


def _selected(budget: dict, labels: dict[str, str]) -> bool:
    return budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def _disruptions_allowed(budget: dict, healthy: int) -> int:
    """Return what the disruption controller allows for an integer minAvailable: healthy - minAvailable, at least 0
    (kubernetes/kubernetes pkg/controller/disruption/disruption.go)."""
    return max(0, healthy - budget["spec"]["minAvailable"])


@pytest.mark.parametrize("example", ["p5-eks.yaml", "trn1-eks.yaml"])
def test_every_pod_of_a_job_is_selected_by_the_clusters_budget(script, wheel, example) -> None:
    spec = load_spec(EXAMPLES / example)
    facts = cluster_facts(spec)
    budget = training_budget_manifest(sum(g.max_count for g in spec.compute.groups))
    nodes = max(max_nodes for _, max_nodes in facts.groups.values())
    _, job = job_manifests(JobRequest(script=script, image=IMAGE, name="llm", nodes=nodes), facts, wheel)
    assert job["metadata"]["namespace"] == budget["metadata"]["namespace"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == ({"Master", "Worker"} if nodes > 1 else {"Master"})
    for replica in replicas.values():
        labels = replica["template"]["metadata"]["labels"]
        assert _selected(budget, labels), labels
        assert TRAINING_POD_LABEL.items() <= labels.items()
    # However many training pods run (one per node, up to every node of every group), none may be evicted.
    for healthy in range(1, budget["spec"]["minAvailable"] + 1):
        assert _disruptions_allowed(budget, healthy) == 0
