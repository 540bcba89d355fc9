"""code-server (VS Code in a browser) on an EKS cluster: one pod on the system nodes, with kiln's FSx for Lustre file
system mounted where jobs mount it and its home on that file system, reached only through `kubectl port-forward`.

What keeps it to the person who holds the cluster's credentials:
- It listens on 127.0.0.1 inside the pod: no Service, no Ingress, no host network or host port, no security group
  rule. `kubectl port-forward` (an API server call that needs the cluster's credentials and pods/portforward in the
  namespace) is the one way in: the container runtime dials localhost:PORT inside the pod's network namespace
  (containerd's CRI, pkg/cri/server/sandbox_portforward_linux.go). code-server then asks for the password it wrote on
  first start to ~/.config/code-server/config.yaml, on the FSx volume.
- It runs as the image's own user (coder, uid 1000), never root: no privilege escalation (the image's setuid fixuid
  and sudo then do nothing, and its entrypoint, which runs fixuid, is not used), no capabilities, a read-only root
  file system (code-server writes only its home and /tmp, an emptyDir: kiln ran code-server 4.139.1 as uid 1000 with
  every other path read-only, and its login page, workbench and extension host came up), no Kubernetes token.
- One init container creates the home directory on the file system and gives it to uid 1000 (mode 0700: the
  password file code-server writes is 0644). Creating it on a root-owned file system takes root: it runs as root
  with CHOWN alone of the capabilities.

No fsGroup: the only volume it would act on is the shared file system, and whether kubelet then changes the group of
every file on it rests on the FSx CSI driver's fsGroupPolicy (ReadWriteOnceWithFSType in its chart: skipped for a
ReadWriteMany volume), not on kiln. The init container gives the home its owner instead.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from kiln.bootstrap.artifacts import npm_version
from kiln.catalog.code_server import (
    CODE_SERVER_DEPLOYMENT,
    CODE_SERVER_HOST,
    CODE_SERVER_IMAGE_UID,
    CODE_SERVER_IMAGE_USER,
    CODE_SERVER_NAMESPACE,
    CODE_SERVER_PORT,
    home_directory,
)
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.constructs._checks import require
from kiln.constructs.eks_addons import LustreVolumeNames, kiln_labels, lustre_claim_manifests
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP

# The official image (Docker Hub, codercom/code-server) of the release the nodes install from npm: one pin for both,
# artifacts.json's npm package code-server. Pinned by tag, not digest: kiln pins a digest only where it can cite
# its publisher's, and Coder publishes none. (Third-party projects that pin 4.139.1 record
# sha256:0c067c3cf09ed1830ce282387826be8feefef8a5828f462791c2df3f1007ee17 for it; a digest not from its publisher is
# no better a pin than the tag, and a wrong one would stop the pod from ever starting.)
CODE_SERVER_IMAGE = f"docker.io/codercom/code-server:{npm_version('code-server')}"
# In the pod the user is the image's: its home is where code-server keeps its settings, extensions and password.
POD_HOME = home_directory(CODE_SERVER_IMAGE_USER)
# The image's init (Debian's dumb-init: reaps the terminals' children, passes on signals) and code-server, called
# directly rather than through the image's entrypoint (which runs the setuid fixuid first).
POD_COMMAND = ["/usr/bin/dumb-init", "/usr/bin/code-server"]
# Names of the volume claim in the code-server namespace (a claim serves its own namespace only).
POD_VOLUME = "kiln-fsx-code-server"
# What the pod asks of a system node and may take at most: a CPU node shared with the cluster's services (m5.xlarge:
# 4 vCPUs, 16 GiB by default). An editor with a few terminals and language servers fits; builds belong in jobs.
POD_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
TMP_SIZE = "2Gi"
# Pods in the namespace are held to Kubernetes's baseline Pod Security Standard (no privileged containers, host
# namespaces or host ports): the init container's root with CHOWN is within it; restricted would refuse it.
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "baseline"}
# A plain relative path below the file system's root: each part starts with a letter, digit or '_' (so no '.' or
# '..' part, and no empty one).
_HOME_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


@dataclass(frozen=True, kw_only=True)
class CodeServerPod:
    """code-server as one pod on the system nodes (kiln.constructs.eks_code_server), with the cluster's FSx volume.

    home: the pod's home directory, relative to the file system's root (kiln.catalog.code_server.pod_home: one per
        cluster); code-server's settings, extensions and password file live there and survive the pod.
    mount_path: where the file system is mounted in the pod; default /fsx, where jobs mount it.
    """

    home: str
    mount_path: str = "/fsx"

    def __post_init__(self) -> None:
        require(
            self,
            bool(_HOME_PATH.fullmatch(self.home)),
            "home",
            self.home,
            "a relative path below the file system's root, of letters, digits and . _ - (no '..')",
        )
        require(
            self,
            self.mount_path.startswith("/")
            and posixpath.normpath(self.mount_path) == self.mount_path
            and self.mount_path not in ("/", POD_HOME, "/tmp"),
            "mount_path",
            self.mount_path,
            f"an absolute, normalized path other than /, /tmp and {POD_HOME}",
        )

    @property
    def home_on_mount(self) -> str:
        """Return the home directory as the pod sees it under mount_path."""
        return f"{self.mount_path}/{self.home}"


def code_server_manifests(
    pod: CodeServerPod,
    *,
    storage_class: str,
    file_system_id: str,
    dns_name: str,
    mount_name: str,
    storage_gib: int,
) -> list[dict[str, Any]]:
    """Return the code-server namespace, its PV and PVC over the file system, and the Deployment of its one pod.

    STORAGE_CLASS, FILE_SYSTEM_ID, DNS_NAME, MOUNT_NAME, STORAGE_GIB: the cluster's Lustre volume, as its own PV
    names it. The pod runs on the system node group (kiln's label), never on an accelerated node.
    """
    labels = kiln_labels(CODE_SERVER_DEPLOYMENT)
    names = LustreVolumeNames(
        storage_class=storage_class, volume=POD_VOLUME, claim=POD_VOLUME, namespace=CODE_SERVER_NAMESPACE
    )
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": CODE_SERVER_NAMESPACE, "labels": {**labels, **POD_SECURITY}},
    }
    claim = lustre_claim_manifests(
        names, file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name, storage_gib=storage_gib
    )
    return [namespace, *claim, _deployment(pod, labels)]


def _deployment(pod: CodeServerPod, labels: dict[str, str]) -> dict[str, Any]:
    fsx, tmp = "fsx", "tmp"
    uid = CODE_SERVER_IMAGE_UID
    locked_down = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }
    # Creates the home directory on first start (parents as root's, 0755) and gives it to the image's user; an
    # existing one keeps its mode and contents.
    prepare_home = {
        "name": "home",
        "image": CODE_SERVER_IMAGE,
        "command": ["sh", "-c", 'mkdir -p -m 0700 "$HOME_DIR" && chown "$OWNER" "$HOME_DIR"'],
        "env": [
            {"name": "HOME_DIR", "value": pod.home_on_mount},
            {"name": "OWNER", "value": f"{uid}:{uid}"},
        ],
        "securityContext": {
            **locked_down,
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
        },
        "resources": INIT_RESOURCES,
        "volumeMounts": [{"name": fsx, "mountPath": pod.mount_path}],
    }
    health = f"http://{CODE_SERVER_HOST}:{CODE_SERVER_PORT}/healthz"
    code_server = {
        "name": "code-server",
        "image": CODE_SERVER_IMAGE,
        "command": POD_COMMAND,
        # 127.0.0.1 only: `kubectl port-forward` reaches it inside the pod, nothing else does.
        "args": ["--bind-addr", f"{CODE_SERVER_HOST}:{CODE_SERVER_PORT}", POD_HOME],
        "workingDir": POD_HOME,
        "env": [{"name": "HOME", "value": POD_HOME}, {"name": "USER", "value": CODE_SERVER_IMAGE_USER}],
        "securityContext": {
            **locked_down,
            "runAsUser": uid,
            "runAsGroup": uid,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": POD_RESOURCES,
        # Ready once it answers on its own address (kubelet's HTTP probes come from the node, which cannot reach it).
        "readinessProbe": {
            "exec": {"command": ["curl", "-fsS", "-o", "/dev/null", health]},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [
            {"name": fsx, "mountPath": pod.mount_path},
            {"name": fsx, "mountPath": POD_HOME, "subPath": pod.home},
            {"name": tmp, "mountPath": "/tmp"},
        ],
    }
    spec = {
        "nodeSelector": {NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [prepare_home],
        "containers": [code_server],
        "volumes": [
            {"name": fsx, "persistentVolumeClaim": {"claimName": POD_VOLUME}},
            {"name": tmp, "emptyDir": {"sizeLimit": TMP_SIZE}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": CODE_SERVER_DEPLOYMENT, "namespace": CODE_SERVER_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            # Never two at once: both would write the same home (settings, extensions) on the shared file system.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
