"""What a preflight check is. The checks (kiln/preflight/checks/) and the runner (run.py) both import it, so neither
imports the other's module to learn it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.preflight.aws import AwsClients
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Check:
    """One preflight check: its name (for --skip), what it proves, and the function that asks AWS."""

    name: str
    about: str
    run: Callable[[Plan, AwsClients], list[Finding]]
