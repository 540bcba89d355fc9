"""Boot readiness: would a node of this bundle come up, or refuse a download it cannot verify?"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.bootstrap.artifacts import Artifact, artifact_table, bundle_artifacts
from kiln.bootstrap.config import BootstrapConfig

# The one flag of `kiln validate` and `kiln report` that accepts nodes which would not boot, and the one context
# key of `cdk synth` and `cdk deploy` that does (-c accept_unready=true).
ACCEPT_UNREADY = "--accept-unready"
ACCEPT_UNREADY_CONTEXT = "accept_unready"
# What makes an unverifiable download verifiable, when the caller knows no better (no spec path).
LOCK_REMEDY = "lock them with `kiln bootstrap lock --spec SPEC` on a machine with internet"


@dataclass(frozen=True, kw_only=True)
class BootReadiness:
    """The verdict for one target: ready, or the downloads its nodes would refuse (no sha256 to check) and the nodes
    whose setup would outlast their platform's fixed deadline (kiln.bootstrap.budget)."""

    target: str
    unverifiable: tuple[Artifact, ...]
    # The one step that makes every unverifiable download verifiable.
    remedy: str = LOCK_REMEDY
    # One line per kind of node: what it adopts from its image and what kiln installs (kiln.bootstrap.adoption).
    nodes: tuple[str, ...] = ()
    # One line per kind of node: kiln's estimate of its setup at boot against its platform's deadline.
    budget: tuple[str, ...] = ()
    # One line per kind of node that scales from zero and whose setup cannot fit its platform's fixed deadline.
    over_budget: tuple[str, ...] = ()
    # One warning per other kind of node whose setup leaves less than the boot margin of its deadline (budget.py's
    # BOOT_MARGIN): boot-ready, with a bake recommended.
    tight_budget: tuple[str, ...] = ()
    # One warning per choice of the spec its vendor calls beta (a Neuron release that trains only in a beta).
    beta: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.unverifiable and not self.over_budget

    @property
    def problems(self) -> int:
        """Return how many things keep the nodes from booting: unverifiable downloads and kinds of node over budget."""
        return len(self.unverifiable) + len(self.over_budget)

    def reasons(self) -> list[str]:
        """Return one line naming the refused downloads, their steps, and the single step that fixes them; then one
        per kind of node over budget."""
        if not self.unverifiable:
            return list(self.over_budget)
        files = ", ".join(f"{a.name} {a.version}" for a in self.unverifiable)
        steps = ", ".join(dict.fromkeys(artifact_table()[a.name]["used_by"] for a in self.unverifiable))
        return [
            f"not boot-ready: {self.target} nodes would refuse {files} ({steps}; no published sha256): {self.remedy}",
            *self.over_budget,
        ]


def boot_readiness(config: BootstrapConfig, *, remedy: str = LOCK_REMEDY) -> BootReadiness:
    """Return whether CONFIG's nodes would boot: every file they download must have a digest to check."""
    return BootReadiness(
        target=config.target,
        unverifiable=tuple(a for a in bundle_artifacts(config) if not a.verifiable),
        remedy=remedy,
    )


def unready_lines(path: str, readiness: BootReadiness, *, accepted: bool) -> list[str]:
    """Return what `cdk synth` of the spec at PATH prints for nodes that would not boot: `kiln validate`'s lines,
    then whether the stacks are synthesized anyway (-c accept_unready=true) or not."""
    lines = [f"{path}: {reason}" for reason in readiness.reasons()]
    if accepted:
        return [*lines, f"{path}: NOT boot-ready, synthesized as -c {ACCEPT_UNREADY_CONTEXT}=true asks"]
    return [
        *lines,
        f"{path}: not synthesized: its nodes would not boot (-c {ACCEPT_UNREADY_CONTEXT}=true synthesizes it anyway)",
    ]
