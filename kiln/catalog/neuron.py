"""AWS Neuron SDK releases: which host packages, at which versions, a Neuron node installs. Stdlib only."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

RELEASES_PATH = Path(__file__).parent / "data" / "neuron_releases.json"


@lru_cache(maxsize=1)
def _releases() -> dict[str, dict]:
    return json.loads(RELEASES_PATH.read_text())["releases"]


def known_neuron_releases() -> tuple[str, ...]:
    """Return the Neuron SDK releases kiln knows the packages of."""
    return tuple(_releases())


def neuron_packages(release: str) -> dict[str, str]:
    """Return package name -> version pattern of Neuron SDK RELEASE; raise ValueError for an unknown one."""
    try:
        return dict(_releases()[release]["packages"])
    except KeyError:
        known = ", ".join(known_neuron_releases())
        raise ValueError(f"software.neuron: got {release!r}, allowed: {known} (releases kiln knows)") from None
