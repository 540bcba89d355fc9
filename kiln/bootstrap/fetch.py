"""How a cloud node gets its bundle: fetch.sh, with deploy-time values passed as arguments or in a manifest.

A node runs only a bundle it has checked: fetch.sh refuses to run without the bundle's digest (bundle_digest, which
kiln computes when it renders the bundle) and unpacks nothing from a zip whose content does not match it. PCS and
EKS nodes run fetch.sh from their user data with the values and the digest as arguments. A ParallelCluster node's
OnNodeConfigured action, which ParallelCluster never updates on a head node, is resolve-bootstrap.sh with only
stable arguments, read from a bucket of the cluster's own that only its deploy writes: it reads the manifest
(node_manifest) from an SSM parameter the compute stack rewrites at each deploy, checks fetch.sh against its digest
and runs it with the manifest, and fetch.sh checks the bundle against the manifest's digest before it unpacks it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kiln.bootstrap.checks import BootstrapInputError
from kiln.bootstrap.cluster_env import check_cluster_env

FETCH_SCRIPT = Path(__file__).parent / "scripts" / "fetch.sh"
FETCH_SCRIPT_ON_NODE = "/opt/kiln/fetch.sh"
# Frozen: a ParallelCluster head node's OnNodeConfigured Script (see the script's header).
RESOLVE_SCRIPT = Path(__file__).parent / "scripts" / "resolve-bootstrap.sh"


def file_sha256(path: Path) -> str:
    """Return the sha256 of the file at PATH, as resolve-bootstrap.sh checks fetch.sh."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bundle_digest(directory: Path) -> str:
    """Return the digest of a bundle directory's content, which fetch.sh recomputes from the zip before unpacking.

    The sha256 of one "<sha256 of the file>  <relative path>" line per file (sha256sum's format), in path order;
    every file counts, dot files too, and links are followed, as CDK's zip of an asset directory takes them.
    Directories, timestamps and modes do not count, so the zip's maker does not matter.
    """
    files: list[tuple[str, str]] = []
    for parent, _, names in os.walk(directory, followlinks=True):
        for name in names:
            path = Path(parent) / name
            if path.is_file():
                files.append((path.relative_to(directory).as_posix(), file_sha256(path)))
    listing = "".join(f"{digest}  {relative}\n" for relative, digest in sorted(files))
    return hashlib.sha256(listing.encode()).hexdigest()


def node_manifest(
    *,
    fetch_url: str,
    fetch_sha256: str,
    bundle_url: str,
    entry_point: str,
    values: Mapping[str, str],
    bundle_sha256: str,
) -> dict[str, Any]:
    """Return the manifest resolve-bootstrap.sh and fetch.sh read (values may be CDK tokens).

    fetch: fetch.sh's S3 URL and sha256; bundle: the zip's S3 URL, entry point and bundle_digest (fetch.sh refuses a
    manifest without it); env: the KILN_NAME values for cluster.env.
    """
    check_cluster_env(values)
    return {
        "fetch": {"url": fetch_url, "sha256": fetch_sha256},
        "bundle": {"url": bundle_url, "entry_point": entry_point, "sha256": bundle_sha256},
        "env": {name: values[name] for name in sorted(values)},
    }


def fetch_arguments(
    bundle_url: str, entry_point: str, values: Mapping[str, str], role: str | None = None, *, bundle_sha256: str
) -> list[str]:
    """Return fetch.sh's arguments: bundle URL, entry point, the bundle's digest (bundle_digest), role, then
    KILN_NAME=VALUE pairs (tokens allowed)."""
    check_cluster_env(values)
    if not bundle_sha256:
        raise BootstrapInputError(f"{bundle_url}: no bundle digest: fetch.sh runs only a bundle it can check")
    role_args = ["--role", role] if role else []
    pairs = (f"{name}={values[name]}" for name in sorted(values))
    return [bundle_url, entry_point, "--sha256", bundle_sha256, *role_args, *pairs]


def _quoted(argument: str) -> str:
    # Tokens render later inside the single quotes; check_cluster_env refused quotes in literals.
    return "'" + argument + "'"


def fetch_user_data(
    bundle_url: str, entry_point: str, values: Mapping[str, str], role: str | None = None, *, bundle_sha256: str
) -> str:
    """Return a bash user-data script that installs fetch.sh and runs it with these values; fetch.sh checks the zip
    against BUNDLE_SHA256 (bundle_digest) before it unpacks or runs anything from it."""
    script = FETCH_SCRIPT.read_text()
    marker = "KILN_FETCH_SCRIPT"
    if marker in script:
        raise BootstrapInputError(f"fetch.sh must not contain the heredoc marker {marker}")
    arguments = " ".join(
        _quoted(a) for a in fetch_arguments(bundle_url, entry_point, values, role, bundle_sha256=bundle_sha256)
    )
    return (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"install -d -m 0755 {shlex.quote(FETCH_SCRIPT_ON_NODE.rsplit('/', 1)[0])}\n"
        f"cat > {FETCH_SCRIPT_ON_NODE} <<'{marker}'\n{script}{marker}\n"
        f"exec bash {FETCH_SCRIPT_ON_NODE} {arguments}\n"
    )
