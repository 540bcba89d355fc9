"""compute.image: what nodes boot, a bake, PCS's base image, and pins on components the image owns."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.neuron import known_neuron_releases, neuron_driver_problem
from kiln.catalog.platforms import PIN_FIELDS, image_profile, service_fact
from kiln.contracts.backends import PARALLELCLUSTER, PCS
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem, shown
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at

NO_BAKE_IN_CI = (
    "is not for a short-lived environment (a bake takes tens of minutes and its AMIs outlive the environment): "
    "bake once from a long-lived spec (its <name>-image stack, `kiln ami build`), then set compute.image.ami_id "
    "to that AMI and bake: false"
)


def image(spec: ClusterSpec) -> Iterator[Problem]:
    """An AMI or a bake only where nodes boot it; a bake starts from the backend's own image and lasts."""
    image = spec.compute.image
    if spec.platform.uses_kubernetes:
        if image.ami_id is not None:
            yield problem_at(
                ("compute", "image", "ami_id"),
                "has no effect with EKS: its nodes boot the EKS-optimized accelerated AMI of their instance type",
                BACKEND,
                ORCHESTRATOR,
            )
        if image.bake:
            yield problem_at(
                ("compute", "image", "bake"),
                "is not offered with EKS: EKS's accelerated AMI brings the driver and container toolkit, and kiln "
                "installs only EFA and the Lustre client there",
                BACKEND,
                ORCHESTRATOR,
            )
        return
    if not image.bake:
        return
    if image.ami_id is None:
        yield problem_at(
            ("compute", "image", "ami_id"),
            f"is required with bake: the image kiln bakes on, {spec.platform.bake_parent}",
            ("compute", "image", "bake"),
            BACKEND,
        )
    if spec.ci.ttl_hours is not None:
        yield problem_at(("compute", "image", "bake"), NO_BAKE_IN_CI, ("ci", "ttl_hours"))


def pcs_image(spec: ClusterSpec) -> Iterator[Problem]:
    """compute.image.base only on PCS, own with its AMI; a PCS sample AMI must exist for the OS."""
    image = spec.compute.image
    base = ("compute", "image", "base")
    if image.base is not None and spec.platform is not PCS:
        yield problem_at(
            base, f"is for pcs only: {spec.compute.backend}'s nodes boot its own image (unset it)", BACKEND
        )
        return
    if image.base == "own" and image.ami_id is None:
        yield problem_at(("compute", "image", "ami_id"), "is required with base: own (the AMI of your own)", base)
    if image.base == "stock":
        yield from _stock_pcs_image(spec)
    for field in ("pcs_agent", "pcs_slurm"):
        if spec.platform is not PCS and getattr(spec.software, field) is not None:
            yield problem_at(
                ("software", field), f"has no effect on {spec.compute.backend}: PCS's nodes alone run it", BACKEND
            )


def _stock_pcs_image(spec: ClusterSpec) -> Iterator[Problem]:
    """A stock AMI becomes PCS-ready only in a bake, from PCS's regional installers at pinned releases."""
    base = ("compute", "image", "base")
    if not spec.compute.image.bake:
        yield problem_at(
            ("compute", "image", "bake"),
            "must be true with base: stock: PCS's agent must be on the image before a node registers, so kiln bakes "
            "it (and Slurm) into the stock AMI",
            base,
        )
    if spec.region is None:
        yield problem_at(("region",), "is required with base: stock: PCS publishes its installers per region", base)
    release = spec.software.pcs_slurm
    if release is None:
        yield problem_at(
            ("software", "pcs_slurm"),
            f"is required with base: stock: the release of PCS's Slurm {spec.slurm_version} installer to bake, such as "
            f"{spec.slurm_version}.2-1 ({service_fact('pcs', 'installers').source})",
            base,
        )
    elif not release.startswith(f"{spec.slurm_version}."):
        yield problem_at(
            ("software", "pcs_slurm"),
            f"got {shown(release)}, which is no release of the cluster's Slurm {spec.slurm_version}",
            ("software", "slurm"),
        )


def image_os(spec: ClusterSpec) -> Iterator[Problem]:
    """The image nodes boot exists for the OS the spec names."""
    profile = image_profile(spec.node_image)
    if "operating_systems" not in profile.facts:
        return
    offered = profile.fact("operating_systems")
    if spec.image_os in offered.value:
        return
    hint = (
        " or base: own with ami_id (your own AMI with the PCS agent and Slurm)" if profile.name == "pcs-sample" else ""
    )
    yield problem_at(
        ("compute", "image", "os"),
        f"got {spec.image_os}, but the {profile.title} runs {', '.join(offered.value)} only ({offered.source}): "
        f"set os: {offered.value[0]}{hint}",
        BACKEND,
        ("compute", "image", "base"),
    )


def image_ownership(spec: ClusterSpec) -> Iterator[Problem]:
    """A pin on a component the backend's image owns differs from it only where a bake replaces it."""
    profile = image_profile(spec.node_image)
    owned = profile.owned_on(spec.image_os)
    replace = spec.software.replace
    for component, entry in owned.items():
        field = PIN_FIELDS.get(component)
        pinned = getattr(spec.software, field) if field else None
        if field is None or pinned is None or component in replace or pinned == entry.version:
            continue
        if component == "neuron":
            # The pin names a Neuron release, whose runtime the pods or containers bring; the image keeps its driver.
            driver = entry.version
            known = pinned in known_neuron_releases()
            if known and driver is not None and (problem := neuron_driver_problem(pinned, driver, profile.title)):
                yield problem_at(("software", field), f"got {shown(pinned)}: {problem}", BACKEND)
            continue
        yield problem_at(
            ("software", field),
            f"got {shown(pinned)}, but the {profile.title} ships {entry.describe()} and kiln adopts it "
            f"({entry.source}); "
            f"leave it unset, or replace it in a bake (software.replace: [{component}] with compute.image.bake)",
            BACKEND,
        )
    if spec.storage.lustre is not None and spec.platform is PARALLELCLUSTER and "lustre_client" not in owned:
        lustre = profile.owns["lustre_client"]
        yield problem_at(
            ("compute", "image", "os"),
            f"got {spec.image_os}, where the {profile.title} has no Lustre client ({lustre.source}), and "
            "ParallelCluster "
            f"mounts FSx itself: choose {' or '.join(lustre.operating_systems or ())}",
            ("storage", "lustre"),
        )
    for index, component in enumerate(replace):
        path = ("software", "replace", index)
        if replace.index(component) != index:
            yield problem_at(path, f"names {component} twice")
        elif not spec.compute.image.bake:
            yield problem_at(
                path,
                f"replaces the image's {component} only in a bake: set compute.image.bake (a node cannot swap a "
                "loaded driver or library at boot)",
                ("compute", "image", "bake"),
            )
        elif PIN_FIELDS.get(component) is None:
            yield problem_at(path, f"names {component}, which kiln has no pin for: it follows the OS's repository")
