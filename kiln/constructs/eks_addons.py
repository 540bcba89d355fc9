"""What EksTrainingCluster installs, pinned in one place: Kubernetes + kubectl layer, charts, manifests."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct

from kiln.catalog import InstanceType, instance_type, known_instance_types
from kiln.catalog.kubernetes import KUBECTL_RELEASES, kubernetes_fact
from kiln.catalog.platforms import service_fact

# The accelerators kiln's nodes carry, named as kiln.catalog's InstanceType.accelerator_kind names them.
AcceleratorKind = Literal["gpu", "neuron"]


@dataclass(frozen=True, kw_only=True)
class KubernetesRelease:
    """An EKS Kubernetes version, the kubectl/helm Lambda layer built for it, and its kube-scheduler image."""

    version: eks.KubernetesVersion
    kubectl_layer: Callable[[Construct, str], lambda_.ILayerVersion]
    kube_scheduler_image: str


# One entry per Kubernetes minor kiln can drive: the kubectl layer must match the control plane
# (aws-cdk.lambda-layer-kubectl-vNN on PyPI), and so must the second kube-scheduler that Neuron pods opt into
# (a scheduler of another minor may not understand the API server's objects). Add a row together with its layer
# package. The scheduler is the patch release the layer's kubectl comes from (kiln.catalog.kubernetes); pinned by
# tag: no promoted digest of these releases was at hand (the scheduler runs with its own, non-admin, account).
KUBERNETES_RELEASES: dict[str, KubernetesRelease] = {
    # HyperPod on EKS: the newest minor every AWS page on HyperPod's versions lists (kiln.catalog.kubernetes).
    "1.34": KubernetesRelease(
        version=eks.KubernetesVersion.V1_34,
        kubectl_layer=KubectlV34Layer,
        kube_scheduler_image=f"registry.k8s.io/kube-scheduler:v{KUBECTL_RELEASES['1.34']}",
    ),
    "1.35": KubernetesRelease(
        version=eks.KubernetesVersion.V1_35,
        kubectl_layer=KubectlV35Layer,
        kube_scheduler_image=f"registry.k8s.io/kube-scheduler:v{KUBECTL_RELEASES['1.35']}",
    ),
    "1.36": KubernetesRelease(
        version=eks.KubernetesVersion.V1_36,
        kubectl_layer=KubectlV36Layer,
        kube_scheduler_image=f"registry.k8s.io/kube-scheduler:v{KUBECTL_RELEASES['1.36']}",
    ),
}
# The newest minor of the table: what a cluster runs unless its props say otherwise (kiln.catalog.kubernetes
# decides per backend).
DEFAULT_KUBERNETES_VERSION = "1.36"


@dataclass(frozen=True, kw_only=True)
class HelmAddon:
    """An add-on installed from a Helm repository at a pinned chart version.

    accelerator: install it only on clusters with nodes of this accelerator kind; default None (always).
    """

    chart: str
    repository: str
    version: str
    namespace: str
    release: str
    values: Mapping[str, Any] = field(default_factory=dict)
    accelerator: AcceleratorKind | None = None


# The key of GitHelmAddon.crds for CRDs a chart applies whatever its values.
ALWAYS = ""


@dataclass(frozen=True, kw_only=True)
class GitHelmAddon:
    """A Helm chart published only in a Git repository, installed at a release tag whose commit is checked: a Job in
    the cluster clones the tag, refuses any other commit, fetches the chart's dependencies and installs it (with the
    checked tools of install_tools).

    settings: `--set` values, on top of the chart's defaults; region_setting: the value the region (a token) is
        given as at install, if any. json_settings: `--set-json` values (whole strings or structures: a comma in
        them is no separator). namespace: the release's; the install Job itself runs in kube-system.
    """

    name: str
    repository: str
    tag: str
    commit: str
    path: str
    release: str
    namespace: str
    settings: Mapping[str, str]
    region_setting: str | None = None
    json_settings: Mapping[str, Any] = field(default_factory=dict)
    crds: Mapping[str, Sequence[str]] = field(default_factory=dict)
    switch_defaults: Mapping[str, bool] = field(default_factory=dict)

    def installed_crds(self) -> frozenset[str]:
        """Return the CRDs the chart installs with these settings: crds holds them by the boolean value that
        switches their subchart on (ALWAYS for those the chart applies unconditionally), switch_defaults that
        value's default in the chart."""
        names: set[str] = set()
        for switch, crds in self.crds.items():
            on = switch == ALWAYS or self.settings.get(switch, str(self.switch_defaults[switch]).lower()) == "true"
            if on:
                names.update(crds)
        return frozenset(names)


@dataclass(frozen=True, kw_only=True)
class KustomizeController:
    """The controller of a kustomize bundle's kinds: its Deployment and container, and the flag (repeated, one kind
    each) that starts only the named kinds' controllers."""

    deployment: str
    container: str
    kind_flag: str


@dataclass(frozen=True, kw_only=True)
class KustomizeAddon:
    """An add-on published only as a kustomize bundle at a git tag; a Job in the cluster clones the tag, refuses any
    commit but COMMIT, and applies the bundle (with the checked kubectl of install_tools).

    crds: the CRD the bundle ships for each kind its controller runs. without: kinds left to another owner: their
    CRDs are not applied and the controller starts every other kind only (overlay()).
    """

    name: str
    repository: str
    tag: str
    commit: str
    path: str
    namespace: str
    crds: Mapping[str, str]
    controller: KustomizeController
    without: tuple[str, ...] = ()

    def leaving(self, owned: Collection[str]) -> KustomizeAddon:
        """Return this add-on without the kinds whose CRD is in OWNED (installed by another owner)."""
        return replace(self, without=tuple(kind for kind, crd in self.crds.items() if crd in owned))

    def installed_crds(self) -> frozenset[str]:
        """Return the CRDs this add-on applies."""
        return frozenset(crd for kind, crd in self.crds.items() if kind not in self.without)

    def overlay(self, bundle: str) -> dict[str, Any] | None:
        """Return the kustomization that applies the bundle at path BUNDLE (relative to it) without the kinds of
        `without`: their CRDs deleted, and the controller told every kind it runs; None when nothing is left out."""
        if not self.without:
            return None
        kept = [kind for kind in self.crds if kind not in self.without]
        deletions = [
            {
                "patch": json.dumps(
                    {
                        "$patch": "delete",
                        "apiVersion": "apiextensions.k8s.io/v1",
                        "kind": "CustomResourceDefinition",
                        "metadata": {"name": self.crds[kind]},
                    }
                )
            }
            for kind in self.without
        ]
        controller = self.controller
        flags = [f"{controller.kind_flag}={kind.lower()}" for kind in kept]
        # A strategic merge: the container list merges by name, so only its args change.
        container = {"name": controller.container, "args": flags}
        kinds_patch = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": controller.deployment},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
        return {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [bundle],
            "patches": [*deletions, {"patch": json.dumps(kinds_patch)}],
        }


# Device plugins and the Lustre node driver run on every node, tainted or not (GPU, HyperPod).
TOLERATE_EVERYTHING = [{"operator": "Exists"}]
# The label every node carries with its instance type: EC2's name on kiln's node groups, SageMaker's ml. name on
# HyperPod's nodes (platforms.json, hyperpod.instance_type_label).
INSTANCE_TYPE_LABEL = service_fact("hyperpod", "instance_type_label").value["key"]
# NVIDIA GPU nodes of kiln's node groups carry this label, so the NVIDIA plugin's default node affinity selects
# them without NFD.
GPU_PRESENT_LABEL = {"nvidia.com/gpu.present": "true"}


def instance_type_labels(select: Callable[[InstanceType], bool]) -> list[str]:
    """Return every value the instance-type label takes on nodes of the catalog's types that SELECT accepts: the
    EC2 name, and SageMaker's ml. name where HyperPod offers the type."""
    names = []
    for name in known_instance_types():
        facts = instance_type(name)
        if select(facts):
            names.append(name)
            if facts.hyperpod:
                names.append(facts.hyperpod_name)
    return names


def gpu_node_affinity() -> dict[str, Any]:
    """Return the node affinity of what runs on every NVIDIA GPU node: kiln's (its GPU label) and HyperPod's (by
    ml. instance type, as HyperPod names them; they carry no label of kiln's unless their group is given one)."""
    hyperpod_gpus = [name for name in instance_type_labels(lambda f: f.gpu_count > 0) if name.startswith("ml.")]
    [(label, value)] = GPU_PRESENT_LABEL.items()
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": label, "operator": "In", "values": [value]}]},
                    {"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": hyperpod_gpus}]},
                ]
            }
        }
    }


NVIDIA_DEVICE_PLUGIN = HelmAddon(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.19.3",
    namespace="kube-system",
    release="nvidia-device-plugin",
    values={"tolerations": TOLERATE_EVERYTHING, "affinity": gpu_node_affinity()},
    accelerator="gpu",
)
# The eks-charts repository versions this chart with a leading "v"; its image stays the chart's default, in one
# region's registry (platforms.json, eks.efa_device_plugin_chart): every node role may pull from any region's ECR.
EFA_DEVICE_PLUGIN_CHART = service_fact("eks", "efa_device_plugin_chart").value
EFA_DEVICE_PLUGIN = HelmAddon(
    chart=EFA_DEVICE_PLUGIN_CHART["chart"],
    repository=EFA_DEVICE_PLUGIN_CHART["repository"],
    version=EFA_DEVICE_PLUGIN_CHART["version"],
    namespace="kube-system",
    release="aws-efa-k8s-device-plugin",
    # The chart selects nodes whose instance-type label is one of these: EC2's names of the types kiln knows to
    # have EFA, and HyperPod's ml. names of them (the chart's own list has EC2's names only).
    values={
        "tolerations": TOLERATE_EVERYTHING,
        "supportedInstanceLabels": {
            "keys": [INSTANCE_TYPE_LABEL],
            "values": instance_type_labels(lambda facts: facts.efa_supported),
        },
    },
)
# Static provisioning only: kiln binds a PV to its existing file system, so the driver calls no AWS API (the
# node plugin mounts over Lustre; the controller would call FSx only to create or delete file systems for
# dynamically provisioned claims, which kiln does not offer). It gets no AWS identity. With IMDS out of
# pods' reach (hop limit 1) the driver reads its node's instance id from the Kubernetes API instead.
FSX_CSI_DRIVER = HelmAddon(
    chart="aws-fsx-csi-driver",
    repository="https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
    version="1.17.0",
    namespace="kube-system",
    release="aws-fsx-csi-driver",
    values={"node": {"tolerateAllTaints": True}},
)
# The v1 training operator (PyTorchJob) has no official chart; its release tag carries the kustomize bundle
# (kubernetes.json, training_operator, with the tag's commit). Synth stays offline: the cluster fetches the tag
# when the Job runs, and refuses it unless it is that commit.
_TRAINING_OPERATOR = kubernetes_fact("training_operator").value
TRAINING_OPERATOR = KustomizeAddon(
    name="training-operator",
    **{k: v for k, v in _TRAINING_OPERATOR.items() if k != "controller"},
    controller=KustomizeController(**_TRAINING_OPERATOR["controller"]),
)
# HyperPod's dependencies (platforms.json, hyperpod.dependencies_chart): required before a HyperPod cluster on EKS
# is created. Its device plugins and Kubeflow training operator are off: kiln runs its own (above), which select
# HyperPod's nodes too. Its MPI operator stays on and owns MPIJob (v2beta1): beside it kiln's training operator
# leaves that kind out (KustomizeAddon.leaving), so each CRD has one owner.
_HYPERPOD_CHART = service_fact("hyperpod", "dependencies_chart").value
HYPERPOD_DEPENDENCIES = GitHelmAddon(
    name="hyperpod-dependencies",
    **{f.name: _HYPERPOD_CHART[f.name] for f in fields(GitHelmAddon) if f.name in _HYPERPOD_CHART},
)
# Every chart comes over HTTPS: CDK's kubectl handler needs no registry credentials (no oci://). AWS publishes
# the Neuron components only as an OCI chart, so kiln writes their manifests itself (kiln.constructs.neuron_addons).
HELM_ADDONS: dict[str, HelmAddon] = {
    "nvidia-device-plugin": NVIDIA_DEVICE_PLUGIN,
    "efa-device-plugin": EFA_DEVICE_PLUGIN,
    "fsx-csi-driver": FSX_CSI_DRIVER,
}


@dataclass(frozen=True, kw_only=True)
class PodIdentity:
    """A cluster component that calls AWS APIs: its service account and the AWS-managed policy it gets, if any (the
    construct that makes its role may add statements of its own)."""

    namespace: str
    service_account: str
    managed_policy: str | None = None


# Of everything a kiln cluster runs, only the VPC CNI calls AWS (it attaches interfaces and assigns pod
# addresses), so only its service account gets an AWS identity. The NVIDIA, Neuron and EFA device plugins talk to
# the kubelet and read local devices; the Neuron scheduler extension and the second kube-scheduler talk only to the
# Kubernetes API; the FSx CSI driver needs none (above); the training operator and its install Job call no AWS API.
# Nodes keep IMDS to themselves (hop limit 1): no pod outside the host network reaches the node role either.
VPC_CNI_IDENTITY = PodIdentity(
    namespace="kube-system", service_account="aws-node", managed_policy="AmazonEKS_CNI_Policy"
)

# EKS's node monitoring agent, as the EKS add-on AWS recommends (at EKS's default version for the cluster's Kubernetes
# version): it needs no AWS permissions, so it gets no identity (platforms.json, eks.node_monitoring_agent).
NODE_MONITORING_AGENT: str = service_fact("eks", "node_monitoring_agent").value["addon"]

FSX_CSI_DRIVER_NAME = "fsx.csi.aws.com"
# Namespaces every cluster has: never created (or pruned) by kiln.
BUILTIN_NAMESPACES = ("default", "kube-system")
# Where install Jobs run (the cluster's own services' namespace, there before anything kiln installs).
INSTALL_NAMESPACE = "kube-system"


def kiln_labels(name: str) -> dict[str, str]:
    """Return the labels of an object kiln installs as part of NAME."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "kiln"}


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
        *lustre_claim_manifests(
            names, file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name, storage_gib=storage_gib
        ),
    ]


def lustre_claim_manifests(
    names: LustreVolumeNames, *, file_system_id: str, dns_name: str, mount_name: str, storage_gib: int
) -> list[dict[str, Any]]:
    """Return a PV statically bound to the file system and the PVC in NAMES.namespace that claims it.

    A claim serves its own namespace only and a PV binds one claim: another namespace gets a PV and PVC of its own
    over the same file system (the FSx CSI driver mounts per pod, with no staging shared between volumes)."""
    size = f"{storage_gib}Gi"
    return [
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


# Pod Security admission (https://kubernetes.io/docs/concepts/security/pod-security-admission/): the level a
# namespace enforces, by label. Baseline refuses privileged pods, host namespaces and ports, hostPath volumes and
# added capabilities beyond its short list: every way a pod reaches its node (and the node's credentials). Jobs'
# pods need none of them (EFA interfaces and GPUs come as device plugin resources). Restricted would also refuse
# any image that runs as root, which most training images do.
POD_SECURITY_LEVEL = "baseline"
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"


def pod_security_patch(kubernetes_version: str) -> dict[str, Any]:
    """Return the merge patch that makes a namespace enforce POD_SECURITY_LEVEL as the policy of KUBERNETES_VERSION
    (pinned, so a control plane upgrade does not change what is admitted unannounced)."""
    labels = {POD_SECURITY_LABEL: POD_SECURITY_LEVEL, f"{POD_SECURITY_LABEL}-version": f"v{kubernetes_version}"}
    return {"metadata": {"labels": labels}}
