"""Give the launcher's venv the torch this machine already has, instead of downloading ~1 GB per `up`.

The bootstrap installs the launcher wheel with --no-deps and pulls torch from PyPI
only when a version is pinned. Locally, torch and its dependencies are linked
from the environment running kiln into a directory under the prefix, which a .pth
file puts on the venv's path: only those distributions, never the CDK beside them.
numpy goes with them: torch uses it without requiring it, and warns at every import
without it (kiln's launcher extra installs it beside torch).
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from kiln.local.errors import LocalError

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
PTH_FILE = "kiln-local-torch.pth"
# What torch imports when it is there but does not list, not even as an extra: without numpy every
# `import torch` warns "Failed to initialize NumPy". Linked with torch when installed here.
TORCH_COMPANIONS = ("numpy",)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_holds(marker: str) -> bool:
    if not marker.strip():
        return True
    if "extra" in marker:
        return False
    try:
        from packaging.markers import InvalidMarker, Marker
    except ImportError:
        # Without packaging, a requirement counts when it is installed (see closure).
        return True
    try:
        return Marker(marker).evaluate()
    except InvalidMarker:
        return True


def requirement_names(requires: list[str] | None) -> list[str]:
    """Return the distribution names of REQUIRES whose markers hold here (never those only an extra asks for)."""
    names = []
    for requirement in requires or ():
        requirement_part, _, marker = requirement.partition(";")
        if not _marker_holds(marker):
            continue
        match = _NAME.match(requirement_part)
        if match:
            names.append(match.group(1))
    return names


def closure(root: str = "torch") -> list[metadata.Distribution]:
    """Return ROOT's distribution and every installed one it needs; requirements not installed are skipped.

    Skipping is what evaluates the markers: a dependency for another platform or Python is not installed here.
    """
    seen: dict[str, metadata.Distribution] = {}
    pending = [root]
    while pending:
        name = _canonical(pending.pop())
        if name in seen:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name == _canonical(root):
                raise
            continue
        seen[name] = distribution
        pending.extend(requirement_names(distribution.requires))
    return list(seen.values())


def top_level_entries(distribution: metadata.Distribution) -> set[Path]:
    """Return the site-packages entries (packages, modules, .dist-info) DISTRIBUTION installed."""
    files = distribution.files
    if not files:
        raise LocalError(f"{distribution.metadata['Name']} lists no installed files (no RECORD); cannot link it")
    entries = set()
    for file in files:
        if not file.parts or file.parts[0] in ("..", "__pycache__") or file.parts[0].endswith(".pth"):
            continue
        entries.add(Path(distribution.locate_file(file.parts[0])))
    return entries


def venv_site_packages(venv: Path) -> Path:
    """Return the venv's purelib directory, asking its own interpreter."""
    code = "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); print(*sys.version_info[:2], sep='.')"
    result = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    if result.returncode != 0:
        raise LocalError(f"the launcher venv {venv} does not run: {' '.join(result.stderr.split())}")
    purelib, version = result.stdout.split()
    here = "{}.{}".format(*sys.version_info[:2])
    if version != here:
        raise LocalError(
            f"the launcher venv runs Python {version} but kiln's torch is built for {here}; "
            "create kiln's venv with the same Python as the bootstrap's python3"
        )
    return Path(purelib)


def torch_distributions() -> list[metadata.Distribution]:
    """Return torch's closure and that of each installed companion (numpy), each distribution once."""
    found = {_canonical(d.metadata["Name"]): d for d in closure()}
    for companion in TORCH_COMPANIONS:
        try:
            found.update((_canonical(d.metadata["Name"]), d) for d in closure(companion))
        except metadata.PackageNotFoundError:
            continue
    return list(found.values())


def link_torch(venv: Path, link_dir: Path) -> str | None:
    """Link torch's closure and numpy into LINK_DIR and put them on VENV's path; return what was linked, or None."""
    try:
        distributions = torch_distributions()
    except metadata.PackageNotFoundError:
        return None
    site_packages = venv_site_packages(venv)
    link_dir.mkdir(parents=True, exist_ok=True)
    for distribution in distributions:
        for entry in top_level_entries(distribution):
            link = link_dir / entry.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(entry)
    (site_packages / PTH_FILE).write_text(f"{link_dir}\n")
    names = {_canonical(d.metadata["Name"]): d for d in distributions}
    torch = names["torch"]
    companions = "".join(f", {name} {names[name].version}" for name in TORCH_COMPANIONS if name in names)
    return f"torch {torch.version} from {Path(torch.locate_file('')).resolve()}{companions}"


def missing_companions() -> list[str]:
    """Return the companions of torch (numpy) this environment lacks."""
    missing = []
    for name in TORCH_COMPANIONS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing
