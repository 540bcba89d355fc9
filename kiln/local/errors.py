"""Errors of the local cluster: one clear line each, with the exit code the CLI returns."""

from __future__ import annotations

# 2: usage or a precondition the user must fix; 1: something failed while working.
PRECONDITION = 2
FAILURE = 1


class LocalError(Exception):
    """A problem the user can act on; its message is the whole report."""

    exit_code = PRECONDITION


class LocalFailure(LocalError):
    """Work that was started failed (a daemon died, a timeout passed)."""

    exit_code = FAILURE
