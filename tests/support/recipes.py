"""Bootstrap configurations for the image recipe tests: a PCS node of the user's own AMI, and a directory's files."""

from __future__ import annotations

from pathlib import Path

from kiln.bootstrap.config import BootstrapConfig, NodeGroup
from tests.support.bootstrap import PINS


def pcs(**changes: object) -> BootstrapConfig:
    settings: dict[str, object] = {
        "target": "pcs",
        "groups": (NodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=4),),
        "service_instance_types": ("m5.8xlarge",),
        "software": PINS,
        "lustre": True,
        # An AMI of the user's own: kiln installs (and bakes) every component.
        "image": "pcs-custom",
    }
    return BootstrapConfig(**(settings | changes))


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
