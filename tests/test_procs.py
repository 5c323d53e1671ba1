"""`inswitch.procs.first_line`: the READY line is read without swallowing what follows."""

from __future__ import annotations

import subprocess
import sys

from inswitch.procs import first_line


def _child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_result_printed_right_after_ready_reaches_communicate() -> None:
    # Both lines in one write: `readline()` would have buffered the second and
    # `communicate()` (which reads the descriptor) would never see it.
    p = _child("import sys; sys.stdout.write('READY\\n{\"x\": 1}\\n'); sys.stdout.flush()")
    assert first_line(p) == "READY"
    out, err = p.communicate(timeout=10)
    assert out.strip() == '{"x": 1}' and err == ""


def test_a_child_that_exits_without_a_line() -> None:
    p = _child("import sys; sys.stderr.write('boom'); sys.exit(3)")
    assert first_line(p) == ""
    out, err = p.communicate(timeout=10)
    assert p.returncode == 3 and err == "boom"
