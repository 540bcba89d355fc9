"""Hostile spec files: `kiln validate` answers each with exit 2 and one line, never a hang, traceback or OOM."""

from __future__ import annotations

import inspect
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kiln.spec import SpecError, parse_spec, yaml_source
from kiln.spec.yaml_source import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, MAX_TEXT_CHARS, parse_yaml, read_spec_file

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

MEMORY_BYTES = 2 << 30
TIMEOUT_S = 30


def _text(content: str | bytes) -> Callable[[Path], Path]:
    def build(tmp_path: Path) -> Path:
        path = tmp_path / "cluster.yaml"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return build


def _billion_laughs() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    lines = ["m0: &m0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v, k9: v}"]
    lines += [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def _deep_through_aliases() -> str:
    # Each anchor nests 40 levels and wraps the one before: 3 levels of text nesting, 120 once expanded.
    lines = [f"a0: &a0 {'[' * 40}x{']' * 40}"]
    lines += [f"a{i}: &a{i} {'[' * 39}*a{i - 1}{']' * 39}" for i in (1, 2)]
    return "\n".join(lines) + "\n"


def _alias_text_bomb() -> str:
    # The audit's case: 4,800 uses of one 500 KB launcher.nccl_env value, 2.4 billion characters once expanded, in a
    # file of half a megabyte and under 5,000 YAML nodes.
    lines = ["name: llm", "compute: {backend: pcs, groups: [{name: gpu, instance_type: p5.48xlarge}]}"]
    lines += ["big: &v " + "a" * 500_000, "launcher:", "  nccl_env:"]
    lines += [f"    NCCL_X{i}: *v" for i in range(4800)]
    return "\n".join(lines) + "\n"


def _alias_text_through_a_list() -> str:
    # Ten 60 KB values under one anchor, the list used twice: no alias stands for a large value of its own.
    values = ", ".join(["b" * 60_000] * 10)
    return f"a: &l [{values}]\nb: *l\nc: *l\n"


def _deep_block() -> str:
    return "".join(" " * level + "a:\n" for level in range(MAX_DEPTH + 50)) + " " * (MAX_DEPTH + 50) + "x\n"


def _huge(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"#" * MAX_FILE_BYTES + b"\n")
    return path


def _dev_zero(tmp_path: Path) -> Path:
    return Path("/dev/zero")


def _link_to_dev_zero(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.symlink_to("/dev/zero")
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    os.mkfifo(path)
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.mkdir()
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))  # the socket file stays after the socket is closed
    return path


# (case id, build the file in tmp_path, words the one stderr line must contain, whether it reads FILE:LINE:COL)
HOSTILE: list[tuple[str, Callable[[Path], Path], str, bool]] = [
    ("alias-bomb", _text(_billion_laughs()), "alias *a2 stands for 1111 YAML nodes", True),
    ("merge-key-bomb", _text(_merge_bomb()), "YAML nodes", True),
    ("recursive-alias", _text("a: &a [*a]\n"), "alias *a is used inside the node it names", True),
    ("recursive-alias-key", _text("a: &a {? *a : 1}\n"), "alias *a is used inside the node it names", True),
    ("nested-lists", _text("[" * 20_000), f"nesting deeper than {MAX_DEPTH} levels", True),
    ("nested-mappings", _text("{a: " * 20_000), f"nesting deeper than {MAX_DEPTH} levels", True),
    ("nested-block-mappings", _text(_deep_block()), f"nesting deeper than {MAX_DEPTH} levels", True),
    (
        "deep-through-aliases",
        _text(_deep_through_aliases()),
        f"alias *a1 nests the document deeper than {MAX_DEPTH}",
        True,
    ),
    ("many-nodes", _text("[" + "0, " * 200_000 + "0]\n"), f"more than {MAX_NODES} YAML nodes", True),
    ("alias-text-bomb", _text(_alias_text_bomb()), "alias *v stands for 500000 characters of keys and values", True),
    ("alias-text-through-a-list", _text(_alias_text_through_a_list()), "alias *l stands for 600000 characters", True),
    ("huge-file", _huge, f"is {MAX_FILE_BYTES + 1} bytes; a spec file may be at most 1 MiB", False),
    ("dev-zero", _dev_zero, "is a character device, not a spec file", False),
    ("link-to-dev-zero", _link_to_dev_zero, "is a character device, not a spec file", False),
    ("fifo", _fifo, "is a named pipe (FIFO), not a spec file", False),
    ("directory", _directory, "is a directory, not a spec file", False),
    ("socket", _socket, "is a socket, not a spec file", False),
    ("nul", _text("name: a\x00b\n"), "1:8: invalid YAML: character U+0000 is not allowed", True),
    ("escape", _text("name: ok\ncompute: \x1b\n"), "2:10: invalid YAML: character U+001B is not allowed", True),
    ("u+fffe", _text("name: ok\ufffe\n"), "1:9: invalid YAML: character U+FFFE", True),
    ("invalid-utf8", _text(b"name: ok\ncompute: \xc3\x28\n"), "2:10: is not UTF-8 text", True),
    ("utf16", _text("name: ok\n".encode("utf-16")), "1:1: is not UTF-8 text", True),
    ("bom-only", _text(b"\xef\xbb\xbf"), "is empty", False),
    ("empty", _text(b""), "is empty", False),
    ("only-comments", _text("# a spec\n# with nothing in it\n"), "is empty", False),
    ("tabs", _text("name: a\n\tcompute: 1\n"), "2:1: invalid YAML: found character '\\t'", True),
    ("bad-date", _text("name: 2001-13-45\n"), "1:7: invalid YAML: '2001-13-45' is not a valid timestamp", True),
    ("huge-int", _text("name: " + "9" * 5_000 + "\n"), "1:7: invalid YAML: '9999", True),
    ("tagged-int", _text("name: !!int abc\n"), "1:7: invalid YAML: 'abc' is not a valid int", True),
    ("undefined-alias", _text("name: *nowhere\n"), "1:7: invalid YAML: found undefined alias 'nowhere'", True),
    ("two-documents", _text("name: a\n---\nname: b\n"), "2:1: invalid YAML: but found another document", True),
    ("list-as-key", _text("? [a]\n: 1\n"), "invalid YAML: found unhashable key", True),
]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def validate(path: Path) -> tuple[int, list[str], float]:
    """Run the real `kiln validate PATH` capped in time and memory; return (exit code, stderr lines, seconds)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=_limit_memory,
    )
    return result.returncode, result.stderr.splitlines(), time.monotonic() - started


def test_the_corpus_has_at_least_thirty_hostile_files() -> None:
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize(("build", "words", "located"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_hostile_file_is_one_line_and_exit_2(
    tmp_path: Path, build: Callable[[Path], Path], words: str, located: bool
) -> None:
    path = build(tmp_path)
    code, lines, _ = validate(path)
    assert code == 2, lines
    assert not any("Traceback" in line for line in lines)
    assert len(lines) == 1, lines
    [line] = lines
    where = r":\d+:\d+: " if located else r"(:\d+)?: "
    assert re.match(re.escape(str(path)) + where, line), line
    assert words in line, line
    assert len(line) < len(str(path)) + 300, line


def test_line_index_visits_a_shared_node_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # Composing shares each anchored node (the graph is small); only a walk of its expansion can explode.
    root = yaml.compose(_billion_laughs(), Loader=yaml.SafeLoader)
    visits: dict[int, int] = {}
    index = yaml_source._index

    def counting(node: yaml.Node, *args: object) -> None:
        visits[id(node)] = visits.get(id(node), 0) + 1
        index(node, *args)

    monkeypatch.setattr(yaml_source, "_index", counting)
    started = time.monotonic()
    with pytest.raises(yaml_source._Refused, match="more than 10000 YAML nodes"):
        counting(root, (), {}, yaml_source._Visits(MAX_NODES))
    assert time.monotonic() - started < 5
    assert sum(visits.values()) <= MAX_NODES + 1  # of the over 10^10 nodes the expansion holds


def test_aliases_within_the_limit_keep_the_lines_where_their_values_are_written() -> None:
    data, lines = parse_yaml("defaults: &d\n  max_count: 2\ngroups:\n  - *d\n  - *d\n", "f.yaml")
    assert data == {"defaults": {"max_count": 2}, "groups": [{"max_count": 2}, {"max_count": 2}]}
    assert [lines[("groups", i, "max_count")] for i in (0, 1)] == [2, 2]


def test_the_limits_are_exact() -> None:
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "f.yaml")[0] is not None
    with pytest.raises(SpecError, match=rf"^f\.yaml:1:{MAX_DEPTH + 1}: nesting deeper"):
        parse_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "f.yaml")
    assert len(parse_yaml("[" + "0," * (MAX_NODES - 1) + "]", "f.yaml")[0]) == MAX_NODES - 1
    with pytest.raises(SpecError, match=f"more than {MAX_NODES} YAML nodes"):
        parse_yaml("[" + "0," * MAX_NODES + "]", "f.yaml")


def test_the_text_limit_is_exact_and_counts_each_use_of_an_alias() -> None:
    # Keys count: "a" is one character of the document's text.
    assert len(parse_yaml("a: " + "x" * (MAX_TEXT_CHARS - 1), "f.yaml")[0]["a"]) == MAX_TEXT_CHARS - 1
    with pytest.raises(SpecError, match=rf"^f\.yaml:1:4: more than {MAX_TEXT_CHARS} characters of keys and values"):
        parse_yaml("a: " + "x" * MAX_TEXT_CHARS, "f.yaml")
    half = (MAX_TEXT_CHARS - 2) // 2  # keys a and b, the value twice
    assert parse_yaml(f"a: &v {'x' * half}\nb: *v\n", "f.yaml")[0]["b"] == "x" * half
    with pytest.raises(SpecError, match=rf"^f\.yaml:2:4: alias \*v stands for {half + 1} characters"):
        parse_yaml(f"a: &v {'x' * (half + 1)}\nb: *v\n", "f.yaml")


def test_a_spec_nested_past_pythons_recursion_limit_in_code_is_one_line() -> None:
    # A file cannot nest past MAX_DEPTH; data built in code can, and the models, shape repair and rules recurse.
    deep: object = "x"
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "llm", "compute": {"backend": "pcs", "groups": deep}}, "code")
    assert caught.value.lines_out() == ["code: (top level): nests too deeply to check; a spec nests about 6 levels"]


def test_a_recursion_error_while_parsing_is_one_line() -> None:
    # MAX_DEPTH keeps the recursive composer far from Python's limit; lower the limit to reach the backstop.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 80)
    try:
        with pytest.raises(SpecError) as caught:
            parse_yaml("[" * 90 + "]" * 90, "f.yaml")
    finally:
        sys.setrecursionlimit(limit)
    [line] = caught.value.lines_out()
    assert re.fullmatch(r"f\.yaml:1:\d+: nesting too deep to read", line), line


def test_a_file_of_exactly_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES - 1) + b"\n")
    assert read_spec_file(path) == (None, {})
    path.write_bytes(b"#" * MAX_FILE_BYTES + b"\n")
    with pytest.raises(SpecError, match="may be at most 1 MiB"):
        read_spec_file(path)


def test_a_fifo_is_refused_in_process_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    os.mkfifo(path)
    with pytest.raises(SpecError, match="is a named pipe"):
        read_spec_file(path)


def test_a_bom_before_a_spec_changes_no_line(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: a\ncompute:\n  backend: pcs\n")
    data, lines = read_spec_file(path)
    assert data == {"name": "a", "compute": {"backend": "pcs"}}
    assert lines == {("name",): 1, ("compute",): 2, ("compute", "backend"): 3}
