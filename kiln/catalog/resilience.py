"""What keeps training going on each platform, in words: which checks run, what replaces a node and how jobs resume.

`kiln validate` prints it in one line and `kiln report` in a section. The sentences are data (platforms.json, each
platform's resilience fact, with its source), chosen by the spec's resilience settings. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kiln.catalog.platforms import service_fact

# Where each platform's sentences are (service, fact), by kiln.contracts.backends platform name.
FACTS: dict[str, tuple[str, str]] = {
    "pcs": ("pcs", "resilience"),
    "parallelcluster": ("parallelcluster", "resilience"),
    "hyperpod": ("hyperpod", "resilience_slurm"),
    "hyperpod-eks": ("hyperpod", "resilience_eks"),
    "eks": ("eks", "resilience"),
}


class ResilienceSettings(Protocol):
    """The spec's resilience section, as far as the summary reads it (kiln.spec.models.Resilience)."""

    health_checks: bool
    health_check_interval_s: int
    deep_health_checks: bool
    node_recovery: str
    auto_resume: bool


@dataclass(frozen=True)
class ResilienceSummary:
    """What checks run, what replaces a node and how jobs resume on one platform, each a sentence; and the source."""

    checks: str
    replacement: str
    resume: str
    source: str

    def line(self) -> str:
        """Return the summary as one line (`kiln validate`)."""
        return f"checks: {self.checks}; replacement: {self.replacement}; jobs: {self.resume}"


def resilience_summary(platform: str, settings: ResilienceSettings) -> ResilienceSummary:
    """Return what PLATFORM (a kiln.contracts.backends platform name) does with the spec's resilience SETTINGS."""
    fact = service_fact(*FACTS[platform])
    text = fact.value
    if settings.health_checks:
        checks = text["checks"].format(interval=settings.health_check_interval_s)
    else:
        checks = text["checks_off"]
    if "deep" in text and settings.deep_health_checks:
        checks = f"{checks}; {text['deep']}"
    return ResilienceSummary(
        checks=checks,
        replacement=text["replacement"][settings.node_recovery],
        resume=text["resume"]["on" if settings.auto_resume else "off"],
        source=fact.source,
    )
