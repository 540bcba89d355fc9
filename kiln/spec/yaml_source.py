"""Read a spec file: YAML to plain data, with the line of every key, duplicates rejected.

A spec file may be hostile or simply wrong (a pipe, a device, a huge file, an alias bomb, deep nesting):
reading it is bounded in bytes, nodes, text and depth, never blocks, and every failure is one SpecError line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path as FsPath
from typing import Any, Protocol

import yaml

from kiln.contracts.errors import InputError
from kiln.spec.problems import Path, Problem, SpecError, shown

# A spec is a few KB (the examples are under 1 KB); 1 MiB leaves a thousand times that, and with MAX_NODES
# the slowest 1 MiB file measured (a million blank lines) reads in about a second in the pure-Python reader.
MAX_FILE_BYTES = 1 << 20
# The examples hold 44 to 80 YAML nodes; 10,000 leaves over a hundred times that, while bounding what the
# line index, the constructor and pydantic walk once aliases are expanded (a "billion laughs" is 10^9).
MAX_NODES = 10_000
# Specs nest about 6 levels. The composer recurses about 3 frames per level, so 100 levels stay far below
# Python's recursion limit wherever load_spec is called from.
MAX_DEPTH = 100
# The characters of all scalars (keys and values) once aliases are expanded. A file without aliases holds at most
# MAX_FILE_BYTES of them (a scalar's text is never longer than the bytes that write it), so this limit refuses only
# what aliases multiply: 4,800 uses of one 500 KB value (2.4 billion characters) stay under MAX_NODES, and would
# otherwise reach the renderer, which writes each value into every instance type's files.
MAX_TEXT_CHARS = MAX_FILE_BYTES

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_MESSAGE_CHARS = 160
_TOO_DEEP = f"nesting deeper than {MAX_DEPTH} levels; a spec may nest at most {MAX_DEPTH}"
_TOO_MANY = (
    f"more than {MAX_NODES} YAML nodes; a spec may hold at most {MAX_NODES} (each use of an alias counts in full)"
)
_TOO_MUCH_TEXT = (
    f"more than {MAX_TEXT_CHARS} characters of keys and values; a spec may hold at most {MAX_TEXT_CHARS} "
    "(each use of an alias counts in full)"
)


class _DuplicateKey(InputError):
    def __init__(self, path: Path, line: int, key: str) -> None:
        self.path, self.line, self.key = path, line, key


class _Mark(Protocol):
    """Where a YAML event starts: PyYAML's pure-Python and LibYAML marks both have these."""

    line: int
    column: int


class _Refused(InputError):
    """A document past a reading limit, at the mark where the limit was crossed."""

    def __init__(self, message: str, mark: _Mark | None) -> None:
        super().__init__(message)
        self.message, self.mark = message, mark


def _brief(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses, while composing, documents too deep or too large once aliases are expanded.

    Each node's expanded size, depth and text are measured once, when it is composed, so an alias costs a lookup
    however many times its node is reused; a document whose aliases expand past MAX_NODES or MAX_TEXT_CHARS is
    refused at the alias that crosses the limit, before anything walks the expanded structure.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        # id(node) -> (expanded nodes, expanded depth, expanded characters of its scalars)
        self._measured: dict[int, tuple[int, int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self._next_event()
            node = super().compose_node(parent, index)
            if node is not None and isinstance(event, yaml.AliasEvent):
                self._count_alias(event, node)
            return node
        event = self._next_event()
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(_TOO_MANY, event.start_mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(_TOO_DEEP, event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        parts = [self._measured[id(child)] for child in _children(node)]
        chars = len(node.value) if isinstance(node, yaml.ScalarNode) else sum(text for _, _, text in parts)
        if isinstance(node, yaml.ScalarNode):
            # A collection's children were counted as they were composed; a scalar counts its own text.
            self._chars += chars
            if self._chars > MAX_TEXT_CHARS:
                raise _Refused(_TOO_MUCH_TEXT, event.start_mark)
        self._measured[id(node)] = (
            1 + sum(size for size, _, _ in parts),
            1 + max((depth for _, depth, _ in parts), default=0),
            chars,
        )
        return node

    def _next_event(self) -> yaml.Event:
        """The event compose_node is about to compose (PyYAML's stubs leave peek_event unannotated)."""
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        return event

    def _count_alias(self, event: yaml.AliasEvent, node: yaml.Node) -> None:
        alias = _brief(f"*{event.anchor}")
        if id(node) not in self._measured:
            raise _Refused(
                f"alias {alias} is used inside the node it names; a spec cannot contain itself", event.start_mark
            )
        size, depth, chars = self._measured[id(node)]
        self._nodes += size
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise _Refused(
                f"alias {alias} stands for {size} YAML nodes, taking the document past {MAX_NODES}, "
                f"the most a spec may hold (each use of an alias counts in full)",
                event.start_mark,
            )
        if self._chars > MAX_TEXT_CHARS:
            raise _Refused(
                f"alias {alias} stands for {chars} characters of keys and values, taking the document past "
                f"{MAX_TEXT_CHARS}, the most a spec may hold (each use of an alias counts in full)",
                event.start_mark,
            )
        if self._depth + depth > MAX_DEPTH:
            raise _Refused(
                f"alias {alias} nests the document deeper than {MAX_DEPTH} levels; a spec may nest at most {MAX_DEPTH}",
                event.start_mark,
            )

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            # PyYAML lets Python's own errors out for values such as 2001-13-45, !!int abc or a 5,000-digit int.
            kind = node.tag.rsplit(":", 1)[-1]
            message = f"{shown(node.value)} is not a valid {kind} ({_brief(str(exc))})"
            raise yaml.constructor.ConstructorError(None, None, message, node.start_mark) from None


class _Visits:
    """How many more nodes the line index may visit; each use of an alias counts in full."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def spend(self, node: yaml.Node, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Refused(_TOO_MANY, node.start_mark)
        if depth > MAX_DEPTH:
            raise _Refused(_TOO_DEEP, node.start_mark)


def _index(node: yaml.Node, path: Path, lines: dict[Path, int], visits: _Visits, depth: int = 1) -> None:
    """Record the line of each key and item under NODE, refusing duplicate keys and more nodes than VISITS allows."""
    visits.spend(node, depth)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            visits.spend(key_node, depth + 1)
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a list or mapping as a key is refused when the document is constructed
            key = key_node.value
            child = (*path, key)
            if key == "<<":
                _index(value_node, path, lines, visits, depth + 1)
                continue
            if key in seen:
                raise _DuplicateKey(child, key_node.start_mark.line + 1, key)
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _index(value_node, child, lines, visits, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            lines[(*path, position)] = item.start_mark.line + 1
            _index(item, (*path, position), lines, visits, depth + 1)


def parse_yaml(text: str, source: str) -> tuple[Any, dict[Path, int]]:
    """Return (data, lines) for TEXT; raise SpecError for invalid YAML, duplicate keys or a document past the limits."""
    loader = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: dict[Path, int] = {}
        _index(node, (), lines, _Visits(MAX_NODES))
        return loader.construct_document(node), lines
    except _DuplicateKey as dup:
        key = _brief(repr(dup.key))
        raise SpecError(
            source, [Problem(path=dup.path, message=f"duplicate key {key}")], {dup.path: dup.line}
        ) from None
    except _Refused as refused:
        raise SpecError(source, [_syntax_problem(refused.message, refused.mark)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = _brief(exc.problem or exc.context or "cannot be parsed")
        opened = exc.context_mark
        if exc.problem and exc.context and opened is not None and mark is not None and opened.line != mark.line:
            reason += f" ({_brief(exc.context)} started at line {opened.line + 1}, column {opened.column + 1})"
        raise SpecError(source, [_syntax_problem(f"invalid YAML: {reason}", mark)]) from None
    except yaml.reader.ReaderError as exc:
        line, column = _line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        problem = Problem(
            path=(), message=f"invalid YAML: character U+{code:04X} is not allowed", line=line, column=column
        )
        raise SpecError(source, [problem]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem(path=(), message=_brief(f"invalid YAML: {exc}"), line=1)]) from None
    except RecursionError:
        # The composer and constructor recurse; MAX_DEPTH keeps them shallow, and this keeps any miss one line.
        mark = loader.get_mark() if loader is not None else None
        raise SpecError(source, [_syntax_problem("nesting too deep to read", mark)]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _syntax_problem(message: str, mark: _Mark | None) -> Problem:
    if mark is None:
        return Problem(path=(), message=message, line=1)
    return Problem(path=(), message=message, line=mark.line + 1, column=mark.column + 1)


def _line_and_column(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(mode: int) -> str | None:
    """Return what a non-regular file is ("a named pipe (FIFO)"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for is_kind, kind in _KINDS if is_kind(mode)), "a special file")


def _read_bounded(path: FsPath, source: str) -> bytes:
    """Return the bytes of PATH, refusing anything but a regular file of at most MAX_FILE_BYTES."""

    def refused(message: str) -> SpecError:
        return SpecError(source, [Problem(path=(), message=message)])

    try:
        raw, kind, size = _read_regular(path)
    except FileNotFoundError:
        raise refused("no such file") from None
    except IsADirectoryError:
        raise refused("is a directory, not a spec file") from None
    except OSError as exc:
        raise refused(f"cannot be read: {exc.strerror}") from None
    except ValueError:
        raise refused("cannot be read: the path contains a NUL character") from None
    if kind:
        raise refused(f"is {kind}, not a spec file")
    limit = f"a spec file may be at most 1 MiB ({MAX_FILE_BYTES} bytes)"
    if size > MAX_FILE_BYTES:
        raise refused(f"is {size} bytes; {limit}")
    if len(raw) > MAX_FILE_BYTES:
        raise refused(f"is more than {MAX_FILE_BYTES} bytes; {limit}")
    return raw


def _read_regular(path: FsPath) -> tuple[bytes, str | None, int]:
    """Return (at most MAX_FILE_BYTES + 1 bytes, None, size) of a regular file, else (b"", its kind, 0); never block."""
    # Look before opening: opening a FIFO waits for a writer, and opening a device can act on it.
    kind = special_file_kind(os.stat(path).st_mode)
    if kind:
        return b"", kind, 0
    fd = os.open(path, _OPEN_FLAGS)  # non-blocking, in case a FIFO took the file's place since the stat
    try:
        status = os.fstat(fd)
        kind = special_file_kind(status.st_mode)
        if kind or status.st_size > MAX_FILE_BYTES:
            return b"", kind, status.st_size
        chunks: list[bytes] = []
        left = MAX_FILE_BYTES + 1  # the size can lie (/proc) or grow while the file is read
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), None, status.st_size
    finally:
        os.close(fd)


def read_spec_file(path: FsPath) -> tuple[Any, dict[Path, int]]:
    """Read and parse PATH; every failure becomes a SpecError naming the file."""
    source = str(path)
    raw = _read_bounded(path, source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8")
        line, column = _line_and_column(before, len(before))
        message = f"is not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise SpecError(source, [Problem(path=(), message=message, line=line, column=column)]) from None
    return parse_yaml(text, source)
