"""This node's image manifest against the bundle it booted: did its install steps run as that bundle pins them?

The node bootstrap leaves, under the node's root (KILN_ROOT, default /), a marker per install step that ran,
``/etc/kiln/image/STEP.env`` (``VAR='value'`` per pin of the step), and at each boot ``/etc/kiln/bundle-pins.env``:
the bundle's install steps (KILN_INSTALL_STEPS), each step's pins (KILN_PINS_<STEP>) and their values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.catalog.envfile import parse_env_file

IMAGE_DIR = "/etc/kiln/image"
BUNDLE_PINS = "/etc/kiln/bundle-pins.env"
PINS_PREFIX = "KILN_PINS_"


@dataclass(frozen=True, kw_only=True)
class PinMismatch:
    """A pin whose value on the image is not the bundle's; image is None when the step's marker lacks the pin."""

    step: str
    variable: str
    image: str | None
    wanted: str


@dataclass(frozen=True, kw_only=True)
class ImageScan:
    """What the node holds: each step's marker (pin -> value) and, per install step, what its bundle wants."""

    image_dir: str = IMAGE_DIR
    markers: dict[str, dict[str, str]] = field(default_factory=dict)
    # None when the node has no bundle-pins.env: no kiln entry point booted it.
    wanted: dict[str, dict[str, str]] | None = None
    error: str | None = None

    @property
    def missing(self) -> list[str]:
        """Return the bundle's install steps that left no marker on this node."""
        return [step for step in self.wanted or {} if step not in self.markers]

    def mismatches(self) -> list[PinMismatch]:
        """Return every pin of the bundle's steps whose marker records another value (or none)."""
        found = []
        for step, pins in (self.wanted or {}).items():
            recorded = self.markers.get(step)
            if recorded is None:
                continue
            for variable, wanted in pins.items():
                if recorded.get(variable) != wanted:
                    found.append(PinMismatch(step=step, variable=variable, image=recorded.get(variable), wanted=wanted))
        return found


def root_of(environ: Mapping[str, str] = os.environ) -> Path:
    """Return where the bootstrap put this node's files: KILN_ROOT (the local cluster's prefix), else /."""
    return Path(environ.get("KILN_ROOT") or "/")


def _under(root: Path, absolute: str) -> Path:
    return root / absolute.lstrip("/")


def wanted_pins(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Return step -> pin -> value from the KILN_INSTALL_STEPS, KILN_PINS_<STEP> and pin values of VALUES."""
    wanted = {}
    for step in values.get("KILN_INSTALL_STEPS", "").split():
        pins = values.get(PINS_PREFIX + step.upper(), "").split()
        wanted[step] = {variable: values.get(variable, "") for variable in pins}
    return wanted


def scan_image(root: Path | str = "/") -> ImageScan:
    """Read the image manifest and the bundle's pins under ROOT; a file that cannot be read becomes the error."""
    root = Path(root)
    image_dir = _under(root, IMAGE_DIR)
    bundle_pins = _under(root, BUNDLE_PINS)
    try:
        markers = {}
        if image_dir.is_dir():
            for marker in sorted(image_dir.glob("*.env")):
                markers[marker.stem] = parse_env_file(marker.read_text(), source=str(marker))
        wanted = None
        if bundle_pins.is_file():
            wanted = wanted_pins(parse_env_file(bundle_pins.read_text(), source=str(bundle_pins)))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return ImageScan(image_dir=str(image_dir), error=str(error))
    return ImageScan(image_dir=str(image_dir), markers=markers, wanted=wanted)
