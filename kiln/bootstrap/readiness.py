"""Boot readiness: would a node of this bundle come up, or refuse a download it cannot verify?"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.bootstrap.artifacts import Artifact, artifact_table, bundle_artifacts
from kiln.bootstrap.config import BootstrapConfig

# The one flag of `kiln validate` and `kiln report` that accepts nodes which would not boot.
ACCEPT_UNREADY = "--accept-unready"


@dataclass(frozen=True, kw_only=True)
class BootReadiness:
    """The verdict for one target: ready, or the downloads its nodes would refuse (no sha256 to check)."""

    target: str
    unverifiable: tuple[Artifact, ...]

    @property
    def ready(self) -> bool:
        return not self.unverifiable

    def reasons(self) -> list[str]:
        """Return one line per refused download: which step, which file, and what makes it verifiable."""
        lines = []
        for artifact in self.unverifiable:
            step = artifact_table()[artifact.name]["used_by"].split(" ", 1)[0]
            lines.append(
                f"not boot-ready: {step} on {self.target} nodes would refuse {artifact.name} {artifact.version} "
                f"(no sha256 known for that version): set software.checksums.{artifact.name}"
            )
        return lines


def boot_readiness(config: BootstrapConfig) -> BootReadiness:
    """Return whether CONFIG's nodes would boot: every download they make must have a digest to check."""
    return BootReadiness(
        target=config.target, unverifiable=tuple(a for a in bundle_artifacts(config) if not a.sha256)
    )
