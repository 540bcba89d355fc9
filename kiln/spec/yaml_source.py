"""Read a spec file: YAML to plain data, with the line of every key, duplicates rejected."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Any

import yaml

from kiln.spec.problems import Path, Problem, SpecError


class _DuplicateKey(Exception):
    def __init__(self, path: Path, line: int, key: str) -> None:
        self.path, self.line, self.key = path, line, key


def _index(node: yaml.Node, path: Path, lines: dict[Path, int]) -> None:
    """Record the line of each key and item under NODE, refusing duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*path, key)
            if key == "<<":
                _index(value_node, path, lines)
                continue
            if key in seen:
                raise _DuplicateKey(child, key_node.start_mark.line + 1, key)
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _index(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            lines[(*path, position)] = item.start_mark.line + 1
            _index(item, (*path, position), lines)


def parse_yaml(text: str, source: str) -> tuple[Any, dict[Path, int]]:
    """Return (data, lines) for TEXT; raise SpecError for invalid YAML or duplicate keys."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: dict[Path, int] = {}
        _index(node, (), lines)
        return loader.construct_document(node), lines
    except _DuplicateKey as dup:
        raise SpecError(
            source, [Problem(path=dup.path, message=f"duplicate key {dup.key!r}")], {dup.path: dup.line}
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "cannot be parsed"
        opened = exc.context_mark
        if exc.problem and exc.context and opened is not None and mark is not None and opened.line != mark.line:
            reason += f" ({exc.context} started at line {opened.line + 1}, column {opened.column + 1})"
        raise SpecError(source, [_syntax_problem(f"invalid YAML: {reason}", mark)]) from None
    except yaml.reader.ReaderError as exc:
        line, column = _line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        problem = Problem(
            path=(), message=f"invalid YAML: character U+{code:04X} is not allowed", line=line, column=column
        )
        raise SpecError(source, [problem]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem(path=(), message=f"invalid YAML: {exc}", line=1)]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _syntax_problem(message: str, mark: yaml.Mark | None) -> Problem:
    if mark is None:
        return Problem(path=(), message=message, line=1)
    return Problem(path=(), message=message, line=mark.line + 1, column=mark.column + 1)


def _line_and_column(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def read_spec_file(path: FsPath) -> tuple[Any, dict[Path, int]]:
    """Read and parse PATH; every failure becomes a SpecError naming the file."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(source, [Problem(path=(), message="no such file")]) from None
    except IsADirectoryError:
        raise SpecError(source, [Problem(path=(), message="is a directory, not a spec file")]) from None
    except OSError as exc:
        raise SpecError(source, [Problem(path=(), message=f"cannot be read: {exc.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(source, [Problem(path=(), message=f"is not UTF-8 text (byte {exc.start})")]) from None
    return parse_yaml(text, source)
