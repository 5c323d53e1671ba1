"""`--json` / `--out` files: checked before the work, written whole, never lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from inswitch.output import ensure_dir, ensure_writable, write_json


def test_ensure_writable_makes_directories_and_refuses_what_cannot_be_written(tmp_path: Path) -> None:
    p = ensure_writable(tmp_path / "a" / "b" / "out.json")
    assert p.parent.is_dir() and not p.exists()  # the probe left nothing behind
    assert list(p.parent.iterdir()) == []
    with pytest.raises(typer.BadParameter, match="is a directory"):
        ensure_writable(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(typer.BadParameter, match="cannot write"):
        ensure_writable(blocker / "out.json")  # its parent is a file
    with pytest.raises(typer.BadParameter, match="cannot write into"):
        ensure_dir(blocker / "sub")
    assert ensure_dir(tmp_path / "d") == tmp_path / "d"


def test_write_json_is_whole_or_rescued(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    doc = {"a": 1, "rate": np.float64(2.5), "n": [1, 2]}
    p = write_json(tmp_path / "x" / "r.json", doc)
    assert json.loads(p.read_text()) == {"a": 1, "rate": 2.5, "n": [1, 2]}
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temporary file left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(typer.Exit):
        write_json(blocker / "r.json", doc)
    err = capsys.readouterr().err
    assert "cannot write" in err and "the result is in" in err
    rescue = Path(err.rsplit("the result is in ", 1)[1].strip())
    try:
        assert json.loads(rescue.read_text()) == {"a": 1, "rate": 2.5, "n": [1, 2]}
    finally:
        rescue.unlink()


@pytest.mark.parametrize("argv", [
    ["bench", "aggregation", "--duration", "0"],
    ["bench", "forward", "--duration", "-1"],
    ["resources", "daiet", "--out", "."],
])
def test_bad_output_or_duration_is_a_usage_error_before_any_work(argv: list[str], tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "Invalid value" in cp.stderr and "Traceback" not in cp.stderr + cp.stdout
