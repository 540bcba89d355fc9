"""The two kinds of error every kiln command tells apart, and their exit codes (kiln.cli.errors maps them).

An InputError is what the user gave: a spec, an argument, a file or an output path kiln will not act on; nothing was
done, exit 2. A Failure happened while acting: AWS refused, a remote command, a deploy or a teardown failed; exit 1.
str() of either is one line naming what is wrong and what to do (a SpecError gives its lines). Node-side code and
the Lambda functions' code keep their own exceptions: they cannot import kiln.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_INPUT = 2


class KilnError(Exception):
    """An error kiln raises on purpose; its kind, InputError or Failure, gives the exit code."""


class InputError(KilnError):
    """Input kiln cannot act on (a spec, an argument, a file, an output path); nothing was done. Exit 2."""


class Failure(KilnError):
    """Something failed while kiln acted (AWS refused, a command, a deploy or a teardown failed). Exit 1."""
