"""Errors of the rack builder. The CLI prints these as one clear message (no traceback), so
each says what failed and, where it can, what to do about it."""

from __future__ import annotations


class RackError(Exception):
    """A rack operation failed for a reason the user can act on."""


class CommandError(RackError):
    """An external command (`ip`, `ethtool`, `sysctl`, ...) failed. Carries the command line,
    its exit code and stderr, because "ip failed" alone is useless when debugging a shared box."""

    def __init__(self, argv: list[str], returncode: int | None, stderr: str, why: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        cmd = " ".join(self.argv)
        what = why or (f"exited with {returncode}" if returncode is not None else "failed")
        msg = f"`{cmd}` {what}"
        if self.stderr:
            msg += f": {self.stderr}"
        super().__init__(msg)
