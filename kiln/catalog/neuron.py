"""AWS Neuron SDK releases kiln knows: each release's host packages, frameworks (what each trains and serves on which
Trainium/Inferentia family, and how supported), operating systems and PyTorch training container. Stdlib only.

The default release of a spec (default_neuron_release) is the newest one whose training framework is generally
supported on every Trainium family among its instance types, and that serves inference on every Inferentia family
among them. A path Neuron's documentation calls beta is never a default, because Neuron does not support it
generally: a user opts into one by pinning its release, and `kiln validate` warns. Where no release does a
family's work with general support, the newest that does it in a beta is the default, and where none does it at all,
the newest that supports the family (the spec rules then refuse it in one line). kiln's launcher runs PyTorch, so a
release trains (serves) on a family when one of its PyTorch frameworks does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kiln.catalog.facts import UnknownInstanceType, instance_type

RELEASES_PATH = Path(__file__).parent / "data" / "neuron_releases.json"
# How supported a framework's training or inference is, in the words of Neuron's release notes: generally available,
# a public beta, or no more (an announced end of support has taken effect). A private beta (access on request, no
# public package) is not catalogued: kiln cannot install it (absent_frameworks says so).
STATUSES = ("supported", "beta", "end-of-support")
# Ordering of STATUSES for choosing: lower is better; end-of-support is no support.
_RANK = {status: rank for rank, status in enumerate(STATUSES)}
# The PyTorch frameworks a release may have (its frameworks), each either catalogued or named absent with the reason.
FRAMEWORKS = ("torch-neuronx", "torchneuron")


@dataclass(frozen=True)
class FrameworkUse:
    """What a framework does for one use (training or inference): on which Neuron families, how supported."""

    status: str
    families: tuple[str, ...]

    def on(self, family: str) -> str | None:
        """Return the status of this use on FAMILY, or None where it does not run there (or support ended)."""
        if family in self.families and self.status != "end-of-support":
            return self.status
        return None


@dataclass(frozen=True)
class NeuronFramework:
    """One machine learning framework of a Neuron release (torch-neuronx: PyTorch/XLA; TorchNeuron: native)."""

    name: str
    package: str
    version: str
    torch: str | None
    python: tuple[str, ...]
    # The operating systems (kiln's names) Neuron's setup guide installs it on.
    os: tuple[str, ...]
    training: FrameworkUse
    inference: FrameworkUse
    source: str


@dataclass(frozen=True)
class NeuronRelease:
    """One AWS Neuron SDK release, as its release notes and setup guide describe it."""

    version: str
    date: str
    source: str
    packages: dict[str, str]
    packages_source: str
    os: tuple[str, ...]
    os_source: str
    families: tuple[str, ...]
    families_source: str
    frameworks: tuple[NeuronFramework, ...]
    # Framework name -> (why the release has none of it, the page that says so).
    absent: dict[str, tuple[str, str]]
    # The release's PyTorch training Deep Learning Container on public ECR (None where Neuron lists none), and the page
    # that lists it (or shows there is none).
    training_image: str | None
    training_image_source: str

    def training(self, family: str) -> tuple[str, NeuronFramework] | None:
        """Return the best (status, framework) that trains on FAMILY, or None where none does."""
        return _best(family, self.frameworks, "training")

    def inference(self, family: str) -> tuple[str, NeuronFramework] | None:
        """Return the best (status, framework) that serves inference on FAMILY, or None where none does."""
        return _best(family, self.frameworks, "inference")


def _best(family: str, frameworks: tuple[NeuronFramework, ...], use: str) -> tuple[str, NeuronFramework] | None:
    found = [(status, f) for f in frameworks if (status := getattr(f, use).on(family)) is not None]
    return min(found, key=lambda pair: _RANK[pair[0]]) if found else None


@cache
def _data() -> dict:
    return json.loads(RELEASES_PATH.read_text())


def _use(raw: dict) -> FrameworkUse:
    return FrameworkUse(status=raw["status"], families=tuple(raw["families"]))


def _release(version: str, raw: dict) -> NeuronRelease:
    image = raw["training_image"]
    return NeuronRelease(
        version=version,
        date=raw["date"],
        source=raw["source"],
        packages=dict(raw["packages"]),
        packages_source=raw["packages_source"],
        os=tuple(raw["os"]),
        os_source=raw["os_source"],
        families=tuple(raw["families"]),
        families_source=raw["families_source"],
        frameworks=tuple(
            NeuronFramework(
                name=name,
                package=f["package"],
                version=f["version"],
                torch=f["torch"],
                python=tuple(f["python"]),
                os=tuple(f["os"]),
                training=_use(f["training"]),
                inference=_use(f["inference"]),
                source=f["source"],
            )
            for name, f in raw["frameworks"].items()
        ),
        absent={name: (a["why"], a["source"]) for name, a in raw.get("absent_frameworks", {}).items()},
        training_image=image["value"],
        training_image_source=image["source"],
    )


def known_neuron_releases() -> tuple[str, ...]:
    """Return the Neuron SDK releases kiln knows, oldest first."""
    return tuple(sorted(_data()["releases"], key=_version_key))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def uncatalogued_reason(version: str) -> str | None:
    """Return one line saying why Neuron release VERSION, which is out, is not catalogued (kiln found no source for
    its host package versions, and guesses none), with the source; None for any other VERSION."""
    entry = _data()["uncatalogued"].get(version) if isinstance(version, str) else None
    if entry is None:
        return None
    return f"Neuron {version} ({entry['date']}) is out, but {entry['why']} ({entry['source']})"


@cache
def neuron_release(version: str) -> NeuronRelease:
    """Return Neuron SDK release VERSION; raise ValueError for one kiln does not know."""
    try:
        raw = _data()["releases"][version]
    except (KeyError, TypeError):
        known = ", ".join(known_neuron_releases())
        why = uncatalogued_reason(version)
        got = f"{version!r}: {why}" if why else repr(version)
        raise ValueError(f"software.neuron: got {got}, allowed: {known} (releases kiln knows)") from None
    return _release(version, raw)


def neuron_packages(version: str) -> dict[str, str]:
    """Return package name -> version pattern of Neuron SDK release VERSION; raise ValueError for an unknown one."""
    return dict(neuron_release(version).packages)


def neuron_driver(version: str) -> str:
    """Return the Neuron driver (aws-neuronx-dkms) version of release VERSION, without the package suffix pattern."""
    return neuron_packages(version)["aws-neuronx-dkms"].rstrip("*")


def neuron_driver_problem(version: str, driver: str, image: str) -> str | None:
    """Return one line when release VERSION's runtime cannot run on Neuron DRIVER (what IMAGE ships, where pods or
    containers bring the runtime): the runtime needs at least its own release's driver (driver_rule). None where it
    can. Raise ValueError for an unknown VERSION."""
    needed = neuron_driver(version)
    if _version_key(driver) >= _version_key(needed):
        return None
    rule = _data()["driver_rule"]
    fits = [v for v in known_neuron_releases() if _version_key(neuron_driver(v)) <= _version_key(driver)]
    where = f"; releases that run on it: {', '.join(fits)}" if fits else ""
    return (
        f"Neuron {version}'s runtime needs the Neuron driver {needed} or newer ({rule['source']}), and the {image} "
        f"ships driver {driver}{where}"
    )


def neuron_family(name: str) -> str | None:
    """Return the Neuron family of instance type NAME (trn1n is a Trn1 instance: 'trn1'), None without Neuron devices
    or for a type the catalog does not know (the spec rules report those)."""
    try:
        facts = instance_type(name)
    except UnknownInstanceType:
        return None
    if not facts.neuron_count:
        return None
    return _data()["accelerators"][facts.accelerator.name]


def _families(instance_types: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for name in instance_types if (f := neuron_family(name)) is not None))


def training_family(family: str) -> bool:
    """Return whether Neuron FAMILY is a Trainium one (its nodes train); the others are Inferentia (they serve)."""
    return family.startswith("trn")


def _fit(release: NeuronRelease, family: str, ceiling: int) -> bool:
    """Return whether RELEASE does FAMILY's work (training on Trainium, inference on Inferentia) at a status no worse
    than STATUSES[ceiling]."""
    best = release.training(family) if training_family(family) else release.inference(family)
    return best is not None and _RANK[best[0]] <= ceiling


def default_neuron_release(instance_types: Iterable[str]) -> str | None:
    """Return the Neuron release a spec of INSTANCE_TYPES gets unpinned, None where none has Neuron devices: the newest
    whose work on every Neuron family among them (training on Trainium, inference on Inferentia) is generally
    supported; failing that the newest where it is in beta; failing that the newest that supports
    every family at all (neuron_support_problem then names what does not work)."""
    families = _families(instance_types)
    if not families:
        return None
    newest_first = [neuron_release(v) for v in reversed(known_neuron_releases())]
    for ceiling in range(_RANK["end-of-support"]):
        for release in newest_first:
            if all(_fit(release, family, ceiling) for family in families):
                return release.version
    for release in newest_first:
        if all(family in release.families for family in families):
            return release.version
    return newest_first[0].version


def resolve_neuron_release(pinned: str | None, instance_types: Iterable[str]) -> str | None:
    """Return the Neuron release of a spec: its pin, else the default for its INSTANCE_TYPES (None without Neuron)."""
    return pinned if pinned is not None else default_neuron_release(instance_types)


def neuron_support_problem(version: str, name: str) -> str | None:
    """Return one line saying why Neuron release VERSION cannot do instance type NAME's work (training on Trainium,
    inference on Inferentia), with the source; None where it can (a beta included: neuron_beta_note says so) or NAME
    has no Neuron devices. Raise ValueError for an unknown VERSION."""
    release = neuron_release(version)
    family = neuron_family(name)
    if family is None:
        return None
    if family not in release.families:
        unsupported = _data()["unsupported_families"].get(family)
        why = (
            f"{unsupported['why']} ({unsupported['source']})"
            if unsupported
            else f"its packages support {', '.join(release.families)} ({release.families_source})"
        )
        return f"Neuron {version} does not support {name} ({family}): {why}"
    training = training_family(family)
    if (release.training(family) if training else release.inference(family)) is not None:
        return None
    work = "train" if training else "serve inference"
    reasons = _no_pytorch(release, "training" if training else "inference")
    fits = [v for v in known_neuron_releases() if _fit(neuron_release(v), family, _RANK["beta"])]
    where = f"; releases that {work} there: {', '.join(fits)}" if fits else ""
    return f"Neuron {version} does not {work} on {name} ({family}) with PyTorch: {'; '.join(reasons)}{where}"


def _no_pytorch(release: NeuronRelease, use: str) -> list[str]:
    """Say, per PyTorch framework, why RELEASE does not do USE with it: what the catalogued one does and where, or
    why the release has none of it (each with its source)."""
    catalogued = {framework.name: framework for framework in release.frameworks}
    reasons = []
    for name in FRAMEWORKS:
        if name in catalogued:
            reasons.append(_no_use(catalogued[name], use))
        elif name in release.absent:
            why, source = release.absent[name]
            reasons.append(f"no {name}: {why} ({source})")
    return reasons


def _no_use(framework: NeuronFramework, use: str) -> str:
    """Say why FRAMEWORK does not do USE on a family it does not do it on, with its source."""
    done = getattr(framework, use)
    if done.status == "end-of-support":
        return f"{framework.name}'s {use} support ended ({framework.source})"
    return f"{framework.name} does {use} on {', '.join(done.families) or 'no family'} only ({framework.source})"


def neuron_beta_note(version: str, name: str) -> str | None:
    """Return one line where Neuron release VERSION does instance type NAME's work only in a beta, None otherwise."""
    release = neuron_release(version)
    family = neuron_family(name)
    if family is None or family not in release.families:
        return None
    training = training_family(family)
    best = release.training(family) if training else release.inference(family)
    if best is None or best[0] == "supported":
        return None
    status, framework = best
    work = "training" if training else "inference"
    return (
        f"Neuron {version} offers {work} on {name} ({family}) only as {framework.name} {status} "
        f"({framework.source}); unpinned, kiln chooses {default_neuron_release([name])}"
    )


def release_summary(version: str) -> str:
    """Return one line describing Neuron release VERSION: its date, what its PyTorch trains and serves on (with the
    status of any beta), its operating systems and its PyTorch training container."""
    release = neuron_release(version)

    def uses(use: str) -> str:
        done = []
        for family in release.families:
            best = _best(family, release.frameworks, use)
            if best is not None:
                status, framework = best
                done.append(family if status == "supported" else f"{family} ({framework.name} {status})")
        return ", ".join(done) or "none"

    image = release.training_image or "none"
    return (
        f"{version} ({release.date}): trains {uses('training')}; serves {uses('inference')}; "
        f"os {', '.join(release.os)}; training image {image}"
    )
