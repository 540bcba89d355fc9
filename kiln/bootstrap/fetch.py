"""How a cloud node gets its bundle: fetch.sh, with deploy-time values passed as arguments."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from kiln.bootstrap.cluster_env import check_cluster_env

FETCH_SCRIPT = Path(__file__).parent / "scripts" / "fetch.sh"
FETCH_SCRIPT_ON_NODE = "/opt/kiln/fetch.sh"


def fetch_arguments(bundle_url: str, entry_point: str, values: Mapping[str, str], role: str | None = None) -> list[str]:
    """Return fetch.sh's arguments: bundle URL, entry point, role, then KILN_NAME=VALUE pairs (tokens allowed)."""
    check_cluster_env(values)
    role_args = ["--role", role] if role else []
    return [bundle_url, entry_point, *role_args, *(f"{name}={values[name]}" for name in sorted(values))]


def _quoted(argument: str) -> str:
    # Tokens render later inside the single quotes; check_cluster_env refused quotes in literals.
    return "'" + argument + "'"


def fetch_user_data(bundle_url: str, entry_point: str, values: Mapping[str, str], role: str | None = None) -> str:
    """Return a bash user-data script that installs fetch.sh and runs it with these values."""
    script = FETCH_SCRIPT.read_text()
    marker = "KILN_FETCH_SCRIPT"
    if marker in script:
        raise ValueError(f"fetch.sh must not contain the heredoc marker {marker}")
    arguments = " ".join(_quoted(a) for a in fetch_arguments(bundle_url, entry_point, values, role))
    return (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"install -d -m 0755 {shlex.quote(FETCH_SCRIPT_ON_NODE.rsplit('/', 1)[0])}\n"
        f"cat > {FETCH_SCRIPT_ON_NODE} <<'{marker}'\n{script}{marker}\n"
        f"exec bash {FETCH_SCRIPT_ON_NODE} {arguments}\n"
    )
