"""What lets an EKS cluster's accelerated node groups run multi-node jobs: the Kubernetes cluster-autoscaler scales
them for pending pods (from zero, and back down when idle), and Kueue admits a job only when all of its pods fit.

Why these two (docs/design.md, "EKS: scale and gang scheduling"):
- cluster-autoscaler, not Karpenter: it scales the managed node groups kiln already builds, each with its EFA launch
  template, placement group and capacity reservation, unchanged; Karpenter takes no custom launch template.
- Kueue, not Volcano: it only decides when a job's pods may be created (all at once, within quota), so pods keep
  their scheduler (Neuron pods need the Neuron-aware one); the training operator needs no gang flag; and SageMaker
  HyperPod's task governance is built on the same Kueue release.

Both facts and pins come from platforms.json (services.eks.cluster_autoscaler, services.eks.kueue), with sources.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from kiln.catalog import instance_type
from kiln.catalog.kubernetes import (
    JOB_NAMESPACE,
    JOB_QUEUE,
    NODE_GROUP_LABEL,
    node_resources,
)
from kiln.catalog.platforms import service_fact
from kiln.constructs import acknowledgements
from kiln.constructs.eks_addons import ALWAYS, GitHelmAddon, HelmAddon, PodIdentity, kiln_labels
from kiln.constructs.eks_install_wait import install_chart_and_wait
from kiln.constructs.review import acknowledge_wildcards

if TYPE_CHECKING:
    from kiln.constructs.eks import EksTrainingCluster

CLUSTER_AUTOSCALER_FACTS: Mapping[str, Any] = service_fact("eks", "cluster_autoscaler").value
KUEUE_FACTS: Mapping[str, Any] = service_fact("eks", "kueue").value
AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
# How long Kueue waits, beyond the nodes' provisioning, for a job's pods to pull their images and start (training
# images run to tens of GB); kiln's estimate, not an AWS figure.
IMAGE_PULL_SECONDS = 900
# The Kueue manager's settings kiln keeps as the chart's default configuration has them (charts/kueue/values.yaml
# at the pinned tag): it replaces the whole configuration string, so it writes them again.
_KUEUE_BASE_CONFIG = {
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
}


@dataclass(frozen=True, kw_only=True)
class QueuedGroup:
    """A node group as Kueue sees it: its nodes' label value, instance type and how many nodes it scales to."""

    name: str
    instance_type: str
    max_count: int


def cluster_autoscaler_addon(
    *, cluster_name: str, region: str, kubernetes_version: str, provision_seconds: int, node_selector: Mapping[str, str]
) -> HelmAddon:
    """Return the cluster-autoscaler chart for one cluster: auto-discovery of its managed node groups (EKS tags
    their Auto Scaling groups itself), the CA release of the cluster's minor, on the system nodes."""
    facts = CLUSTER_AUTOSCALER_FACTS
    return HelmAddon(
        chart=facts["chart"],
        repository=facts["repository"],
        version=facts["version"],
        namespace=AUTOSCALER_NAMESPACE,
        release="cluster-autoscaler",
        values={
            "cloudProvider": "aws",
            # Pod Identity sets no AWS_REGION; the chart turns this into it.
            "awsRegion": region,
            "autoDiscovery": {"clusterName": cluster_name},
            "image": {"repository": facts["image_repository"], "tag": facts["images"][kubernetes_version]},
            # The association names this account: the chart's default name follows the release.
            "rbac": {"serviceAccount": {"create": True, "name": AUTOSCALER_SERVICE_ACCOUNT}},
            "nodeSelector": dict(node_selector),
            "extraArgs": {
                # A node that boots kiln's bundle takes longer than CA's default 15 minutes to become ready.
                "max-node-provision-time": f"{provision_seconds}s",
                # A finished job's memory-backed /dev/shm (an emptyDir) must not keep a GPU node up.
                "skip-nodes-with-local-storage": False,
                "expander": "least-waste",
            },
        },
    )


def node_template_tags(instance: str) -> dict[str, str]:
    """Return the node group tags that tell the cluster-autoscaler what a node of INSTANCE offers before one exists
    (scale from zero): every extended resource, since the EC2 data it reads knows only GPUs."""
    prefix = CLUSTER_AUTOSCALER_FACTS["template_resource_tag_prefix"]
    return {f"{prefix}{name}": str(count) for name, count in node_resources(instance).items()}


def autoscaler_owned_tag(cluster_name: str) -> str:
    """Return the tag key EKS puts (value `owned`) on the Auto Scaling groups of CLUSTER_NAME's managed node groups."""
    return f"{CLUSTER_AUTOSCALER_FACTS['owned_tag_prefix']}{cluster_name}"


def kueue_addon(*, pods_ready_seconds: int, node_selector: Mapping[str, str]) -> GitHelmAddon:
    """Return Kueue's chart at its pinned commit, with the release image, the PyTorchJob integration, and
    all-or-nothing start: a job whose pods are not running within PODS_READY_SECONDS is evicted and requeued."""
    facts = KUEUE_FACTS
    config = {
        "apiVersion": facts["config_api_version"],
        "kind": "Configuration",
        **_KUEUE_BASE_CONFIG,
        "waitForPodsReady": {
            "timeout": f"{pods_ready_seconds}s",
            # One job at a time waits for its pods: two half-started jobs never hold each other's nodes.
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        "integrations": {"frameworks": list(facts["frameworks"])},
    }
    manager = {
        "image": {"repository": facts["image_repository"], "tag": facts["tag"], "pullPolicy": "IfNotPresent"},
    }
    return GitHelmAddon(
        name="kueue",
        repository=facts["repository"],
        tag=facts["tag"],
        commit=facts["commit"],
        path=facts["path"],
        release=facts["release"],
        namespace=facts["namespace"],
        settings={},
        crds={ALWAYS: tuple(facts["crds"])},
        # YAML is a superset of JSON: the configuration string is its JSON text.
        json_settings={
            "controllerManager.manager": manager,
            "controllerManager.nodeSelector": dict(node_selector),
            "managerConfig.controllerManagerConfigYaml": json.dumps(config, sort_keys=True),
        },
    )


def queue_manifests(groups: Sequence[QueuedGroup]) -> list[dict[str, Any]]:
    """Return Kueue's objects for GROUPS: a ResourceFlavor per group (its nodes' label), one ClusterQueue whose
    quota per flavor is what the group has at its largest, and the LocalQueue jobs name (JOB_QUEUE in JOB_NAMESPACE).

    Kueue admits a job only when every pod's requests fit one flavor's remaining quota, so a job larger than its group
    can ever be waits, visibly, instead of starting half its pods. Every resource a pod may request is covered (Kueue
    refuses a job asking for an uncovered one): CPU, memory, and the groups' accelerators and EFA interfaces.
    """
    api = KUEUE_FACTS["api_version"]
    labels = kiln_labels("kueue-queues")
    quotas = {group.name: _group_quota(group) for group in groups}
    covered = ["cpu", "memory"] + sorted({name for quota in quotas.values() for name in quota} - {"cpu", "memory"})
    flavors = [
        {
            "apiVersion": api,
            "kind": "ResourceFlavor",
            "metadata": {"name": group.name, "labels": labels},
            "spec": {"nodeLabels": {NODE_GROUP_LABEL: group.name}},
        }
        for group in groups
    ]
    cluster_queue = {
        "apiVersion": api,
        "kind": "ClusterQueue",
        "metadata": {"name": JOB_QUEUE, "labels": labels},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": covered,
                    "flavors": [
                        {
                            "name": group.name,
                            "resources": [
                                {"name": name, "nominalQuota": quotas[group.name].get(name, "0")} for name in covered
                            ],
                        }
                        for group in groups
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": api,
        "kind": "LocalQueue",
        "metadata": {"name": JOB_QUEUE, "namespace": JOB_NAMESPACE, "labels": labels},
        "spec": {"clusterQueue": JOB_QUEUE},
    }
    return [*flavors, cluster_queue, local_queue]


def _group_quota(group: QueuedGroup) -> dict[str, str]:
    facts = instance_type(group.instance_type)
    quota = {
        "cpu": str(facts.vcpus * group.max_count),
        "memory": f"{facts.memory_mib * group.max_count}Mi",
    }
    quota.update({name: str(count * group.max_count) for name, count in node_resources(group.instance_type).items()})
    return quota


def add_cluster_autoscaler(training: EksTrainingCluster, *, cluster_name: str, provision_seconds: int) -> iam.Role:
    """Run the cluster-autoscaler on TRAINING's system nodes with a Pod Identity role of exactly its actions: reads
    where they take no resource scope, the node groups of this cluster, and scaling only of the Auto Scaling groups EKS
    tags as this cluster's. CLUSTER_NAME: the cluster's name as its props give it (a condition key cannot hold a
    token); PROVISION_SECONDS: how long a new node may take to become ready."""
    facts = CLUSTER_AUTOSCALER_FACTS
    stack = Stack.of(training)
    name = training.cluster.cluster_name
    owned = {f"aws:ResourceTag/{autoscaler_owned_tag(cluster_name)}": facts["owned_tag_value"]}
    statements = [
        iam.PolicyStatement(actions=list(facts["describe_actions"]), resources=["*"]),
        iam.PolicyStatement(
            actions=list(facts["nodegroup_actions"]),
            resources=[stack.format_arn(service="eks", resource="nodegroup", resource_name=f"{name}/*/*")],
        ),
        iam.PolicyStatement(actions=list(facts["scale_actions"]), resources=["*"], conditions={"StringEquals": owned}),
    ]
    identity = PodIdentity(namespace=AUTOSCALER_NAMESPACE, service_account=AUTOSCALER_SERVICE_ACCOUNT)
    role, association = training.add_pod_identity("ClusterAutoscaler", identity, statements=statements)
    addon = cluster_autoscaler_addon(
        cluster_name=name,
        region=stack.region,
        kubernetes_version=training.kubernetes_version,
        provision_seconds=provision_seconds,
        node_selector=training.system_node_selector,
    )
    chart = training.add_helm_chart("ClusterAutoscaler", addon)
    # Credentials are injected when the pod is created: the association must be there first.
    chart.node.add_dependency(association, training.pod_identity_agent)
    training.addons["cluster-autoscaler"] = chart
    acknowledge_wildcards(role, acknowledgements.CLUSTER_AUTOSCALER_GRANTS, cluster=name)
    return role


def add_gang_scheduling(
    training: EksTrainingCluster, groups: Sequence[QueuedGroup], *, provision_seconds: int
) -> eks.KubernetesManifest:
    """Install Kueue on TRAINING's system nodes, then its queues over GROUPS once its API is there; a job's pods may
    take PROVISION_SECONDS for their nodes and IMAGE_PULL_SECONDS more to be ready."""
    addon = kueue_addon(
        pods_ready_seconds=provision_seconds + IMAGE_PULL_SECONDS, node_selector=training.system_node_selector
    )
    ready = install_chart_and_wait(training, addon, "KueueReady")
    queues = training.add_manifest("KueueQueues", *queue_manifests(groups))
    queues.node.add_dependency(ready)
    return queues
