"""The exit codes a remote command gets when it did not end on its own; otherwise it returns its own."""

from __future__ import annotations

# It ran out of time: kiln's timeout, or Run Command's execution or delivery timeout.
EXIT_TIMED_OUT = 124
# It was cancelled (Run Command's Cancelled status).
EXIT_CANCELLED = 130
# A HyperPod session ended without reporting the command's exit code.
EXIT_NO_STATUS = 255
