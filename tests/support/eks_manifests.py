"""EKS manifests validated against the Kubernetes schemas."""

from __future__ import annotations

import json

from aws_cdk.assertions import Template

from kiln.constructs.eks import EksTrainingCluster
from tests.support.eks_clusters import (
    _text,
)
from tests.support.kueue_schema import check_kueue_objects


def validate_manifests(clusters: list[tuple[Template, EksTrainingCluster]]) -> set[str]:
    """Check each object of every manifest resource of CLUSTERS against Kubernetes's own OpenAPI schema for its
    cluster's version (kubernetes-validate, strict: no unknown field), and Kueue's objects against the constraints of
    Kueue's CRDs (check_kueue_objects: no registry this project reaches ships their schema); return the kinds."""
    import kubernetes_validate

    kinds = set()
    for template, cluster in clusters:
        version = cluster.kubernetes_version
        kueue = []
        for resource in template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values():
            for manifest in json.loads(_text(resource["Properties"]["Manifest"])):
                if manifest["apiVersion"].startswith("kueue.x-k8s.io/"):
                    kueue.append(manifest)
                else:
                    kubernetes_validate.validate(manifest, version, strict=True)
                kinds.add(manifest["kind"])
        check_kueue_objects(kueue, version)
    return kinds
