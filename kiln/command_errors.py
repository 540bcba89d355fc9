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

    A bad spec prints its own lines and BAD_INPUT one line, exit 2; FAILED and AWS errors one line, exit 1;
    missing or rejected credentials the one line every command prints for them (kiln.aws_errors.no_credentials).
    """

    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        from kiln.aws_errors import NoCredentials, explain, is_credentials_error, no_credentials, one_line
        from kiln.ci.remote import RemoteError
        from kiln.safe_output import UnsafeOutput
        from kiln.spec import SpecError

        try:
            return handler(args)
        except NoCredentials as exc:
            print(no_credentials(command, exc), file=sys.stderr)
            return 1
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
        except (ClientError, BotoCoreError) as exc:
            if is_credentials_error(exc):
                print(no_credentials(command, exc), file=sys.stderr)
            elif isinstance(exc, ClientError):
                print(f"{command}: {explain(exc.operation_name, exc)}", file=sys.stderr)
            else:
                print(f"{command}: {one_line(str(exc))}", file=sys.stderr)
            return 1

    return run
