"""What the `cameo` command writes, and how it ends when its reader goes away.

Output piped into a reader that stops early (`cameo results a --json | head -3`) ends the
command quietly, the Unix way: no message, no traceback, exit status 141 (128 + SIGPIPE,
what the shell reports for a command the signal ended, as `cat` or `grep` in the same
pipe). A caller can so tell a cut-short run from one that wrote everything (0), as the
rows not written were not committed either. Python ignores SIGPIPE, so the closed pipe
shows as a `BrokenPipeError` from a write; `quiet_exit` then points the stream at /dev/null,
so the interpreter's own last flush fails no more.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

#: The exit status of a command whose output pipe was closed by its reader.
PIPE_CLOSED = 141


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


class CutShort(BrokenPipeError):
    """The output pipe closed; `written` lines had gone out whole before it."""

    def __init__(self, written: int) -> None:
        super().__init__(f"the output pipe closed after {written} lines")
        self.written = written


class LineWriter:
    """Lines written one at a time, each flushed, so a line counts as written once it left
    the process: `written` counts them. A closed pipe raises `CutShort` (a line that broke
    off half-way does not count).

    Args:
        out: where to write (default: stdout, as it is when the first line is written).
    """

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out
        self.written = 0

    def write(self, line: str) -> None:
        out = self.out or sys.stdout
        try:
            out.write(line + "\n")
            out.flush()
        except BrokenPipeError:
            raise CutShort(self.written) from None
        self.written += 1


def quiet_exit() -> int:
    """After the output pipe closed: the standard streams that cannot be flushed any more
    are pointed at /dev/null (what is still buffered for them goes nowhere, and the
    interpreter's last flush fails no more); the exit status to end with."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
            continue
        except OSError:  # the closed pipe
            pass
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
            continue
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return PIPE_CLOSED
