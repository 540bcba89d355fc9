"""Kueue's objects against the constraints its CRDs declare (kueue v0.19.2, config/components/crd/bases), checked
field by field: no package of the registries this project reaches ships Kueue's schema or a client of its types."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from kubernetes.utils import parse_quantity

from kiln.constructs.eks_scheduling import KUEUE_FACTS

FIELDS = {
    "ResourceFlavor": {"nodeLabels", "nodeTaints", "tolerations", "topologyName"},
    "ClusterQueue": {"namespaceSelector", "resourceGroups", "cohortName", "queueingStrategy", "stopPolicy"},
    "LocalQueue": {"clusterQueue", "stopPolicy"},
}
# ResourceFlavor nodeLabels: maxProperties 8; resourceGroups: at most 16, each 1-64 resources and flavors.
MAX_NODE_LABELS, MAX_RESOURCE_GROUPS, MAX_PER_GROUP = 8, 16, 64


def check_kueue_objects(objects: list[dict[str, Any]], kubernetes_version: str) -> None:
    """Raise AssertionError for a Kueue object its CRD would refuse, or a queue that could never admit a job."""
    queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}
    flavors = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"}
    for obj in objects:
        kind = obj["kind"]
        assert obj["apiVersion"] == KUEUE_FACTS["api_version"], obj["apiVersion"]
        assert kind in FIELDS, kind
        assert set(obj) <= {"apiVersion", "kind", "metadata", "spec"}, sorted(obj)
        # Object metadata as Kubernetes checks it (names, labels).
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, kubernetes_version, strict=True
        )
        spec = obj["spec"]
        assert set(spec) <= FIELDS[kind], sorted(set(spec) - FIELDS[kind])
        if kind == "ResourceFlavor":
            assert 0 < len(spec["nodeLabels"]) <= MAX_NODE_LABELS
        elif kind == "ClusterQueue":
            # null selects no namespace; {} selects all.
            assert spec["namespaceSelector"] == {}
            groups = spec["resourceGroups"]
            assert 1 <= len(groups) <= MAX_RESOURCE_GROUPS
            for group in groups:
                covered = group["coveredResources"]
                assert 1 <= len(covered) <= MAX_PER_GROUP and len(set(covered)) == len(covered)
                assert 1 <= len(group["flavors"]) <= MAX_PER_GROUP
                for flavor in group["flavors"]:
                    assert flavor["name"] in flavors, f"flavor {flavor['name']} has no ResourceFlavor"
                    # Every flavor names every covered resource, in coveredResources' order.
                    assert [r["name"] for r in flavor["resources"]] == covered
                    for resource in flavor["resources"]:
                        assert set(resource) == {"name", "nominalQuota"}
                        assert parse_quantity(resource["nominalQuota"]) >= 0
        else:
            assert obj["metadata"].get("namespace"), "a LocalQueue is namespaced"
            assert spec["clusterQueue"] in queues, f"LocalQueue names no ClusterQueue {spec['clusterQueue']}"
