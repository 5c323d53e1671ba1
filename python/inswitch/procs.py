"""Child processes that say "READY" on a line of their stdout before their real output.

The runner reads that first line with `os.read` on the pipe, a byte at a time, instead of
`p.stdout.readline()`: readline buffers whatever else has arrived, and `communicate()` later
reads the pipe's file descriptor directly, so a child that printed its result right after
READY (one that fails or times out at once) would have that result swallowed.
"""

from __future__ import annotations

import os
import subprocess

#: The longest first line read (a child that prints something else is reported, not waited on).
MAX_LINE = 4096


def first_line(p: subprocess.Popen[str]) -> str:
    """The child's first stdout line, without its newline; "" if it exited before one.
    Blocks until the line or end of file (the child prints READY or exits)."""
    assert p.stdout is not None
    fd = p.stdout.fileno()
    out = bytearray()
    while len(out) < MAX_LINE:
        b = os.read(fd, 1)
        if not b or b == b"\n":
            break
        out += b
    return out.decode(errors="replace").strip()
