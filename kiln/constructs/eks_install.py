"""Install Jobs: what only cluster-admin may install (CRDs, cluster roles, webhooks), run in the cluster by code kiln
checked, with a grant that never outlives the install.

Each Job clones its add-on's tag and refuses any commit but the pinned one, runs only images pinned by digest and
kubectl/helm binaries checked by sha256 (install_tools), holds a short-lived token only in the steps that reach the
API, and empties its cluster-admin binding at its end; kiln.constructs.eks_install_wait empties it from outside as
well, once the Job finished either way.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from typing import Any

from kiln.catalog.kubernetes import kubernetes_fact
from kiln.constructs.eks_addons import (
    BUILTIN_NAMESPACES,
    INSTALL_NAMESPACE,
    TOLERATE_EVERYTHING,
    GitHelmAddon,
    KustomizeAddon,
    kiln_labels,
)

# Where an install Job keeps what it fetched: one emptyDir its steps share, with the checked tools under TOOLS_DIR.
SOURCE_DIR = "/src"
TOOLS_DIR = f"{SOURCE_DIR}/tools"


@dataclass(frozen=True, kw_only=True)
class ToolBinary:
    """A linux-amd64 binary an install Job downloads from URL (or takes as MEMBER out of the .tar.gz at URL) and runs
    only if its sha256 is SHA256."""

    name: str
    version: str
    url: str
    sha256: str
    member: str | None = None

    @property
    def path(self) -> str:
        return f"{TOOLS_DIR}/{self.name}"

    @property
    def download(self) -> str:
        return f"{TOOLS_DIR}/{self.name}.download"


@dataclass(frozen=True, kw_only=True)
class InstallTools:
    """Everything an install Job runs, each piece checked (kubernetes.json, install_*): the images by
    digest, kubectl and helm by sha256 (the binaries CDK's kubectl handler runs for the same Kubernetes minor)."""

    git_image: str
    unpack_image: str
    kubectl: ToolBinary
    helm: ToolBinary


def install_tools(kubernetes_version: str) -> InstallTools:
    """Return the checked tools of install Jobs on a cluster of KUBERNETES_VERSION (a key of KUBERNETES_RELEASES)."""
    binaries = kubernetes_fact("install_binaries").value[kubernetes_version]
    return InstallTools(
        git_image=kubernetes_fact("install_git_image").value,
        unpack_image=kubernetes_fact("install_unpack_image").value,
        kubectl=ToolBinary(name="kubectl", **binaries["kubectl"]),
        helm=ToolBinary(name="helm", **binaries["helm"]),
    )


HELM_HOMES = ("CACHE", "CONFIG", "DATA")
# How long an install Job may run (its activeDeadlineSeconds: then Kubernetes marks it Failed), and how long the
# stack waits for it to finish, succeeded or failed: longer, and within the 15 minutes CDK's kubectl handler (a
# Lambda function) may run. Helm's own wait (HELM_TIMEOUT) fits inside the deadline.
INSTALL_DEADLINE_SECONDS = 13 * 60
INSTALL_WAIT_MINUTES = 14
HELM_TIMEOUT = "10m"
# What the stack reads to know an install Job finished either way: the type of a condition that holds (Complete,
# Failed, or the SuccessCriteriaMet / FailureTarget that precede them); empty while it runs.
JOB_FINISHED_PATH = '.status.conditions[?(@.status=="True")].type'
# How long the stack then looks for the Job's success (there at once, or never).
SUCCEEDED_WAIT_MINUTES = 1

# The install token's lifetime (the API server's minimum) and how long a finished install Job (with its pods,
# the only holders of that token) stays for inspection.
INSTALL_TOKEN_SECONDS = 600
INSTALL_JOB_TTL_SECONDS = 600
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The user every install step runs as: git-sync's own (its image's USER), never root.
INSTALL_USER = 65533
# The tools are linux-amd64 builds (install_binaries): install Jobs run on amd64 nodes.
AMD64_NODES = {"kubernetes.io/arch": "amd64"}
# A ClusterRoleBinding with no subjects grants nothing: what both the Job's last step and the stack write over the
# install's binding (a merge patch replaces the list).
REVOKED_SUBJECTS: dict[str, Any] = {"subjects": []}


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


def _job_name(name: str, tag: str, objects: list[dict[str, Any]]) -> str:
    # A Job's pod template is immutable, and CDK re-applies all three objects whenever any of them changes:
    # a name that follows their content means every apply that restores the binding starts a Job that revokes it.
    digest = hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()[:10]
    return f"kiln-install-{name}-{tag.replace('.', '-')}"[:52] + f"-{digest}"


# The fetch step: clone the tag and refuse any commit but the pinned one (a moved tag), then download the tools
# (URL DESTINATION pairs in the arguments), over HTTPS only.
_FETCH = (
    'git clone --depth 1 --branch "$TAG" "$REPOSITORY" "$CHECKOUT" || exit 1\n'
    'head="$(git -C "$CHECKOUT" rev-parse HEAD)" || exit 1\n'
    '[ "$head" = "$COMMIT" ] || { echo "$REPOSITORY $TAG is commit $head, not $COMMIT" >&2; exit 1; }\n'
    'mkdir -p "$TOOLS"\n'
    'while [ "$#" -gt 1 ]; do\n'
    '  curl --fail --silent --show-error --location --proto "=https" --tlsv1.2 --output "$2" "$1" || exit 1\n'
    "  shift 2\n"
    "done\n"
)
# The tools step (no token, no network use): take each binary out of what was downloaded (DOWNLOAD PATH MEMBER
# triples; MEMBER "-" for a plain file), refuse it unless it has its pinned sha256 (PATH's line in $SUMS), and
# make it executable.
_UNPACK = (
    "set -e\n"
    'while [ "$#" -gt 2 ]; do\n'
    '  if [ "$3" = - ]; then mv "$1" "$2"; else tar -xzOf "$1" "$3" > "$2"; rm "$1"; fi\n'
    "  shift 3\n"
    "done\n"
    'printf "%s\\n" "$SUMS" | sha256sum --check --strict\n'
    'chmod 0555 "$TOOLS"/*\n'
)
# Every step that runs a tool checks it first, in the same container: TOOL DIGEST ARGS...
RUN_CHECKED = (
    'tool="$1"; digest="$2"; shift 2\n'
    'echo "$digest  $tool" | sha256sum --check --status || '
    '{ echo "$tool is not the binary of sha256 $digest" >&2; exit 1; }\n'
    'exec "$tool" "$@"\n'
)


def run_checked(tool: ToolBinary, *args: str) -> list[str]:
    """Return the command of a step that runs TOOL with ARGS once its sha256 is checked."""
    return ["sh", "-c", RUN_CHECKED, tool.name, tool.path, tool.sha256, *args]


def _fetch_steps(
    tools: InstallTools, binaries: list[ToolBinary], *, repository: str, tag: str, commit: str, checkout: str
) -> list[dict[str, Any]]:
    """Return the two steps before any that holds a token: fetch (clone, commit check, downloads) and tools
    (unpack and check every binary)."""
    sums = "\n".join(f"{b.sha256}  {b.path}" for b in binaries)
    return [
        {
            "name": "fetch",
            "image": tools.git_image,
            "command": ["sh", "-c", _FETCH, "fetch", *(arg for b in binaries for arg in (b.url, b.download))],
            "env": [
                {"name": "REPOSITORY", "value": repository},
                {"name": "TAG", "value": tag},
                {"name": "COMMIT", "value": commit},
                {"name": "CHECKOUT", "value": checkout},
                {"name": "TOOLS", "value": TOOLS_DIR},
            ],
        },
        {
            "name": "tools",
            "image": tools.unpack_image,
            "command": [
                "sh",
                "-c",
                _UNPACK,
                "tools",
                *(arg for b in binaries for arg in (b.download, b.path, b.member or "-")),
            ],
            "env": [{"name": "SUMS", "value": sums}, {"name": "TOOLS", "value": TOOLS_DIR}],
        },
    ]


_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def install_job_manifests(
    *, name: str, tag: str, namespace: str, steps: list[dict[str, Any]], tools: InstallTools
) -> list[dict[str, Any]]:
    """Return a service account, its cluster-admin binding, and the Job that runs STEPS (init containers, in order,
    each with the checkout volume) and then revokes that binding.

    What an install creates (CRDs, cluster roles, webhooks) only cluster-admin may grant. The grant lasts as long as
    the install: the Job's last step (its one container, which starts only after every step succeeds) empties the
    binding's subjects, and the stack does the same from outside once the Job has finished, succeeded or failed
    (kiln.constructs.eks_install_wait.install_and_wait), so a failed install leaves no grant behind either. The Job
    runs at most INSTALL_DEADLINE_SECONDS. Only steps marked "api" mount the account's token, a 10-minute one; the
    others (the fetch from the internet) get none. Every image is pinned by digest and every tool checked by sha256
    before it runs (install_tools). A finished Job and its pods are deleted after INSTALL_JOB_TTL_SECONDS, which
    invalidates their pod-bound tokens.
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
        container["securityContext"] = _CONTAINER_SECURITY
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
    revoke = run_checked(
        tools.kubectl,
        "patch",
        "clusterrolebinding",
        account,
        "--type",
        "merge",
        "--patch",
        json.dumps(REVOKED_SUBJECTS),
    )
    # The stack's waits read the Job by name; a change to them must come with a new Job (a finished one is gone
    # after its TTL), so they are part of what names it.
    waits = {"finished": [JOB_FINISHED_PATH, INSTALL_WAIT_MINUTES], "succeeded": SUCCEEDED_WAIT_MINUTES}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": namespace, "labels": labels, "annotations": {"kiln.io/waits": json.dumps(waits)}},
        "spec": {
            "backoffLimit": 10,
            "activeDeadlineSeconds": INSTALL_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": INSTALL_JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "restartPolicy": "OnFailure",
                    "tolerations": TOLERATE_EVERYTHING,
                    "nodeSelector": AMD64_NODES,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": INSTALL_USER,
                        "runAsGroup": INSTALL_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumes": [{"name": "source", "emptyDir": {}}, _install_token_volume(api_access)],
                    "initContainers": init,
                    "containers": [
                        {
                            # The account's last act: with no subjects the binding grants nothing.
                            "name": "revoke",
                            "image": tools.git_image,
                            "command": revoke,
                            "volumeMounts": [source_mount, api_mount],
                            "securityContext": _CONTAINER_SECURITY,
                        }
                    ],
                },
            },
        },
    }
    job["metadata"]["name"] = _job_name(name, tag, [service_account, binding, job])
    return [service_account, binding, job]


def install_grant(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the cluster-admin binding and the Job of an install's OBJECTS (install_job_manifests)."""
    [binding] = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    [job] = [o for o in objects if o["kind"] == "Job"]
    return binding, job


def revoked_binding_patch(job_name: str) -> dict[str, Any]:
    """Return the merge patch that empties an install binding's subjects, naming the Job it follows (so the patch
    changes, and is applied again, whenever a new Job re-grants the binding)."""
    return {**REVOKED_SUBJECTS, "metadata": {"annotations": {"kiln.io/revoked-after": job_name}}}


# Where an install Job writes the kustomization that applies a bundle without some of its kinds
# (KustomizeAddon.overlay), and the step that writes it (no token, no network use).
OVERLAY_DIR = f"{SOURCE_DIR}/overlay"
_WRITE_OVERLAY = 'mkdir -p "$OVERLAY" && printf "%s\\n" "$KUSTOMIZATION" > "$OVERLAY/kustomization.yaml"\n'


def kustomize_job_manifests(addon: KustomizeAddon, tools: InstallTools) -> list[dict[str, Any]]:
    """Return the install Job (install_job_manifests) that fetches ADDON's tag at its commit and applies its bundle
    server-side (through ADDON's overlay when it leaves kinds out)."""
    checkout = f"{SOURCE_DIR}/checkout"
    fetch = _fetch_steps(
        tools, [tools.kubectl], repository=addon.repository, tag=addon.tag, commit=addon.commit, checkout=checkout
    )
    target = f"{checkout}/{addon.path}"
    steps = [*fetch]
    overlay = addon.overlay(posixpath.relpath(target, OVERLAY_DIR))
    if overlay is not None:
        steps.append(
            {
                "name": "overlay",
                "image": tools.git_image,
                "command": ["sh", "-c", _WRITE_OVERLAY],
                "env": [
                    {"name": "OVERLAY", "value": OVERLAY_DIR},
                    # YAML is a superset of JSON: the kustomization is its JSON text.
                    {"name": "KUSTOMIZATION", "value": json.dumps(overlay, sort_keys=True)},
                ],
            }
        )
        target = OVERLAY_DIR
    apply = {
        "name": "apply",
        "image": tools.git_image,
        # Server-side: the CRDs are too large for client-side apply's annotation.
        "command": run_checked(tools.kubectl, "apply", "--server-side", "--force-conflicts", "-k", target),
        "api": True,
    }
    return install_job_manifests(
        name=addon.name, tag=addon.tag, namespace=addon.namespace, steps=[*steps, apply], tools=tools
    )


def git_helm_job_manifests(addon: GitHelmAddon, region: str, tools: InstallTools) -> list[dict[str, Any]]:
    """Return the install Job (install_job_manifests) that installs ADDON's chart at its pinned commit in REGION."""
    checkout = f"{SOURCE_DIR}/checkout"
    chart = f"{checkout}/{addon.path}"
    # Helm's caches and repository list live beside the checkout, shared by its two steps.
    helm_env = [{"name": f"HELM_{kind}_HOME", "value": f"{SOURCE_DIR}/helm/{kind.lower()}"} for kind in HELM_HOMES]
    settings = [f"{key}={value}" for key, value in addon.settings.items()]
    if addon.region_setting is not None:
        settings.append(f"{addon.region_setting}={region}")
    json_settings = [f"{key}={json.dumps(value)}" for key, value in addon.json_settings.items()]
    fetch = _fetch_steps(
        tools,
        [tools.kubectl, tools.helm],
        repository=addon.repository,
        tag=addon.tag,
        commit=addon.commit,
        checkout=checkout,
    )
    steps = [
        *fetch,
        {
            # The chart's subcharts, from the repositories its Chart.yaml names at their pinned versions.
            "name": "dependencies",
            "image": tools.git_image,
            "command": run_checked(tools.helm, "dependency", "update", chart),
            "env": helm_env,
        },
        {
            "name": "install",
            "image": tools.git_image,
            "command": run_checked(
                tools.helm,
                "upgrade",
                "--install",
                addon.release,
                chart,
                "--namespace",
                addon.namespace,
                *(["--create-namespace"] if addon.namespace not in BUILTIN_NAMESPACES else []),
                "--wait",
                "--timeout",
                HELM_TIMEOUT,
                *(arg for setting in settings for arg in ("--set", setting)),
                *(arg for setting in json_settings for arg in ("--set-json", setting)),
            ),
            "env": helm_env,
            "api": True,
        },
    ]
    return install_job_manifests(name=addon.name, tag=addon.tag, namespace=INSTALL_NAMESPACE, steps=steps, tools=tools)
