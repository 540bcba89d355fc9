"""Processes the tests may leave behind: finding them, and stopping GnuPG's daemons."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# The daemons gpg starts on its own for a GnuPG home, and which outlive it unless told to stop.
GNUPG_DAEMONS = ("gpg-agent", "dirmngr", "keyboxd")


def stop_gnupg_daemons(home: Path) -> None:
    """Stop every daemon gpg started for the GnuPG home HOME (`gpgconf --kill all`; none running is fine)."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, timeout=60, check=False)


def processes_naming(directory: Path) -> dict[int, list[str]]:
    """Return the command line of every process but this one with an argument in DIRECTORY, by process id."""
    inside = str(directory).rstrip("/") + "/"
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = [arg.decode(errors="replace") for arg in (proc / "cmdline").read_bytes().split(b"\0") if arg]
        except OSError:  # gone meanwhile
            continue
        if any(inside in arg + "/" for arg in argv):
            found[int(proc.name)] = argv
    return found
