"""The Neuron device plugin and scheduler extension as kiln's own Kubernetes manifests, at pinned images.

AWS publishes these components only as an OCI Helm chart (oci://public.ecr.aws/neuron/neuron-helm-chart), which
CDK's kubectl handler could pull only with the ECR credentials kiln takes away from it. The objects here carry what
the components need from AWS's chart 1.9.0 (github.com/aws-neuron/neuron-helm-charts, charts/neuron-helm-chart:
values.yaml, templates/device-plugin/, templates/scheduler/): mounts, ports, resource names and the extender
settings, with kiln's names and labels, and RBAC narrowed where the chart grants more than its components use (the
second scheduler's). The images are those of the chart release made for the cluster's Neuron release
(kiln.catalog.neuron_components), and each object says which (annotation NEURON_COMPONENTS_ANNOTATION).

kiln keeps the device plugin where Kubernetes 1.34 offers Dynamic Resource Allocation: Neuron keeps supporting it,
Neuron's DRA driver never runs beside it on one node, and kiln's jobs request the plugin's resource; which families
the DRA driver serves is ambiguous between Neuron's and EKS's pages (platforms.json, neuron.dra_driver).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from kiln.catalog.kubernetes import NEURON_SCHEDULER_NAME
from kiln.catalog.neuron_components import NeuronKubernetesComponents
from kiln.constructs.eks_addons import INSTANCE_TYPE_LABEL, TOLERATE_EVERYTHING, instance_type_labels, kiln_labels

NEURON_NAMESPACE = "kube-system"
# Where the device plugin's and the extension's objects say which chart release's images they run, and why
# (NeuronKubernetesComponents.describe). The images go by tag: no published digest could be cited.
NEURON_COMPONENTS_ANNOTATION = "kiln.io/neuron-components"
# What the device plugin registers: whole Neuron devices and single NeuronCores (Neuron docs, "Neuron device
# plugin"). aws.amazon.com/neurondevice, which older docs list too, is gone since Neuron 2.20 (Neuron docs,
# announcements: "'neurondevice' resource name in Neuron Device K8s plugin no longer supported").
NEURON_RESOURCES = ("aws.amazon.com/neuron", "aws.amazon.com/neuroncore")
NEURON_DEVICE_PLUGIN = "neuron-device-plugin"
# The add-on of the scheduler extension and the second kube-scheduler that consults it.
NEURON_SCHEDULER = "neuron-scheduler"
# The extension's Service and port, as in AWS's chart; the extension listens on $PORT.
NEURON_SCHEDULER_EXTENSION = "k8s-neuron-scheduler"
NEURON_SCHEDULER_EXTENSION_PORT = 12345
# kube-scheduler's secure port: /healthz answers there over HTTPS without credentials.
KUBE_SCHEDULER_SECURE_PORT = 10259
SCHEDULER_CONFIG_DIR = "/etc/kubernetes/neuron-scheduler"
SCHEDULER_CONFIG_FILE = "config.yaml"
# No privilege escalation and no capabilities: each component serves a socket or a port above 1024.
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def neuron_instance_types() -> list[str]:
    """Return every name a Neuron node can carry in its instance-type label: EC2's, and SageMaker's for HyperPod."""
    return instance_type_labels(lambda facts: facts.accelerator_kind == "neuron")


def _service_account(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": NEURON_NAMESPACE, "labels": kiln_labels(name)},
    }


def _role(kind: Literal["ClusterRole", "Role"], name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = {"name": name, "labels": kiln_labels(name)}
    if kind == "Role":
        metadata["namespace"] = NEURON_NAMESPACE
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}


def _binding(
    kind: Literal["ClusterRoleBinding", "RoleBinding"],
    name: str,
    role_kind: Literal["ClusterRole", "Role"],
    role: str,
    account: str,
) -> dict[str, Any]:
    """Return a KIND (ClusterRoleBinding or RoleBinding) of ROLE to ACCOUNT in the Neuron namespace."""
    metadata = {"name": name, "labels": kiln_labels(account)}
    if kind == "RoleBinding":
        metadata["namespace"] = NEURON_NAMESPACE
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NEURON_NAMESPACE}],
    }


def _rule(resources: list[str], verbs: list[str], group: str = "", names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _host_path(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def _system_deployment(
    name: str,
    labels: dict[str, str],
    container: dict[str, Any],
    *,
    strategy: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Return a one-replica, cluster-critical Deployment of CONTAINER in the Neuron namespace."""
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        "priorityClassName": "system-cluster-critical",
        "containers": [container],
    }
    if volumes:
        pod["volumes"] = volumes
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    if strategy:
        spec["strategy"] = strategy
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NEURON_NAMESPACE, "labels": labels},
        "spec": spec,
    }


def neuron_device_plugin_manifests(
    instance_types: list[str], components: NeuronKubernetesComponents
) -> list[dict[str, Any]]:
    """Return the Neuron device plugin's account, RBAC and DaemonSet (COMPONENTS' image), on nodes of INSTANCE_TYPES.

    The plugin advertises NEURON_RESOURCES to the kubelet and hands containers the devices and cores the scheduler
    extension chose (the extension writes its choice on the pod; the plugin reads it back).
    """
    name = NEURON_DEVICE_PLUGIN
    labels = kiln_labels(name)
    # Exactly what AWS's chart 1.9.0 grants the plugin, kept whole: kiln knows no narrower set it is proven to work
    # with. It needs pods at least: the extension's core assignment reaches the plugin on the pod (Neuron docs,
    # "Neuron Scheduler Extension Flow Diagram").
    rules = [
        _rule(["nodes"], ["get", "list", "watch"]),
        _rule(["events"], ["create", "patch"]),
        _rule(["pods"], ["update", "patch", "get", "list", "watch"]),
        _rule(["nodes/status"], ["patch", "update"]),
        _rule(["nodes/proxy"], ["get", "list"]),
    ]
    daemon_set = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": NEURON_NAMESPACE,
            "labels": labels,
            "annotations": {NEURON_COMPONENTS_ANNOTATION: components.describe()},
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-node-critical",
                    "tolerations": TOLERATE_EVERYTHING,
                    # The instance type picks the nodes, as in AWS's manifests: every node carries it, HyperPod's
                    # (ml. names) included, so no label of kiln's is needed.
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": instance_types}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": name,
                            "image": components.device_plugin,
                            "imagePullPolicy": "IfNotPresent",
                            "env": [
                                # Set as in AWS's manifests; /etc/kubernetes is not mounted, so no kubelet
                                # credentials reach the pod: it uses its own service account.
                                {"name": "KUBECONFIG", "value": "/etc/kubernetes/kubelet.conf"},
                                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            ],
                            "securityContext": RESTRICTED,
                            "volumeMounts": [
                                # The kubelet's device-plugin sockets; /run and /opt/aws (read-only) as AWS's chart
                                # mounts them, names included.
                                {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                {"name": "infa-map", "mountPath": "/run"},
                                {"name": "aws-config", "mountPath": "/opt/aws", "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        _host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
                        _host_path("infa-map", "/run"),
                        _host_path("aws-config", "/opt/aws"),
                    ],
                },
            },
        },
    }
    return [
        _service_account(name),
        _role("ClusterRole", name, rules),
        _binding("ClusterRoleBinding", name, "ClusterRole", name, name),
        daemon_set,
    ]


def scheduler_configuration() -> dict[str, Any]:
    """Return the second kube-scheduler's configuration: profile NEURON_SCHEDULER_NAME, filtered and bound by the
    extension for pods that ask for NEURON_RESOURCES."""
    extension = f"http://{NEURON_SCHEDULER_EXTENSION}.{NEURON_NAMESPACE}.svc.cluster.local"
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": NEURON_SCHEDULER_NAME}],
        # The extension filters nodes and binds the pod (it picks the cores); it ranks nothing (no prioritizeVerb).
        # It speaks plain HTTP, inside the cluster only. Not ignorable: without it, Neuron pods wait.
        "extenders": [
            {
                "urlPrefix": f"{extension}:{NEURON_SCHEDULER_EXTENSION_PORT}",
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": False,
                "nodeCacheCapable": False,
                "managedResources": [{"name": r, "ignoredByScheduler": False} for r in NEURON_RESOURCES],
                "ignorable": False,
            }
        ],
        "leaderElection": {
            "leaderElect": True,
            "resourceNamespace": NEURON_NAMESPACE,
            "resourceName": NEURON_SCHEDULER_NAME,
        },
    }


def _extension_manifests(components: NeuronKubernetesComponents) -> list[dict[str, Any]]:
    """Return the scheduler extension's account, RBAC, Deployment (COMPONENTS' image) and Service."""
    name = NEURON_SCHEDULER_EXTENSION
    labels = kiln_labels(name)
    # Exactly what AWS's chart 1.9.0 grants the extension beside a second scheduler: it reads nodes and pods, writes
    # its core assignment on the pod, binds the pod itself (bindVerb), and records events.
    rules = [
        _rule(["nodes"], ["get", "list", "watch"]),
        _rule(["nodes/status"], ["get", "patch", "update", "list", "watch"]),
        _rule(["events"], ["create", "patch"]),
        _rule(["pods"], ["get", "patch", "update", "list", "watch"]),
        _rule(["bindings", "pods/binding"], ["create"]),
    ]
    # Placed by EKS's own scheduler (AWS's chart uses the second one): the second scheduler depends on the
    # extension, so the extension must not depend on it.
    container = {
        "name": name,
        "image": components.scheduler_extension,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "PORT", "value": str(NEURON_SCHEDULER_EXTENSION_PORT)}],
        "ports": [{"name": "http", "containerPort": NEURON_SCHEDULER_EXTENSION_PORT}],
        "securityContext": RESTRICTED,
    }
    # One extension at a time: two would hand out the same cores.
    deployment = _system_deployment(name, labels, container, strategy={"type": "Recreate"})
    deployment["metadata"]["annotations"] = {NEURON_COMPONENTS_ANNOTATION: components.describe()}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NEURON_NAMESPACE, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": NEURON_SCHEDULER_EXTENSION_PORT, "targetPort": "http"}],
        },
    }
    return [
        _service_account(name),
        _role("ClusterRole", name, rules),
        _binding("ClusterRoleBinding", name, "ClusterRole", name, name),
        deployment,
        service,
    ]


def _scheduler_manifests(kube_scheduler_image: str) -> list[dict[str, Any]]:
    """Return the second kube-scheduler's account, RBAC, configuration and Deployment."""
    name = NEURON_SCHEDULER_NAME
    labels = kiln_labels(name)
    config = f"{name}-config"
    probe = {"httpGet": {"path": "/healthz", "port": KUBE_SCHEDULER_SECURE_PORT, "scheme": "HTTPS"}}
    # A scheduler's built-in roles, bound as Kubernetes' "Configure Multiple Schedulers" binds them, plus its own
    # lease: system:kube-scheduler may create leases but renew only the one named kube-scheduler. (AWS's chart grants
    # every lease and every ConfigMap of the cluster instead; the one ConfigMap a scheduler reads, for delegated
    # authentication, comes with extension-apiserver-authentication-reader.)
    lease = _rule(["leases"], ["get", "update"], group="coordination.k8s.io", names=[name])
    container = {
        "name": "kube-scheduler",
        "image": kube_scheduler_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/usr/local/bin/kube-scheduler",
            f"--config={SCHEDULER_CONFIG_DIR}/{SCHEDULER_CONFIG_FILE}",
        ],
        "livenessProbe": {**probe, "initialDelaySeconds": 15},
        "readinessProbe": probe,
        "resources": {"requests": {"cpu": "100m"}},
        # kube-scheduler keeps its self-signed serving certificate in memory: it writes nothing.
        "securityContext": {
            **RESTRICTED,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [{"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True}],
    }
    volumes = [{"name": "config", "configMap": {"name": config}}]
    deployment = _system_deployment(name, labels, container, volumes=volumes)
    return [
        _service_account(name),
        _binding("ClusterRoleBinding", f"{name}-as-kube-scheduler", "ClusterRole", "system:kube-scheduler", name),
        _binding("ClusterRoleBinding", f"{name}-as-volume-scheduler", "ClusterRole", "system:volume-scheduler", name),
        _binding(
            "RoleBinding",
            f"{name}-authentication-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            name,
        ),
        _role("Role", f"{name}-lease", [lease]),
        _binding("RoleBinding", f"{name}-lease", "Role", f"{name}-lease", name),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config, "namespace": NEURON_NAMESPACE, "labels": labels},
            # JSON is YAML: kube-scheduler reads it as its configuration file.
            "data": {SCHEDULER_CONFIG_FILE: json.dumps(scheduler_configuration(), indent=2)},
        },
        deployment,
    ]


def neuron_scheduler_manifests(
    kube_scheduler_image: str, components: NeuronKubernetesComponents
) -> list[dict[str, Any]]:
    """Return the Neuron scheduler extension (COMPONENTS' image) and a second kube-scheduler (KUBE_SCHEDULER_IMAGE)
    that consults it.

    EKS runs its own kube-scheduler, which kiln cannot configure, so Neuron pods opt into the second one with
    schedulerName NEURON_SCHEDULER_NAME; it places them on nodes (and cores) the extension approves.
    """
    return [*_extension_manifests(components), *_scheduler_manifests(kube_scheduler_image)]
