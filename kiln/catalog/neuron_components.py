"""The images of Neuron's Kubernetes components (device plugin, scheduler extension) for a Neuron SDK release. Stdlib
only.

Neuron publishes the two at the tags of its Helm chart's releases, each made for one Neuron SDK release
(platforms.json, neuron.kubernetes_components, with the source of every entry). A release with an entry gets its own
images; one without gets the newest entry's, and `describe` says so: kiln writes that line onto the objects it installs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.catalog.platforms import service_fact, version_key


@dataclass(frozen=True, kw_only=True)
class NeuronKubernetesComponents:
    """The device plugin and scheduler extension images a cluster of Neuron RELEASE runs, from chart CHART."""

    # The cluster's Neuron release (None: the cluster pins none) and the release whose chart names the images.
    release: str | None
    chart_release: str
    chart: str
    device_plugin: str
    scheduler_extension: str

    @property
    def own(self) -> bool:
        """Return whether the images are those of the cluster's own Neuron release."""
        return self.release == self.chart_release

    def describe(self) -> str:
        """Return one line: which chart's images these are and, where the release has none of its own, why."""
        chart = f"chart {self.chart} (Neuron {self.chart_release})"
        if self.own:
            return f"Neuron {self.release}: the images of {chart}"
        if self.release is None:
            return f"no Neuron release pinned: the images of {chart}, the newest kiln maps"
        return (
            f"Neuron {self.release}: no chart release names its images, so kiln runs those of {chart}, the newest it "
            "maps (platforms.json, neuron.kubernetes_components)"
        )


def _entries() -> dict[str, dict[str, str]]:
    return dict(service_fact("neuron", "kubernetes_components").value)


def mapped_neuron_releases() -> tuple[str, ...]:
    """Return the Neuron releases whose chart release names their Kubernetes components' images, oldest first."""
    return tuple(sorted(_entries(), key=version_key))


def neuron_kubernetes_components(release: str | None) -> NeuronKubernetesComponents:
    """Return the Kubernetes components of a cluster of Neuron RELEASE (None: none pinned): its own entry's images,
    else the newest entry's (NeuronKubernetesComponents.describe says which and why)."""
    entries = _entries()
    chart_release = release if release in entries else mapped_neuron_releases()[-1]
    entry = entries[chart_release]
    return NeuronKubernetesComponents(
        release=release,
        chart_release=chart_release,
        chart=entry["chart"],
        device_plugin=entry["device_plugin"],
        scheduler_extension=entry["scheduler_extension"],
    )
