"""Errors the launcher reports as one line instead of a traceback."""


class UsageError(Exception):
    """The command line is wrong; the CLI exits 2."""


class LaunchError(Exception):
    """The environment cannot be turned into a launch; the CLI exits 1."""
