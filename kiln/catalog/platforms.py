"""What each backend's image ships and what each AWS service requires, with the source of every fact. Stdlib only.

The data is `data/platforms.json`. Every fact there is an object with a `source`: the AWS documentation page,
release note or AWS repository file it comes from, and a `note` where the source is ambiguous (the data then
records the safe choice). Code reads platform facts only through this module, so a test can hold every fact
the code uses to its source.

- `image_profile(name)`: an image a backend boots and the components it already carries (which kiln adopts and
  never replaces at boot), with the check that proves a node's copy compatible.
- `service_fact(service, key)`: a requirement or a path of an AWS service (PCS, ParallelCluster, FSx, ...).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

PLATFORMS_PATH = Path(__file__).parent / "data" / "platforms.json"

# What an install step may find on an image: the components whose ownership kiln decides per image.
Component = Literal[
    "nvidia_driver",
    "neuron",
    "efa_installer",
    "nccl",
    "lustre_client",
    "enroot",
    "pyxis",
    "nvidia_container_toolkit",
    "pcs_agent",
    "pcs_slurm",
]
COMPONENTS: tuple[str, ...] = get_args(Component)
# The spec's software field (and kiln.bootstrap's SoftwarePins field) that pins each component kiln may install; the
# Lustre client follows the OS's repository and has none.
PIN_FIELDS = {
    "nvidia_driver": "nvidia_driver",
    "neuron": "neuron",
    "efa_installer": "efa_installer",
    "nccl": "nccl",
    "enroot": "enroot",
    "pyxis": "pyxis",
    "nvidia_container_toolkit": "nvidia_container_toolkit",
    "pcs_agent": "pcs_agent",
    "pcs_slurm": "pcs_slurm",
}
# What kiln installs where the image does not own a component (a stock image, or one a bake replaces it on) and the
# spec pins no other version: kiln's choice of each vendor's releases. NCCL has none (the framework or container
# brings it unless the spec pins one), nor has PCS's Slurm installer, whose 25.11 release no page kiln read names.
# Neuron has none either: its release depends on the spec's instance types (kiln.catalog.neuron.default_neuron_release,
# ClusterSpec.neuron_release), as Neuron's training frameworks support different families in different releases.
KILN_INSTALLS = {
    "nvidia_driver": "570.172.08",
    "efa_installer": "1.41.0",
    "enroot": "3.5.0",
    "pyxis": "0.20.0",
    "nvidia_container_toolkit": "1.17.8",
    # The newest agent release PCS's installer page lists (platforms.json, pcs.agent_versions).
    "pcs_agent": "1.3.1-1",
}
# The image each bootstrap target's nodes boot unless told otherwise: the one its backend publishes.
DEFAULT_IMAGES = {
    "pcs": "pcs-sample",
    "parallelcluster": "parallelcluster",
    "hyperpod": "hyperpod-slurm",
    "eks": "eks-al2023",
    "local": "stock",
}
# How a node proves the image's copy compatible: its version is at least the one recorded (a newer EFA installer
# keeps the older one's interfaces), its major version at least the recorded one's ("branch": a newer NVIDIA driver
# branch runs what an older one ran, and an image's patch release moves within a branch), or it is present.
Check = Literal["at-least", "branch", "present"]
CHECKS: tuple[str, ...] = ("at-least", "branch", "present")
# AWS's pages and repositories (Neuron's documentation site and repositories included), or the upstream project of
# non-AWS software a node runs (Slurm, NVIDIA's CUDA).
SOURCE = re.compile(
    r"https://(docs\.aws\.amazon\.com|aws\.amazon\.com|github\.com/(aws|awslabs|aws-samples|aws-neuron|SchedMD)"
    r"|awsdocs-neuron\.readthedocs-hosted\.com|[a-z0-9.-]+\.amazonaws\.com|docs\.nvidia\.com)/\S+"
)


class UnknownPlatformFact(KeyError):
    """A fact the code asked for is not in platforms.json."""


@dataclass(frozen=True, kw_only=True)
class Fact:
    """One platform fact: its value, where AWS says so, and what is ambiguous about it."""

    value: Any
    source: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Owned:
    """A component an image ships and owns: kiln adopts it, verified by CHECK against VERSION."""

    component: str
    version: str | None
    check: Check
    source: str
    note: str = ""
    # The image's operating systems that ship it; None: all of them.
    operating_systems: tuple[str, ...] | None = None

    @property
    def bundle_value(self) -> str:
        """Return what a node's install step checks its copy against (KILN_IMAGE_<COMPONENT>, adopt_component)."""
        if self.check == "present":
            return "present"
        if self.check == "branch":
            return f"branch:{self.version}"
        return self.version

    def describe(self) -> str:
        """Return the component and the version the image ships, in words."""
        if self.version is None:
            return self.component
        return f"{self.component} {self.version}"


@dataclass(frozen=True, kw_only=True)
class ImageProfile:
    """An image a backend boots: its name, what it is, the components it owns and its other facts."""

    name: str
    title: str
    # The bootstrap targets whose nodes boot it.
    targets: tuple[str, ...]
    owns: dict[str, Owned]
    facts: dict[str, Fact]

    def owned_on(self, os: str) -> dict[str, Owned]:
        """Return the components the image ships and owns on operating system OS."""
        return {
            name: owned
            for name, owned in self.owns.items()
            if owned.operating_systems is None or os in owned.operating_systems
        }

    def fact(self, key: str) -> Fact:
        """Return the image's fact KEY; raise UnknownPlatformFact when the data lacks it."""
        try:
            return self.facts[key]
        except KeyError:
            raise UnknownPlatformFact(f"image {self.name}: no fact {key!r} in {PLATFORMS_PATH.name}") from None


@lru_cache(maxsize=1)
def platform_data() -> dict[str, Any]:
    """Return platforms.json as loaded."""
    return json.loads(PLATFORMS_PATH.read_text())


def _fact(raw: dict[str, Any]) -> Fact:
    return Fact(value=raw["value"], source=raw["source"], note=raw.get("note", ""))


@cache
def image_profile(name: str) -> ImageProfile:
    """Return the image profile NAME; raise UnknownPlatformFact for one the data does not describe."""
    images = platform_data()["images"]
    if name not in images:
        raise UnknownPlatformFact(f"image profile: got {name!r}, allowed: {', '.join(images)}")
    raw = images[name]
    owns = {
        component: Owned(
            component=component,
            version=entry.get("version"),
            check=entry["check"],
            source=entry["source"],
            note=entry.get("note", ""),
            operating_systems=tuple(entry["operating_systems"]) if "operating_systems" in entry else None,
        )
        for component, entry in raw.get("owns", {}).items()
    }
    facts = {key: _fact(entry) for key, entry in raw.get("facts", {}).items()}
    return ImageProfile(name=name, title=raw["title"], targets=tuple(raw["targets"]), owns=owns, facts=facts)


def image_profile_for(target: str) -> str:
    """Return the image profile a bootstrap TARGET's (or a spec backend's) nodes boot by default: the image the
    backend publishes (HyperPod's for both its orchestrators)."""
    return DEFAULT_IMAGES[target]


def known_image_profiles() -> tuple[str, ...]:
    """Return the names of every image profile in the data."""
    return tuple(platform_data()["images"])


def service_fact(service: str, key: str) -> Fact:
    """Return fact KEY of SERVICE (pcs, parallelcluster, fsx_lustre, imagebuilder, ec2, ...)."""
    try:
        return _fact(platform_data()["services"][service][key])
    except KeyError:
        raise UnknownPlatformFact(f"service {service}: no fact {key!r} in {PLATFORMS_PATH.name}") from None


def root_device_names() -> dict[str, str]:
    """Return the device name each OS's AMIs boot from, by kiln's OS name (platforms.json, ec2.root_device_names)."""
    return dict(service_fact("ec2", "root_device_names").value)


def root_device_name(os: str) -> str:
    """Return the device name OS's AMIs boot from: the one a launch template must map to size the root volume (any
    other name adds a second, unformatted volume). Raise UnknownPlatformFact for an OS the data does not name."""
    names = root_device_names()
    if os not in names:
        raise UnknownPlatformFact(f"root device: no OS {os!r} in {PLATFORMS_PATH.name}, allowed: {', '.join(names)}")
    return names[os]


def pcs_slurm_versions() -> dict[str, str | None]:
    """Return the Slurm versions a new PCS cluster may run, each with PCS's end of support (None: not published)."""
    return dict(service_fact("pcs", "slurm_versions").value)


def newest_pcs_slurm() -> str:
    """Return the newest Slurm version PCS runs: what a PCS cluster gets unless the spec pins another."""
    return max(pcs_slurm_versions(), key=version_key)


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """Return a sort key that orders dotted versions numerically: 1.9 < 1.10, 580.65.06 < 580.95.05."""
    return tuple((int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"[.+~-]", version))


def at_least(have: str, want: str) -> bool:
    """Return True when version HAVE is WANT or newer."""
    return version_key(have) >= version_key(want)


def lustre_efa_interfaces(instance: str, network_cards: int, efa_supported: bool) -> int:
    """Return how many EFA interfaces a client of type INSTANCE gives LNet for FSx for Lustre: AWS's default per
    type (8 on the p5 and p6 classes), else 2 with several network cards, 1 with one; 0 where FSx takes no EFA
    clients (trn2) or the type has no EFA."""
    family = instance.split(".", 1)[0]
    if not efa_supported or family in service_fact("fsx_lustre", "efa_excluded_families").value:
        return 0
    interfaces = service_fact("fsx_lustre", "efa_lnet").value["interfaces"]
    if instance in interfaces:
        return interfaces[instance]
    return interfaces["multi_card"] if network_cards > 1 else interfaces["single_card"]
