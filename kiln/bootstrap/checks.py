"""Value checks of the bootstrap's inputs: one line naming what was received and what is allowed."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kiln.catalog.names import NODE_PATH, NODE_PATH_RULE
from kiln.contracts.errors import InputError

# Slurm node, cluster and partition names, and host names: a DNS label, lowercase.
SLURM_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
SLURM_NAME_RULE = "a lowercase letter, then up to 62 lowercase letters, digits or '-'"


class BootstrapInputError(InputError, ValueError):
    """A bootstrap input outside what is allowed (a config value, a local cluster, a step): one line naming what was
    received and what is allowed. A ValueError too: the constructs and kiln.node_config take the
    bootstrap's refusals as ValueErrors, as props validate."""


def check_choice(what: str, got: object, allowed: Iterable[str]) -> None:
    """Raise BootstrapInputError unless GOT is one of ALLOWED."""
    allowed = tuple(allowed)
    if got not in allowed:
        raise BootstrapInputError(f"{what}: got {got!r}, allowed: {', '.join(allowed)}")


def check_positive(what: str, got: object) -> None:
    """Raise BootstrapInputError unless GOT is an integer >= 1."""
    if isinstance(got, bool) or not isinstance(got, int) or got < 1:
        raise BootstrapInputError(f"{what}: got {got!r}, allowed: an integer >= 1")


def check_pattern(what: str, got: object, pattern: re.Pattern[str], rule: str) -> None:
    """Raise BootstrapInputError unless GOT, whole, matches PATTERN (RULE says it in words)."""
    if not isinstance(got, str) or pattern.fullmatch(got) is None:
        raise BootstrapInputError(f"{what}: got {got!r}, allowed: {rule}")


def is_quotable(text: str) -> bool:
    """Return True when TEXT means itself inside single quotes: no quote and no control character.

    NAME='value' files (bundle.env, cluster.env) are read by load_env_file, which executes nothing, and may
    be sourced by bash; both take the value literally only then.
    """
    return "'" not in text and text.isprintable()


def check_quotable(name: str, value: object) -> None:
    """Raise BootstrapInputError unless VALUE is text that is_quotable."""
    if not isinstance(value, str) or not is_quotable(value):
        raise BootstrapInputError(f"{name}: got {value!r}, allowed: printable text, no single quotes or newlines")


def check_node_path(what: str, got: object) -> None:
    """Raise BootstrapInputError unless GOT is an absolute path safe to write into a node's shell files."""
    check_pattern(what, got, NODE_PATH, NODE_PATH_RULE)
