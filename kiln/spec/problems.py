"""Spec problems: one per line, naming the file, the field, what was received and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kiln.contracts.errors import InputError

Path = tuple[str | int, ...]

# The most of one value or key a line echoes: enough to recognise it (the longest name a spec field takes is a tag
# key of 128 characters, and those are refused past it anyway); a 600,000-character key is not echoed whole.
MAX_ECHO_CHARS = 80
# The most characters of one problem's message: the longest kiln writes is under 400; whatever a message quotes
# from elsewhere (a lock file, an exception) is cut here rather than flood the terminal.
MAX_MESSAGE_CHARS = 1000
# The most problems printed for one file; the rest are counted on one more line. A file with 3,000 unknown keys
# is one mistake repeated, and fifty lines show it while the first ones stay on the screen.
MAX_PROBLEM_LINES = 50


def printable(text: str) -> str:
    """Return TEXT with every character a terminal would act on escaped: controls (ANSI's ESC among them), line
    breaks and other non-printing characters become \\xNN, \\uNNNN or \\UNNNNNNNN, so one line stays one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def clipped(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """Return TEXT whole when it has at most LIMIT characters, else its first LIMIT, an ellipsis and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def dotted(path: Sequence[str | int]) -> str:
    """Render ('compute', 'groups', 0, 'max_count') as compute.groups[0].max_count (long keys cut, controls escaped)."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = clipped(printable(str(part)))
            text += f".{key}" if text else key
    return text or "(top level)"


def shown(value: object) -> str:
    """Render a received value briefly, the way the user wrote it: repr() (controls escaped), long text cut."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str) and len(value) > MAX_ECHO_CHARS:
        # Cut before repr(): the length reported is the value's own, and no escape sequence is cut in half.
        return f"{value[:MAX_ECHO_CHARS]!r}... ({len(value)} characters)"
    return clipped(printable(repr(value)))


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
    # True for what only a new cluster must meet (a version past its end of support): a spec that describes a cluster
    # already deployed (`--before OLD.yaml`) is read despite it.
    new_cluster_only: bool = False

    def render(self, source: str, lines: Mapping[Path, int] | None = None) -> str:
        """Return the one-line form: FILE[:LINE]: FIELD: MESSAGE, or FILE:LINE:COL: MESSAGE where exact."""
        # Everything echoed is made printable: a file name or a message quoting input may hold terminal escapes.
        source = printable(source)
        message = clipped(printable(self.message), MAX_MESSAGE_CHARS)
        if self.line is not None:
            column = f":{self.column}" if self.column is not None else ""
            field = f"{dotted(self.path)}: " if self.path else ""
            return f"{source}:{self.line}{column}: {field}{message}"
        line = _nearest_line(self.path, lines or {})
        where = f"{source}:{line}" if line else source
        return f"{where}: {dotted(self.path)}: {message}"

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


class SpecError(InputError, ValueError):
    """A spec that must not be synthesized; carries every problem found."""

    def __init__(self, source: str, problems: Iterable[Problem], lines: Mapping[Path, int] | None = None) -> None:
        self.source = source
        self.problems = sorted(
            problems, key=lambda p: (p.line or _nearest_line(p.path, lines or {}) or 0, dotted(p.path))
        )
        self.lines = dict(lines or {})
        super().__init__("\n".join(self.lines_out()))

    def lines_out(self) -> list[str]:
        """Return one rendered line per problem, the first MAX_PROBLEM_LINES of them and a count of the rest."""
        lines = [problem.render(self.source, self.lines) for problem in self.problems[:MAX_PROBLEM_LINES]]
        hidden = len(self.problems) - MAX_PROBLEM_LINES
        if hidden > 0:
            lines.append(f"{printable(self.source)}: ... and {hidden} more problems")
        return lines
