"""Progress lines (one per phase, with its elapsed time) and the node table."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TextIO


class Progress:
    """Print `  phase ... 1.2s` lines: the name when a phase starts, its time when it ends."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stdout
        self._started = time.monotonic()
        self._phase: tuple[str, float] | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def begin(self, text: str) -> None:
        self.end()
        self._phase = (text, time.monotonic())
        print(f"  {text} ...", end="", file=self._stream, flush=True)

    def end(self, outcome: str | None = None) -> None:
        if self._phase is None:
            return
        _, began = self._phase
        self._phase = None
        print(f" {outcome or f'{time.monotonic() - began:.1f}s'}", file=self._stream, flush=True)

    @contextlib.contextmanager
    def phase(self, text: str) -> Iterator[None]:
        self.begin(text)
        try:
            yield
        except BaseException:
            self.end("failed")
            raise
        self.end()

    def note(self, text: str) -> None:
        self.end()
        print(f"  {text}", file=self._stream, flush=True)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return ROWS under HEADER as left-aligned columns."""
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines)
