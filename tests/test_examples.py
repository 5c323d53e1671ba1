"""Every script in `examples/` runs and checks itself against a reference computed without
the switch (each exits non-zero on a mismatch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: Scripts that build a rack of network namespaces.
NEEDS_ROOT = {"daiet_rack.py"}


def test_every_example_is_run_here() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(["hare_hit_rate.py", *NEEDS_ROOT])


def _run(name: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent / "python"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_hare_hit_rate_example() -> None:
    out = _run("hare_hit_rate.py", "--keys", "1000", "--duration", "0.6")
    live = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines() if "hit rate so far" in line]
    assert len(live) >= 5 and max(live) > 0.1, out  # read several times during the run, and Hare offloaded
    assert "answers correct: True" in out


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces")
def test_daiet_rack_example() -> None:
    out = _run("daiet_rack.py", "--words", "2000")
    assert "result equals the Counter computed without the switch" in out, out
