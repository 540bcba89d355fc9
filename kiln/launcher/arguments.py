"""Argument parsing shared by the launcher's subcommands: usage errors and bounded integers."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kiln.launcher.errors import UsageError


class SubcommandParser(argparse.ArgumentParser):
    """An argparse parser whose errors become one-line UsageErrors naming the subcommand."""

    def __init__(self, *, subcommand: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.subcommand = subcommand

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.subcommand}: {message}")


def integer_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """Return an argparse type that accepts whole numbers >= MINIMUM, described as WHAT."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what} (got {text!r})")
        return value

    return parse


positive = integer_at_least(1, "a positive integer")
