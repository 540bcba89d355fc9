"""The one way kiln's AWS-facing command groups (`kiln ci`, `kiln ami`) turn expected failures into one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], int]


def one_line_failures(
    command: str,
    handler: Handler,
    *,
    bad_input: tuple[type[Exception], ...],
    failed: tuple[type[Exception], ...],
) -> Handler:
    """Wrap HANDLER so every expected failure is one line on stderr prefixed with COMMAND, never a traceback.

    A bad spec prints its own lines and BAD_INPUT one line, exit 2; FAILED and AWS errors one line, exit 1.
    """

    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        from kiln.aws_errors import explain
        from kiln.ci.remote import RemoteError
        from kiln.safe_output import UnsafeOutput
        from kiln.spec import SpecError

        try:
            return handler(args)
        except SpecError as exc:
            for line in exc.lines_out():
                print(line, file=sys.stderr)
            return 2
        except (*bad_input, UnsafeOutput) as exc:
            print(f"{command}: {exc}", file=sys.stderr)
            return 2
        except (*failed, RemoteError) as exc:
            print(f"{command}: {exc}", file=sys.stderr)
            return 1
        # Most AWS calls are wrapped to name themselves; these are the backstop for one that is not.
        except ClientError as exc:
            print(f"{command}: {explain(exc.operation_name, exc)}", file=sys.stderr)
            return 1
        except BotoCoreError as exc:
            print(f"{command}: {exc}", file=sys.stderr)
            return 1

    return run
