"""What a bundle's nodes install from where: signed package repositories, pinned file downloads, npm tarballs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kiln.bootstrap.checks import BootstrapInputError
from kiln.bootstrap.config import BootstrapConfig
from kiln.catalog import instance_type

ARTIFACTS_PATH = Path(__file__).parent / "artifacts.json"

_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}
_DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_REPO_ARCH = {"x86_64": "x86_64", "arm64": "sbsa"}
_CODENAME = {"ubuntu2204": "jammy", "ubuntu2404": "noble", "debian12": "bookworm"}


def _variable_prefix(kind: str, name: str) -> str:
    return f"KILN_{kind}_" + name.upper().replace("-", "_")


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One file download of one bundle: where from, which version, which digest ('' when none is known)."""

    name: str
    version: str
    url: str
    sha256: str
    # True when the digest is the publisher's (artifacts.json); False when it comes from the lock or is missing.
    published: bool
    # Where the publisher signs the file instead (a detached signature at URL.sig): its key's URL and the primary
    # fingerprint kiln pins; '' for files checked by sha256.
    signature_key_url: str = ""
    signature_fingerprint: str = ""
    # A git repository checked out at this commit, which the node verifies ('' for a file download), and the
    # submodules its build needs (at the commits that tree pins).
    commit: str = ""
    submodules: tuple[str, ...] = ()
    # An npm registry tarball's published dist.integrity (sha512-BASE64), which the node checks instead of a sha256.
    integrity: str = ""

    @property
    def variable_prefix(self) -> str:
        return _variable_prefix("ARTIFACT", self.name)

    @property
    def anchor(self) -> str:
        """Return what a node checks the download against: commit, signature, sha256, or '' (nothing)."""
        if self.commit:
            return "commit"
        if self.signature_fingerprint:
            return "signature"
        if self.integrity:
            return "integrity"
        return "sha256" if self.sha256 else ""

    @property
    def verifiable(self) -> bool:
        """Return whether a node can check the download: by a pinned commit, a digest, or a publisher's signature."""
        return bool(self.anchor)

    def bundle_env(self) -> dict[str, str]:
        """Return the bundle.env values the node's fetch_artifact reads."""
        prefix = self.variable_prefix
        return {
            f"{prefix}_URL": self.url,
            f"{prefix}_VERSION": self.version,
            f"{prefix}_SHA256": self.sha256,
            f"{prefix}_SIGNATURE_KEY_URL": self.signature_key_url,
            f"{prefix}_SIGNATURE_FINGERPRINT": self.signature_fingerprint,
            f"{prefix}_COMMIT": self.commit,
            f"{prefix}_SUBMODULES": " ".join(self.submodules),
            # Only npm's tarballs have one: other bundles' bundle.env stays as it was.
            **({f"{prefix}_INTEGRITY": self.integrity} if self.integrity else {}),
        }


@dataclass(frozen=True, kw_only=True)
class Repository:
    """One vendor package repository of one bundle, trusted only through the signing key's pinned fingerprint."""

    name: str
    key_url: str
    fingerprint: str
    # apt: "URI SUITE [COMPONENT...]" after `deb [signed-by=...]`; dnf: the baseurl. The other one is ''.
    apt_source: str
    baseurl: str

    @property
    def variable_prefix(self) -> str:
        return _variable_prefix("REPO", self.name)

    def bundle_env(self) -> dict[str, str]:
        """Return the bundle.env values the node's add_signed_repository reads."""
        prefix = self.variable_prefix
        return {
            f"{prefix}_KEY_URL": self.key_url,
            f"{prefix}_FINGERPRINT": self.fingerprint,
            f"{prefix}_APT_SOURCE": self.apt_source,
            f"{prefix}_BASEURL": self.baseurl,
        }


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return json.loads(ARTIFACTS_PATH.read_text())


def artifact_table() -> dict[str, dict[str, Any]]:
    """Return the file downloads of artifacts.json keyed by name."""
    return {entry["name"]: entry for entry in _table()["files"]}


@dataclass(frozen=True, kw_only=True)
class PythonPackage:
    """A wheel a node installs from PyPI: pinned by version and checked by pip against its published sha256."""

    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        """Return the pip requirement line that installs exactly this wheel: name==version --hash=sha256:..."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def python_package(name: str) -> PythonPackage:
    """Return python package NAME of artifacts.json."""
    entry = {entry["name"]: entry for entry in _table()["python_packages"]}[name]
    return PythonPackage(name=entry["name"], version=entry["version"], sha256=entry["sha256"])


def npm_table() -> dict[str, dict[str, Any]]:
    """Return the npm registry tarballs of artifacts.json keyed by name."""
    return {entry["name"]: entry for entry in _table()["npm_packages"]}


def npm_version(name: str) -> str:
    """Return the version of npm package NAME (artifacts.json's npm_packages) kiln installs."""
    return npm_table()[name]["version"]


def resolve_npm_package(config: BootstrapConfig, name: str) -> Artifact:
    """Return npm package NAME as CONFIG's nodes download it: its architecture's build, checked by its integrity."""
    entry = npm_table()[name]
    builds = entry["builds"]
    build = builds.get("any") or builds.get(config.architecture)
    if build is None:
        raise BootstrapInputError(f"npm package {name}: has no build for {config.architecture} ({', '.join(builds)})")
    return Artifact(
        name=name,
        version=entry["version"],
        url=build["tarball"],
        sha256="",
        published=True,
        integrity=build["integrity"],
    )


def _npm_wanted(config: BootstrapConfig) -> tuple[str, ...]:
    """Return the npm packages CONFIG's install steps use: Node 24, npm and code-server where code-server runs."""
    return ("node", "npm", "code-server") if config.code_server_role else ()


def repository_table() -> dict[str, dict[str, Any]]:
    """Return the package repositories of artifacts.json keyed by name."""
    return {entry["name"]: entry for entry in _table()["repositories"]}


def _wanted(config: BootstrapConfig) -> dict[str, bool]:
    """Return, for every repository and file by name, whether CONFIG's install steps use it."""
    if config.profile.distro_software:
        # The distribution's packages serve every install step: no vendor repository or release.
        return {}
    facts = [instance_type(name) for name in config.instance_types]
    pins = config.software
    gpus = any(f.gpu_count for f in facts)
    neuron = any(f.neuron_count for f in facts)
    apt = config.os.startswith("ubuntu")
    slurm_containers = config.containers and config.runs_slurm
    dcgm = gpus and "dcgm" in config.exporters
    return {
        "cuda": gpus and bool(pins.nvidia_driver or pins.nccl or dcgm),
        "neuron": neuron and bool(pins.neuron),
        "fsx-lustre": config.lustre and apt,
        "nvidia-container-toolkit": config.containers and gpus and bool(pins.nvidia_container_toolkit),
        "efa-installer": any(f.efa_supported for f in facts) and bool(pins.efa_installer),
        "enroot": slurm_containers and bool(pins.enroot),
        "pyxis": slurm_containers and bool(pins.pyxis),
        "pcs-agent": config.profile.runs_pcs_agent and bool(pins.pcs_agent),
        "pcs-slurm": config.profile.runs_pcs_agent and bool(pins.pcs_slurm),
        "node-exporter": "node" in config.exporters and bool(pins.node_exporter),
        "prometheus": config.prometheus_agent and bool(pins.prometheus),
    }


def _fill(template: str, config: BootstrapConfig, version: str = "") -> str:
    if "{region}" in template and not config.region:
        raise BootstrapInputError(f"{template}: needs the cluster's region (a regional download)")
    return template.format(
        version=version,
        region=config.region or "",
        major=config.software.slurm or "",
        arch=_ARCH[config.architecture],
        deb_arch=_DEB_ARCH[config.architecture],
        repo_arch=_REPO_ARCH[config.architecture],
        os=config.os,
        codename=_CODENAME.get(config.os, ""),
    )


def resolve_artifact(config: BootstrapConfig, name: str) -> Artifact:
    """Return file NAME with its URL filled in for CONFIG and its digest (published first, then the lock)."""
    entry = artifact_table()[name]
    version = getattr(config.software, entry["version_from"])
    if not version:
        raise BootstrapInputError(f"artifact {name}: software.{entry['version_from']} is not pinned")
    url = _fill(entry["url"], config, version)
    if "commit" in entry:
        # Built from source: the commit id names the whole tree, submodule pins included.
        if version not in entry["commit"]:
            pinned = ", ".join(entry["commit"])
            raise BootstrapInputError(
                f"software.{entry['version_from']}: got {version}, which kiln has no commit pin for; allowed: {pinned}"
            )
        return Artifact(
            name=name,
            version=version,
            url=url,
            sha256="",
            published=True,
            commit=entry["commit"][version],
            submodules=tuple(entry["submodules"]),
        )
    published = entry["sha256"].get(version, "")
    if isinstance(published, dict):
        # A build per architecture, each with its own digest.
        published = published.get(config.architecture, "")
    digest = published or config.locked.get(url, "")
    signature = entry.get("signature")
    if signature is not None:
        # The publisher signs it: the signature decides, not a digest (a lock has none to give).
        return Artifact(
            name=name,
            version=version,
            url=url,
            sha256="",
            published=True,
            signature_key_url=_fill(signature["key_url"], config),
            signature_fingerprint=signature["fingerprint"],
        )
    return Artifact(name=name, version=version, url=url, sha256=digest, published=bool(published))


def resolve_repository(config: BootstrapConfig, name: str) -> Repository:
    """Return repository NAME as CONFIG's image OS reaches it: apt on Ubuntu, dnf on Amazon Linux."""
    entry = repository_table()[name]
    manager = "apt" if config.os.startswith("ubuntu") else "dnf"
    if manager not in entry:
        raise BootstrapInputError(f"repository {name}: has no {manager} form for {config.os}")
    form = entry[manager]
    return Repository(
        name=name,
        key_url=_fill(form["key_url"], config),
        fingerprint=form["fingerprint"],
        apt_source=_fill(form["source"], config) if manager == "apt" else "",
        baseurl=_fill(form["baseurl"], config) if manager == "dnf" else "",
    )


def bundle_artifacts(config: BootstrapConfig) -> tuple[Artifact, ...]:
    """Return every file CONFIG's install steps may download, resolved."""
    wanted = _wanted(config)
    files = tuple(resolve_artifact(config, name) for name in artifact_table() if wanted.get(name))
    return files + tuple(resolve_npm_package(config, name) for name in _npm_wanted(config))


def lockable_artifacts(config: BootstrapConfig) -> tuple[Artifact, ...]:
    """Return the files CONFIG's nodes download whose publisher gives no digest: the lock's business."""
    return tuple(artifact for artifact in bundle_artifacts(config) if not artifact.published)


def bundle_repositories(config: BootstrapConfig) -> tuple[Repository, ...]:
    """Return every package repository CONFIG's install steps may add, resolved."""
    wanted = _wanted(config)
    return tuple(resolve_repository(config, name) for name in repository_table() if wanted.get(name))
