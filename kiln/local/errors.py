"""Errors of the local cluster: one clear line each; its kind gives the exit code (kiln.contracts.errors)."""

from __future__ import annotations

from kiln.contracts.errors import Failure, InputError


class LocalError(InputError):
    """A problem the user can act on, a precondition or usage (exit 2); its message is the whole report."""


class LocalFailure(Failure):
    """Work that was started failed (a daemon died, a timeout passed): exit 1."""
