"""Which Kubernetes versions each EKS-based backend runs: the platform's supported minors (platforms.json) that kiln
can drive, that is for which kiln ships the kubectl/helm Lambda layer CDK's kubectl handler needs. Stdlib only."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from kiln.catalog.facts import instance_type
from kiln.catalog.platforms import Fact, image_profile, service_fact, version_key

# What kiln runs from upstream Kubernetes projects rather than AWS (the training operator's bundle, the tools of
# install Jobs), with the upstream repository or page each fact comes from.
KUBERNETES_PATH = Path(__file__).parent / "data" / "kubernetes.json"

# The minors kiln has a kubectl layer for (pyproject.toml: aws-cdk.lambda-layer-kubectl-vNN) and the kubectl patch
# release each layer carries (KUBECTL_VERSION in the layer package's layer/Dockerfile): install Jobs and the second
# kube-scheduler run that release, so they match the control plane.
KUBECTL_RELEASES = {"1.34": "1.34.5", "1.35": "1.35.2", "1.36": "1.36.3"}


@cache
def kubernetes_fact(key: str) -> Fact:
    """Return fact KEY of kubernetes.json (KeyError for one it does not hold)."""
    raw = json.loads(KUBERNETES_PATH.read_text())[key]
    return Fact(value=raw["value"], source=raw["source"], note=raw.get("note", ""))


def _hyperpod_version_sources() -> list[dict]:
    """The AWS pages that list HyperPod on EKS's Kubernetes versions, each {"versions", "source"}."""
    return list(image_profile("hyperpod-eks").fact("kubernetes_versions").value.values())


def platform_kubernetes_versions(backend: str) -> tuple[str, ...]:
    """Return the minors BACKEND's platform supports: EKS's standard support, or for HyperPod those every page of
    AWS's that lists HyperPod's versions names (its AMI releases, its EKS prerequisites)."""
    if backend == "hyperpod":
        [first, *others] = [page["versions"] for page in _hyperpod_version_sources()]
        return tuple(v for v in first if all(v in versions for versions in others))
    return tuple(service_fact("eks", "kubernetes_versions").value)


def kubernetes_versions(backend: str) -> tuple[str, ...]:
    """Return the minors kiln runs on BACKEND (eks, or hyperpod orchestrated by EKS), oldest first."""
    offered = [v for v in platform_kubernetes_versions(backend) if v in KUBECTL_RELEASES]
    return tuple(sorted(offered, key=version_key))


def default_kubernetes_version(backend: str) -> str:
    """Return the newest minor kiln runs on BACKEND."""
    return kubernetes_versions(backend)[-1]


def kubernetes_source(backend: str) -> str:
    """Return the AWS page (or pages) that list BACKEND's supported versions."""
    if backend == "hyperpod":
        return " and ".join(page["source"] for page in _hyperpod_version_sources())
    return service_fact("eks", "kubernetes_versions").source


# Names kiln gives Kubernetes objects, labels and resources: written once for the constructs that create them and
# the commands that use them (`kiln job`, `kiln ci`).
# Every node of a kiln node group (or a HyperPod instance group) carries its group's name.
NODE_GROUP_LABEL = "kiln.io/node-group"
# Pods opt into the Neuron-aware scheduler with this schedulerName: the one AWS's Neuron docs use, so their pod
# examples run unchanged (kiln.constructs.neuron_addons).
NEURON_SCHEDULER_NAME = "my-scheduler"
# Extended resources the device plugins advertise: NVIDIA's (GPUs), Neuron's (whole devices; Neuron docs, "Neuron
# device plugin"), and the EFA plugin's (interfaces; EKS User Guide, "Run machine learning training on Amazon EKS
# with Elastic Fabric Adapter").
GPU_RESOURCE = "nvidia.com/gpu"
NEURON_DEVICE_RESOURCE = "aws.amazon.com/neuron"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# The claim of kiln's FSx for Lustre file system, and the namespace of it and of the jobs that mount it.
JOB_NAMESPACE = "default"
LUSTRE_CLAIM = "fsx-claim"
# Kueue: the label that puts a job in a queue, and the queue kiln creates (a LocalQueue in JOB_NAMESPACE, over a
# ClusterQueue of the same name).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
JOB_QUEUE = "kiln"
# Every training pod kiln makes (`kiln job submit`) carries this label; the disruption budget in JOB_NAMESPACE selects
# by it (kiln.constructs.eks_disruption), so a node roll never evicts a running training pod. A pod of your own gets
# the same protection with the same label.
TRAINING_POD_LABEL = {"kiln.io/workload": "training"}


def node_resources(instance: str) -> dict[str, int]:
    """Return the extended resources a node of type INSTANCE offers pods: its GPUs or Neuron devices, and its EFA
    interfaces (one per EFA-capable network card, as kiln's launch templates attach them)."""
    facts = instance_type(instance)
    resources: dict[str, int] = {}
    if facts.gpu_count:
        resources[GPU_RESOURCE] = facts.gpu_count
    if facts.neuron_count:
        resources[NEURON_DEVICE_RESOURCE] = facts.neuron_count
    if facts.efa_interface_count:
        resources[EFA_RESOURCE] = facts.efa_interface_count
    return resources
