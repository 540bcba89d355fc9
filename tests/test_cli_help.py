"""`kiln --help`: every command the parser registers, one line each, with its help."""

from __future__ import annotations

import argparse
import re

import pytest

from kiln.cli.main import build_parser, main

# The command groups a newcomer looks for (issue 34); the test below also covers any registered later.
EXPECTED = (
    "validate", "schema", "catalog", "report", "bootstrap", "local", "ci", "job", "ami", "preflight", "leftovers",
    "diff", "hyperpod",
)  # fmt: skip


def _commands() -> dict[str, str]:
    """Return every command the top-level parser registers, with the help its index line shows."""
    [commands] = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    helps = {action.dest: action.help for action in commands._choices_actions}
    assert set(helps) == set(commands.choices), "a command registered without help= is missing from `kiln --help`"
    return helps


def _index_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, columns: int) -> list[str]:
    """Return the lines of `kiln --help` between the COMMAND heading and the options, on a COLUMNS-wide terminal."""
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("  COMMAND") + 1
    return lines[start : lines.index("", start)]


def test_every_expected_command_group_is_registered() -> None:
    assert set(EXPECTED) <= set(_commands())


@pytest.mark.parametrize("columns", [80, 200])
def test_help_lists_every_registered_command_on_one_line_with_its_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, columns: int
) -> None:
    helps = _commands()
    lines = _index_lines(monkeypatch, capsys, columns)
    # One line per command, in registration order, and nothing else: no help wrapped onto a line of its own.
    assert len(lines) == len(helps)
    column = None
    for line, (name, text) in zip(lines, helps.items(), strict=True):
        match = re.fullmatch(rf"    ({re.escape(name)} +)(\S.*)", line)
        assert match, f"not one line for {name}: {line!r}"
        assert match[2] == " ".join(text.split()) and text.strip()
        assert "\n" not in text
        # Every help starts in the same column, the longest name's.
        column = column or len(match[1])
        assert len(match[1]) == column
