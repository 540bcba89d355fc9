"""`kiln schema`: the spec's JSON Schema, for editor completion."""

from __future__ import annotations

import argparse
import sys


def _schema(args: argparse.Namespace) -> int:
    from kiln.host.safe_output import write_file_atomically
    from kiln.spec.schema import schema_text

    text = schema_text()
    if args.out:
        write_file_atomically(args.out, text, what="kiln schema --out")
    else:
        sys.stdout.write(text)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `kiln schema` to COMMANDS."""
    schema = commands.add_parser("schema", help="print the spec's JSON Schema (for editor completion)")
    schema.add_argument("--out", help="write to this file instead of standard output")
    schema.set_defaults(func=_schema)
