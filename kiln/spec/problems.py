"""Spec problems: one per line, naming the file, the field, what was received and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Path = tuple[str | int, ...]


def dotted(path: Sequence[str | int]) -> str:
    """Render ('compute', 'groups', 0, 'max_count') as compute.groups[0].max_count."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def shown(value: object) -> str:
    """Render a received value briefly, the way the user wrote it."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with a spec."""

    path: Path
    message: str
    # Other fields the finding depends on: a cross-field rule names them, so that the finding is left
    # out while any of them is itself invalid (its verdict would rest on a value the user did not give).
    related: tuple[Path, ...] = ()
    # Where the problem is in the file when it is known exactly (YAML syntax errors), 1-based.
    line: int | None = None
    column: int | None = None

    def render(self, source: str, lines: Mapping[Path, int] | None = None) -> str:
        """Return the one-line form: FILE[:LINE]: FIELD: MESSAGE, or FILE:LINE:COL: MESSAGE where exact."""
        if self.line is not None:
            column = f":{self.column}" if self.column is not None else ""
            field = f"{dotted(self.path)}: " if self.path else ""
            return f"{source}:{self.line}{column}: {field}{self.message}"
        line = _nearest_line(self.path, lines or {})
        where = f"{source}:{line}" if line else source
        return f"{where}: {dotted(self.path)}: {self.message}"

    def touches(self, other: Path) -> bool:
        """Return True when this problem's field, or a field it depends on, lies on OTHER's path."""
        return any(_on_path(mine, other) for mine in (self.path, *self.related))


def _on_path(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _nearest_line(path: Path, lines: Mapping[Path, int]) -> int | None:
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


class SpecError(ValueError):
    """A spec that must not be synthesized; carries every problem found."""

    def __init__(self, source: str, problems: Iterable[Problem], lines: Mapping[Path, int] | None = None) -> None:
        self.source = source
        self.problems = sorted(
            problems, key=lambda p: (p.line or _nearest_line(p.path, lines or {}) or 0, dotted(p.path))
        )
        self.lines = dict(lines or {})
        super().__init__("\n".join(self.lines_out()))

    def lines_out(self) -> list[str]:
        """Return one rendered line per problem."""
        return [problem.render(self.source, self.lines) for problem in self.problems]
