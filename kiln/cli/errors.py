"""The one place a kiln command turns an error into what it prints and its exit code.

Every command group's entry wraps its handlers with one_line_failures (kiln.cli.main wraps every command once more,
as a backstop): a bad spec prints its own lines and an InputError one line, exit 2; a Failure one line, exit 1;
missing or rejected credentials the one line every command prints for them (kiln.aws.errors.no_credentials); an AWS
error that no call wrapped is explained in one line, exit 1. Never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kiln.contracts.errors import EXIT_FAILURE, EXIT_INPUT, Failure, InputError

Handler = Callable[[argparse.Namespace], int]


def said(command: str, message: str, *, error_word: bool = False) -> str:
    """Return the line COMMAND prints for MESSAGE: the command named once, then the message.

    A message that already begins with the command (an output path's refusal names `kiln ci identity --out`) is the
    whole line. ERROR_WORD: `COMMAND: error: MESSAGE`, as argparse words its errors (kiln local, kiln job).
    """
    if message.startswith((f"{command}:", f"{command} ")):
        return message
    return f"{command}: error: {message}" if error_word else f"{command}: {message}"


def one_line_failures(
    command: str,
    handler: Handler,
    *,
    otherwise: str = "",
    failed_exit: int = EXIT_FAILURE,
    error_word: bool = False,
    os_error_exit: int | None = None,
) -> Handler:
    """Wrap HANDLER so every expected failure is one line on stderr naming COMMAND, never a traceback.

    OTHERWISE: what the command can do without AWS, said after the credentials line. FAILED_EXIT: the exit code of a
    Failure (and of missing credentials), where exit 1 means something else (`kiln diff`: a refused change).
    OS_ERROR_EXIT: the exit code of an OSError (a file that could not be read or written), said in one line too;
    None lets it through.
    """

    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        from kiln.aws.errors import NoCredentials, explain, is_credentials_error, no_credentials, one_line
        from kiln.spec import SpecError

        def say(message: str) -> None:
            print(said(command, message, error_word=error_word), file=sys.stderr)

        try:
            return handler(args)
        except NoCredentials as exc:
            print(no_credentials(command, exc, otherwise=otherwise), file=sys.stderr)
            return failed_exit
        except SpecError as exc:
            for line in exc.lines_out():
                print(line, file=sys.stderr)
            return EXIT_INPUT
        except InputError as exc:
            say(str(exc))
            return EXIT_INPUT
        except Failure as exc:
            say(str(exc))
            return failed_exit
        # Most AWS calls are wrapped to name themselves (kiln.aws.errors.aws_call); this is the backstop for one that
        # is not.
        except (ClientError, BotoCoreError) as exc:
            if is_credentials_error(exc):
                print(no_credentials(command, exc, otherwise=otherwise), file=sys.stderr)
            elif isinstance(exc, ClientError):
                say(explain(exc.operation_name, exc))
            else:
                say(one_line(str(exc)))
            return failed_exit
        except OSError as exc:
            if os_error_exit is None:
                raise
            say(str(exc))
            return os_error_exit

    return run
