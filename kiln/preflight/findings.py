"""What a preflight check found: one finding per line, and the verdict over them all."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

# ok: proven fine. warn: deploys, but look (a reservation ending soon). fail: the deploy would fail.
# unchecked: the check could not ask AWS (access denied, throttled); readiness is not proven.
Status = Literal["ok", "warn", "fail", "unchecked"]
STATUSES: tuple[Status, ...] = ("fail", "unchecked", "warn", "ok")
BLOCKING: frozenset[str] = frozenset({"fail", "unchecked"})

EXIT_READY = 0
EXIT_NOT_READY = 1


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One fact about the account, as one line: STATUS check: subject: message; remedy."""

    check: str
    status: Status
    subject: str
    message: str
    remedy: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status: got {self.status!r}, allowed: {', '.join(STATUSES)}")
        if self.status in ("fail", "unchecked", "warn") and not self.remedy:
            raise ValueError(f"a {self.status} finding says what to do: {self.check}: {self.subject}")

    def line(self) -> str:
        text = f"{self.status.upper():<9} {self.check}: {self.subject}: {self.message}"
        return f"{text}; {self.remedy}" if self.remedy else text


@dataclass(frozen=True, kw_only=True)
class Report:
    """Every finding of one preflight run, worst first, and how long it took."""

    spec: str
    region: str
    findings: tuple[Finding, ...]
    seconds: float

    @property
    def ready(self) -> bool:
        return not any(f.status in BLOCKING for f in self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_READY if self.ready else EXIT_NOT_READY

    def ordered(self) -> list[Finding]:
        """Return the findings worst first, then by check and subject (a stable order to read and diff)."""
        return sorted(self.findings, key=lambda f: (STATUSES.index(f.status), f.check, f.subject))

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for f in self.findings if f.status == status) for status in STATUSES}

    def summary(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in self.counts().items() if n)
        verdict = "ready" if self.ready else "NOT ready"
        where = f"{self.spec} in {self.region}"
        return f"kiln preflight: {where}: {verdict} ({counts or 'nothing checked'}) in {self.seconds:.1f} s"

    def as_json(self) -> dict:
        return {
            "spec": self.spec,
            "region": self.region,
            "ready": self.ready,
            "seconds": round(self.seconds, 3),
            "counts": self.counts(),
            "findings": [asdict(f) for f in self.ordered()],
        }
