"""The `kiln` command: one parser built from the command modules in COMMANDS, and one mapping of their errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kiln.cli import (
    ami,
    bootstrap,
    catalog,
    ci,
    connect,
    diff,
    hyperpod,
    jobs,
    leftovers,
    local,
    preflight,
    report,
    schema,
    validate,
)
from kiln.cli.errors import one_line_failures

# Every command, in `kiln --help`'s order: each module adds its own parser (register) and nothing else does.
COMMANDS = (
    validate,
    schema,
    catalog,
    report,
    bootstrap,
    local,
    ci,
    jobs,
    ami,
    preflight,
    leftovers,
    diff,
    hyperpod,
    connect,
)


class _CommandIndex(argparse.HelpFormatter):
    """`kiln --help`'s formatter: one line per command, its name and its help, never wrapped onto a second line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures a command's name at its section's indent but prints it one step further in, so the
        # longest names (bootstrap, preflight) would start their help on a line of its own.
        for command in self._iter_indented_subactions(action):
            width = len(self._format_action_invocation(command)) + self._current_indent
            self._action_max_length = max(self._action_max_length, width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return [" ".join(text.split())]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every kiln subcommand."""
    parser = argparse.ArgumentParser(
        prog="kiln",
        description="kiln: GPU training clusters on AWS from one typed cluster spec. Each command has its own --help.",
        formatter_class=_CommandIndex,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the kiln command line and return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        # Each command group maps its errors under its own name; this names the command for any that escape.
        return int(one_line_failures(f"kiln {args.command}", args.func)(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
