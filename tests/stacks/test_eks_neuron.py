"""A trn1.32xlarge group on backend eks: Neuron nodes, the Neuron add-ons, no NVIDIA device plugin, cdk-nag clean."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kiln.catalog.neuron import resolve_neuron_release
from kiln.catalog.neuron_components import neuron_kubernetes_components
from kiln.constructs.neuron_addons import NEURON_COMPONENTS_ANNOTATION
from kiln.spec import load_spec
from kiln.stacks.synth import nag_report, synthesize

SPEC = """\
# EKS for Trainium training: a trn1 node group with EFA in one AZ, Lustre through the FSx CSI driver.
name: trn-eks
region: us-east-1
availability_zone: us-east-1a
network: {second_availability_zone: us-east-1b}
storage:
  lustre:
    deployment: PERSISTENT_2
    storage_gib: 2400
    throughput_per_tib: 250
compute:
  backend: eks
  groups:
    - name: trn1
      instance_type: trn1.32xlarge
      min_count: 0
      max_count: 4
      capacity: {type: on-demand}
      root_volume_gib: 512
ci: {ttl_hours: null}
tags: {team: ml}
"""


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Synthesize the spec once, cdk-nag on (an unacknowledged finding fails synthesis); return the compute template."""
    spec_path = tmp_path_factory.mktemp("spec") / "trn-eks.yaml"
    spec_path.write_text(SPEC)
    _, outdir = synthesize(load_spec(spec_path), tmp_path_factory.mktemp("cdk.out"))
    return outdir, json.loads((outdir / "trn-eks-compute.template.json").read_text())


def _resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def _kubernetes_objects(template: dict) -> dict[tuple[str, str], dict]:
    """Return the objects of every manifest without deploy-time values (Neuron's, the training operator's)."""
    return {
        (o["kind"], o["metadata"]["name"]): o
        for manifest in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource")
        if isinstance(manifest["Manifest"], str)
        for o in json.loads(manifest["Manifest"])
    }


def _image(workload: dict) -> str:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container["image"]


def test_trn1_group_boots_the_eks_neuron_image(assembly) -> None:
    _, template = assembly
    groups = {g["Labels"]["kiln.io/node-group"]: g for g in _resources(template, "AWS::EKS::Nodegroup")}
    assert set(groups) == {"system", "trn1"}
    assert groups["trn1"]["AmiType"] == "AL2023_x86_64_NEURON"
    assert groups["system"]["AmiType"] == "AL2023_x86_64_STANDARD"
    assert "nvidia.com/gpu.present" not in groups["trn1"]["Labels"]


def test_neuron_device_plugin_and_scheduler_run_pinned_images(assembly) -> None:
    _, template = assembly
    objects = _kubernetes_objects(template)
    assert re.fullmatch(
        r"public\.ecr\.aws/neuron/neuron-device-plugin:\d+\.\d+\.\d+\.\d+",
        _image(objects[("DaemonSet", "neuron-device-plugin")]),
    )
    assert re.fullmatch(
        r"public\.ecr\.aws/neuron/neuron-scheduler:\d+\.\d+\.\d+\.\d+",
        _image(objects[("Deployment", "k8s-neuron-scheduler")]),
    )
    (cluster,) = _resources(template, "AWS::EKS::Cluster")
    assert re.fullmatch(
        rf"registry\.k8s\.io/kube-scheduler:v{re.escape(cluster['Version'])}\.\d+",
        _image(objects[("Deployment", "my-scheduler")]),
    )
    (config,) = objects[("ConfigMap", "my-scheduler-config")]["data"].values()
    (extender,) = json.loads(config)["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == ["aws.amazon.com/neuron", "aws.amazon.com/neuroncore"]


def test_device_plugin_and_extension_run_the_chart_images_of_the_clusters_neuron_release(assembly) -> None:
    _, template = assembly
    objects = _kubernetes_objects(template)
    # The Neuron release of the spec (unpinned: the one that trains on trn1), and the chart release kiln maps it to.
    release = resolve_neuron_release(None, ["trn1.32xlarge"])
    components = neuron_kubernetes_components(release)
    plugin = objects[("DaemonSet", "neuron-device-plugin")]
    extension = objects[("Deployment", "k8s-neuron-scheduler")]
    assert (_image(plugin), _image(extension)) == (components.device_plugin, components.scheduler_extension)
    # Each object says which chart release's images it runs, and why where the release has none of its own.
    for workload in (plugin, extension):
        assert workload["metadata"]["annotations"] == {NEURON_COMPONENTS_ANNOTATION: components.describe()}
    assert f"Neuron {release}" in components.describe()


def test_no_nvidia_device_plugin_but_efa_fsx_and_the_autoscaler(assembly) -> None:
    _, template = assembly
    charts = {c["Chart"] for c in _resources(template, "Custom::AWSCDK-EKS-HelmChart")}
    assert charts == {"aws-efa-k8s-device-plugin", "aws-fsx-csi-driver", "cluster-autoscaler"}
    assert "nvidia" not in json.dumps(list(_kubernetes_objects(template).values())).lower()


def test_cdk_nag_raised_nothing_unacknowledged(assembly) -> None:
    outdir, _ = assembly
    report = nag_report(outdir)
    assert report.violations == []
    assert report.acknowledged and all(reason.strip() for _, reason in report.acknowledged)
