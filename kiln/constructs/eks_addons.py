"""What EksTrainingCluster installs, pinned in one place: Kubernetes + kubectl layer, charts, manifests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct


@dataclass(frozen=True, kw_only=True)
class KubernetesRelease:
    """An EKS Kubernetes version and the kubectl/helm Lambda layer built for it."""

    version: eks.KubernetesVersion
    kubectl_layer: Callable[[Construct, str], lambda_.ILayerVersion]


# One entry per Kubernetes minor kiln can drive: the kubectl layer must match the control plane
# (aws-cdk.lambda-layer-kubectl-vNN on PyPI). Add a row together with its layer package.
KUBERNETES_RELEASES: dict[str, KubernetesRelease] = {
    "1.36": KubernetesRelease(version=eks.KubernetesVersion.V1_36, kubectl_layer=KubectlV36Layer),
}
DEFAULT_KUBERNETES_VERSION = "1.36"


@dataclass(frozen=True, kw_only=True)
class HelmAddon:
    """An add-on installed from a Helm repository at a pinned chart version."""

    chart: str
    repository: str
    version: str
    namespace: str
    release: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class KustomizeAddon:
    """An add-on published only as a kustomize bundle at a git tag; a Job in the cluster applies it."""

    name: str
    repository: str
    ref: str
    path: str
    git_image: str
    kubectl_image: str
    namespace: str


# Device plugins and the Lustre node driver run on every node, tainted or not (GPU, HyperPod).
TOLERATE_EVERYTHING = [{"operator": "Exists"}]

NVIDIA_DEVICE_PLUGIN = HelmAddon(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.19.3",
    namespace="kube-system",
    release="nvidia-device-plugin",
    values={"tolerations": TOLERATE_EVERYTHING},
)
# The eks-charts repository versions this chart with a leading "v".
EFA_DEVICE_PLUGIN = HelmAddon(
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    version="v0.5.29",
    namespace="kube-system",
    release="aws-efa-k8s-device-plugin",
    values={"tolerations": TOLERATE_EVERYTHING},
)
FSX_CSI_DRIVER = HelmAddon(
    chart="aws-fsx-csi-driver",
    repository="https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
    version="1.17.0",
    namespace="kube-system",
    release="aws-fsx-csi-driver",
    values={"node": {"tolerateAllTaints": True}},
)
# The v1 training operator (PyTorchJob) has no official chart; its release tag carries the
# kustomize bundle. Synth stays offline: the cluster fetches the tag when the Job runs.
TRAINING_OPERATOR = KustomizeAddon(
    name="training-operator",
    repository="https://github.com/kubeflow/trainer.git",
    ref="v1.9.3",
    path="manifests/overlays/standalone",
    git_image="docker.io/alpine/git:2.45.2",
    kubectl_image="registry.k8s.io/kubectl:v1.36.3",
    namespace="kube-system",
)
HELM_ADDONS: dict[str, HelmAddon] = {
    "nvidia-device-plugin": NVIDIA_DEVICE_PLUGIN,
    "efa-device-plugin": EFA_DEVICE_PLUGIN,
    "fsx-csi-driver": FSX_CSI_DRIVER,
}

# GPU nodes carry this label so the NVIDIA plugin's default node affinity selects them without NFD.
GPU_PRESENT_LABEL = {"nvidia.com/gpu.present": "true"}
FSX_CSI_DRIVER_NAME = "fsx.csi.aws.com"
# Namespaces every cluster has: never created (or pruned) by kiln.
BUILTIN_NAMESPACES = ("default", "kube-system")


def _job_name(addon: KustomizeAddon) -> str:
    # A Job's pod template is immutable: a new ref gets a new Job instead of a failed update.
    return f"kiln-install-{addon.name}-{addon.ref.replace('.', '-')}"[:63]


def kustomize_job_manifests(addon: KustomizeAddon) -> list[dict[str, Any]]:
    """Return a service account, its binding and the Job that applies ADDON's bundle server-side."""
    account = f"kiln-install-{addon.name}"
    labels = {"app.kubernetes.io/name": account, "app.kubernetes.io/managed-by": "kiln"}
    source = "/src"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": addon.namespace, "labels": labels},
        },
        {
            # The bundle creates CRDs, cluster roles and webhooks: only cluster-admin may grant what it grants.
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": account, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": addon.namespace}],
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": _job_name(addon), "namespace": addon.namespace, "labels": labels},
            "spec": {
                "backoffLimit": 10,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account,
                        "restartPolicy": "OnFailure",
                        "tolerations": TOLERATE_EVERYTHING,
                        "volumes": [{"name": "source", "emptyDir": {}}],
                        "initContainers": [
                            {
                                "name": "fetch",
                                "image": addon.git_image,
                                "args": ["clone", "--depth", "1", "--branch", addon.ref, addon.repository, source],
                                "volumeMounts": [{"name": "source", "mountPath": source}],
                            }
                        ],
                        "containers": [
                            {
                                "name": "apply",
                                "image": addon.kubectl_image,
                                # Server-side: the CRDs are too large for client-side apply's annotation.
                                "args": ["apply", "--server-side", "--force-conflicts", "-k", f"{source}/{addon.path}"],
                                "volumeMounts": [{"name": "source", "mountPath": source, "readOnly": True}],
                            }
                        ],
                    },
                },
            },
        },
    ]


@dataclass(frozen=True, kw_only=True)
class LustreVolumeNames:
    """Kubernetes names of the FSx for Lustre StorageClass, PersistentVolume and claim."""

    storage_class: str
    volume: str
    claim: str
    namespace: str


def lustre_volume_manifests(
    names: LustreVolumeNames, *, file_system_id: str, dns_name: str, mount_name: str, storage_gib: int
) -> list[dict[str, Any]]:
    """Return a StorageClass, a PV statically bound to the file system and the PVC that claims it."""
    size = f"{storage_gib}Gi"
    namespace = (
        []
        if names.namespace in BUILTIN_NAMESPACES
        else [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names.namespace}}]
    )
    return namespace + [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": names.storage_class},
            "provisioner": FSX_CSI_DRIVER_NAME,
            # The file system outlives the cluster (kiln's storage stack owns it).
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": names.volume},
            "spec": {
                "capacity": {"storage": size},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": names.storage_class,
                "mountOptions": ["flock"],
                "claimRef": {"namespace": names.namespace, "name": names.claim},
                "csi": {
                    "driver": FSX_CSI_DRIVER_NAME,
                    "volumeHandle": file_system_id,
                    "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.claim, "namespace": names.namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": names.storage_class,
                "volumeName": names.volume,
                "resources": {"requests": {"storage": size}},
            },
        },
    ]
