"""Boot readiness: would a node of this bundle come up, or refuse a download it cannot verify?"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.bootstrap.artifacts import Artifact, artifact_table, bundle_artifacts
from kiln.bootstrap.config import BootstrapConfig

# The one flag of `kiln validate` and `kiln report` that accepts nodes which would not boot.
ACCEPT_UNREADY = "--accept-unready"
# What makes an unverifiable download verifiable, when the caller knows no better (no spec path).
LOCK_REMEDY = "lock them with `kiln bootstrap lock --spec SPEC` on a machine with internet"


@dataclass(frozen=True, kw_only=True)
class BootReadiness:
    """The verdict for one target: ready, or the downloads its nodes would refuse (no sha256 to check)."""

    target: str
    unverifiable: tuple[Artifact, ...]
    # The one step that makes every unverifiable download verifiable.
    remedy: str = LOCK_REMEDY
    # One line per kind of node: what it adopts from its image and what kiln installs (kiln.bootstrap.adoption).
    nodes: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.unverifiable

    def reasons(self) -> list[str]:
        """Return one line naming the refused downloads, their steps, and the single step that fixes them."""
        if self.ready:
            return []
        files = ", ".join(f"{a.name} {a.version}" for a in self.unverifiable)
        steps = ", ".join(dict.fromkeys(artifact_table()[a.name]["used_by"] for a in self.unverifiable))
        return [
            f"not boot-ready: {self.target} nodes would refuse {files} ({steps}; no published sha256): {self.remedy}"
        ]


def boot_readiness(config: BootstrapConfig, *, remedy: str = LOCK_REMEDY) -> BootReadiness:
    """Return whether CONFIG's nodes would boot: every file they download must have a digest to check."""
    return BootReadiness(
        target=config.target,
        unverifiable=tuple(a for a in bundle_artifacts(config) if not a.verifiable),
        remedy=remedy,
    )
