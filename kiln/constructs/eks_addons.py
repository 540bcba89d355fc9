"""What EksTrainingCluster installs, pinned in one place: Kubernetes + kubectl layer, charts, manifests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct

from kiln.catalog import InstanceType, instance_type, known_instance_types
from kiln.catalog.kubernetes import KUBECTL_RELEASES
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
# tag for the reason given at TRAINING_OPERATOR.
KUBERNETES_RELEASES: dict[str, KubernetesRelease] = {
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


@dataclass(frozen=True, kw_only=True)
class GitHelmAddon:
    """A Helm chart published only in a Git repository, installed at a release tag whose commit is checked: a Job in
    the cluster clones the tag, refuses any other commit, fetches the chart's dependencies and installs it.

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
    git_image: str
    helm_image: str
    kubectl_image: str
    region_setting: str | None = None
    json_settings: Mapping[str, Any] = field(default_factory=dict)


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
# The eks-charts repository versions this chart with a leading "v".
EFA_DEVICE_PLUGIN = HelmAddon(
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    version="v0.5.29",
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
# The v1 training operator (PyTorchJob) has no official chart; its release tag carries the
# kustomize bundle. Synth stays offline: the cluster fetches the tag when the Job runs.
# The images are pinned by tag, not digest: kiln pins a digest only where it can cite a published one, and
# none could be cited for these tags when this was written (the Kubernetes image promoter's manifest,
# kubernetes/k8s.io registry.k8s.io/images/k8s-staging-kubernetes/images.yaml, lists kubectl digests, but the
# copy at hand stopped before v1.36; no source at hand lists alpine/git's). So a substituted image is not
# ruled out: the git step holds no token, but the kubectl steps apply what it fetched, with cluster-admin,
# until the Job revokes it (see kustomize_job_manifests).
TRAINING_OPERATOR = KustomizeAddon(
    name="training-operator",
    repository="https://github.com/kubeflow/trainer.git",
    ref="v1.9.3",
    path="manifests/overlays/standalone",
    git_image="docker.io/alpine/git:2.45.2",
    kubectl_image="registry.k8s.io/kubectl:v1.36.3",
    namespace="kube-system",
)
# HyperPod's dependencies (platforms.json, hyperpod.dependencies_chart): required before a HyperPod cluster on EKS
# is created. Its device plugins and Kubeflow training operator are off: kiln runs its own (above), which select
# HyperPod's nodes too. The helm image is pinned by tag for the reason given at TRAINING_OPERATOR.
_HYPERPOD_CHART = service_fact("hyperpod", "dependencies_chart").value
# The helm of the Git Helm installs, pinned by tag for the reason given at TRAINING_OPERATOR.
HELM_IMAGE = "docker.io/alpine/helm:3.18.4"
HYPERPOD_DEPENDENCIES = GitHelmAddon(
    name="hyperpod-dependencies",
    git_image=TRAINING_OPERATOR.git_image,
    helm_image=HELM_IMAGE,
    kubectl_image=TRAINING_OPERATOR.kubectl_image,
    **{f.name: _HYPERPOD_CHART[f.name] for f in fields(GitHelmAddon) if f.name in _HYPERPOD_CHART},
)
HELM_HOMES = ("CACHE", "CONFIG", "DATA")
# How long a HyperPod cluster's creation waits for its dependencies' install: within the 15 minutes CDK's kubectl
# handler (a Lambda function) may run.
INSTALL_WAIT_MINUTES = 14
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

FSX_CSI_DRIVER_NAME = "fsx.csi.aws.com"
# Namespaces every cluster has: never created (or pruned) by kiln.
BUILTIN_NAMESPACES = ("default", "kube-system")
# Where install Jobs run (the cluster's own services' namespace, there before anything kiln installs).
INSTALL_NAMESPACE = "kube-system"


# The install token's lifetime (the API server's minimum) and how long a finished install Job (with its pods,
# the only holders of that token) stays for inspection.
INSTALL_TOKEN_SECONDS = 600
INSTALL_JOB_TTL_SECONDS = 600
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def kiln_labels(name: str) -> dict[str, str]:
    """Return the labels of an object kiln installs as part of NAME."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "kiln"}


def _install_token_volume(name: str) -> dict[str, Any]:
    """Return a projected volume laid out like the automounted token, but short-lived (no extended expiry)."""
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": INSTALL_TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        },
    }


def _job_name(name: str, ref: str, objects: list[dict[str, Any]]) -> str:
    # A Job's pod template is immutable, and CDK re-applies all three objects whenever any of them changes:
    # a name that follows their content means every apply that restores the binding starts a Job that revokes it.
    digest = hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()[:10]
    return f"kiln-install-{name}-{ref.replace('.', '-')}"[:52] + f"-{digest}"


# Where an install Job's checkout lives: one emptyDir its steps share.
SOURCE_DIR = "/src"


def install_job_manifests(
    *, name: str, ref: str, namespace: str, steps: list[dict[str, Any]], kubectl_image: str
) -> list[dict[str, Any]]:
    """Return a service account, its cluster-admin binding, and the Job that runs STEPS (init containers, in order,
    each with the checkout volume) and then deletes that binding.

    What an install creates (CRDs, cluster roles, webhooks) only cluster-admin may grant. The grant lasts as long as
    the install: the Job's last step (its one container, which starts only after every step succeeds) deletes the
    binding. Only steps marked "api" mount the account's token, a 10-minute one; the others (the fetch from the
    internet) get none. A finished Job and its pods are deleted after INSTALL_JOB_TTL_SECONDS, which invalidates
    their pod-bound tokens. An install that fails for good (backoffLimit) leaves the binding until a deploy that
    changes the install starts a new Job or the stack is deleted, but no token of the account survives its pods:
    using the binding then takes creating pods or tokens in its namespace (kube-system for kiln's add-ons, where
    that already amounts to cluster-admin).
    """
    account = f"kiln-install-{name}"
    labels = kiln_labels(account)
    api_access = "install-api-access"
    api_mount = {"name": api_access, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}
    source_mount = {"name": "source", "mountPath": SOURCE_DIR}
    init = []
    for step in steps:
        container = {k: v for k, v in step.items() if k != "api"}
        container["volumeMounts"] = [source_mount, *([api_mount] if step.get("api") else [])]
        init.append(container)
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": account, "namespace": namespace, "labels": labels},
        "automountServiceAccountToken": False,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": account, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 10,
            "ttlSecondsAfterFinished": INSTALL_JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "restartPolicy": "OnFailure",
                    "tolerations": TOLERATE_EVERYTHING,
                    "volumes": [{"name": "source", "emptyDir": {}}, _install_token_volume(api_access)],
                    "initContainers": init,
                    "containers": [
                        {
                            "name": "revoke",
                            "image": kubectl_image,
                            # The account's last act: with the binding gone its token grants nothing.
                            "args": ["delete", "clusterrolebinding", account, "--ignore-not-found"],
                            "volumeMounts": [api_mount],
                        }
                    ],
                },
            },
        },
    }
    job["metadata"]["name"] = _job_name(name, ref, [service_account, binding, job])
    return [service_account, binding, job]


def kustomize_job_manifests(addon: KustomizeAddon) -> list[dict[str, Any]]:
    """Return the install Job (install_job_manifests) that fetches ADDON's tag and applies its bundle server-side."""
    steps = [
        {
            "name": "fetch",
            "image": addon.git_image,
            "args": ["clone", "--depth", "1", "--branch", addon.ref, addon.repository, SOURCE_DIR],
        },
        {
            "name": "apply",
            "image": addon.kubectl_image,
            # Server-side: the CRDs are too large for client-side apply's annotation.
            "args": ["apply", "--server-side", "--force-conflicts", "-k", f"{SOURCE_DIR}/{addon.path}"],
            "api": True,
        },
    ]
    return install_job_manifests(
        name=addon.name, ref=addon.ref, namespace=addon.namespace, steps=steps, kubectl_image=addon.kubectl_image
    )


# The fetch step of a Git Helm add-on: clone the tag, then refuse any commit but the pinned one (a moved tag).
_FETCH_PINNED = (
    'git clone --depth 1 --branch "$TAG" "$REPOSITORY" "$CHECKOUT" && '
    'test "$(git -C "$CHECKOUT" rev-parse HEAD)" = "$COMMIT" || '
    '{ echo "$REPOSITORY $TAG is not commit $COMMIT" >&2; exit 1; }'
)


def git_helm_job_manifests(addon: GitHelmAddon, region: str) -> list[dict[str, Any]]:
    """Return the install Job (install_job_manifests) that installs ADDON's chart at its pinned commit in REGION."""
    checkout = f"{SOURCE_DIR}/checkout"
    chart = f"{checkout}/{addon.path}"
    # Helm's caches and repository list live beside the checkout, shared by its two steps.
    helm_env = [{"name": f"HELM_{kind}_HOME", "value": f"{SOURCE_DIR}/helm/{kind.lower()}"} for kind in HELM_HOMES]
    settings = [f"{key}={value}" for key, value in addon.settings.items()]
    if addon.region_setting is not None:
        settings.append(f"{addon.region_setting}={region}")
    json_settings = [f"{key}={json.dumps(value)}" for key, value in addon.json_settings.items()]
    steps = [
        {
            "name": "fetch",
            "image": addon.git_image,
            "command": ["sh", "-c", _FETCH_PINNED],
            "env": [
                {"name": "REPOSITORY", "value": addon.repository},
                {"name": "TAG", "value": addon.tag},
                {"name": "COMMIT", "value": addon.commit},
                {"name": "CHECKOUT", "value": checkout},
            ],
        },
        {
            # The chart's subcharts, from the repositories its Chart.yaml names at their pinned versions.
            "name": "dependencies",
            "image": addon.helm_image,
            "args": ["dependency", "update", chart],
            "env": helm_env,
        },
        {
            "name": "install",
            "image": addon.helm_image,
            "args": [
                "upgrade",
                "--install",
                addon.release,
                chart,
                "--namespace",
                addon.namespace,
                *(["--create-namespace"] if addon.namespace not in BUILTIN_NAMESPACES else []),
                "--wait",
                "--timeout",
                "10m",
                *(arg for setting in settings for arg in ("--set", setting)),
                *(arg for setting in json_settings for arg in ("--set-json", setting)),
            ],
            "env": helm_env,
            "api": True,
        },
    ]
    return install_job_manifests(
        name=addon.name, ref=addon.tag, namespace=INSTALL_NAMESPACE, steps=steps, kubectl_image=addon.kubectl_image
    )


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
