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
    loader = yaml.SafeLoader(text)
    try:
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
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = exc.problem or exc.context or "cannot be parsed"
        raise SpecError(source, [Problem(path=(), message=f"invalid YAML{where}: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem(path=(), message=f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()


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
