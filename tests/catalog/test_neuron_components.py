"""The Neuron Kubernetes components per Neuron release, and why kiln keeps the device plugin (platforms.json)."""

from __future__ import annotations

import re

from kiln.catalog.facts import instance_type
from kiln.catalog.kubernetes import NEURON_DEVICE_RESOURCE, node_resources
from kiln.catalog.neuron import neuron_family
from kiln.catalog.neuron_components import mapped_neuron_releases, neuron_kubernetes_components
from kiln.catalog.platforms import service_fact

# The repositories Neuron publishes the two images in, each at a four-part tag.
IMAGE = r"public\.ecr\.aws/neuron/neuron-(device-plugin|scheduler):\d+\.\d+\.\d+\.\d+"


def test_a_release_with_a_chart_gets_that_charts_images() -> None:
    components = neuron_kubernetes_components("2.31.0")
    assert (components.chart, components.device_plugin, components.scheduler_extension) == (
        "1.9.0",
        "public.ecr.aws/neuron/neuron-device-plugin:2.31.0.0",
        "public.ecr.aws/neuron/neuron-scheduler:2.31.0.0",
    )
    assert components.own
    assert components.describe() == "Neuron 2.31.0: the images of chart 1.9.0 (Neuron 2.31.0)"


def test_a_release_without_a_chart_gets_the_newest_charts_images_and_says_why() -> None:
    newest = neuron_kubernetes_components(mapped_neuron_releases()[-1])
    for release in ("2.29.1", "2.32.0"):
        components = neuron_kubernetes_components(release)
        assert not components.own
        assert (components.device_plugin, components.scheduler_extension) == (
            newest.device_plugin,
            newest.scheduler_extension,
        )
        assert components.describe() == (
            f"Neuron {release}: no chart release names its images, so kiln runs those of chart {newest.chart} "
            f"(Neuron {newest.chart_release}), the newest it maps (platforms.json, neuron.kubernetes_components)"
        )
    assert neuron_kubernetes_components(None).describe().startswith("no Neuron release pinned: the images of chart")


def test_every_mapped_release_names_both_images_by_tag_in_neurons_repositories() -> None:
    fact = service_fact("neuron", "kubernetes_components")
    assert fact.source.startswith("https://github.com/aws-neuron/neuron-helm-charts/releases/tag/")
    for release in mapped_neuron_releases():
        components = neuron_kubernetes_components(release)
        assert re.fullmatch(IMAGE, components.device_plugin) and "device-plugin" in components.device_plugin
        assert re.fullmatch(IMAGE, components.scheduler_extension) and "scheduler" in components.scheduler_extension


def test_which_families_the_dra_driver_serves_is_recorded_as_the_sources_disagree() -> None:
    fact = service_fact("neuron", "dra_driver")
    dra = fact.value
    # Neuron's DRA page asks for trn2.48xlarge; EKS's page for any Trainium or Inferentia2 node (and chart 1.9.0
    # places the driver on trn1 and inf2 too). Both readings are kept, and the note says the question is open.
    assert dra["families_per_neuron_dra_page"] == ["trn2", "trn3"]
    assert dra["families_per_eks_guide"] == ["trn1", "trn2", "trn3", "inf2"]
    assert "families" not in dra
    assert "Ambiguous" in fact.note and "device-management-neuron.html" in fact.note and "b77a6f90" in fact.note
    for name in ("trn1.32xlarge", "trn1n.32xlarge", "inf2.48xlarge"):
        family = neuron_family(name)
        assert family in dra["families_per_eks_guide"] and family not in dra["families_per_neuron_dra_page"]


def test_the_device_plugin_stays_on_grounds_that_hold_under_either_reading() -> None:
    dra = service_fact("neuron", "dra_driver").value
    # Kubernetes 1.34 brings DRA, but the driver never shares a node with the device plugin, and kiln's jobs ask
    # for the plugin's resource (whole Neuron devices).
    assert dra["kubernetes_minimum"] == "1.34" and dra["beside_device_plugin_on_a_node"] is False
    for name in ("trn1.32xlarge", "inf2.48xlarge"):
        assert node_resources(name)[NEURON_DEVICE_RESOURCE] == instance_type(name).neuron_count > 0
