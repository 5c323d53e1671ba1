"""What `inswitch experiment` prints: the paper's number and ours in the same unit, a verdict
per row with its reason, `--quick` said, the notes printed, no unexplained "-"."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from inswitch.experiments import PaperNumber, compare, paper_bounds
from inswitch.experiments.cli import render_comparison


def test_paper_bounds_read_the_papers_forms() -> None:
    assert paper_bounds("88.1-90.5 %") == (88.1, 90.5)
    assert paper_bounds("0.1–0.25 (4–10× fewer)") == (0.1, 0.25)
    assert paper_bounds("> 0.9, as TLSH") == (0.9, math.inf)
    assert paper_bounds("< 8") == (-math.inf, 8.0)
    assert paper_bounds("99 % or higher") == (99.0, math.inf)
    lo, hi = paper_bounds("≈ 0.2 (reduction halves again)")  # type: ignore[misc]
    assert lo < 0.2 < hi and math.isclose(hi - lo, 0.08)
    assert paper_bounds("rising") is None and paper_bounds("immediately") is None


def test_compare_scales_to_the_papers_unit_and_explains_every_gap() -> None:
    result = {"red": 0.874, "gap": 0.5, "extra": 3.0, "ratio": 5000.0}
    nums = [
        PaperNumber("reduction", "86.9 %", "red", scale=100),
        PaperNumber("gap", "< 0.1", "gap", why="because of X"),
        PaperNumber("beyond", "-", "extra"),
        PaperNumber("absent", "1.5x", "missing.key"),
        PaperNumber("trend", "rising", "ratio"),
    ]
    rows = {r["quantity"]: r for r in compare(result, nums, quick=True)}
    assert math.isclose(rows["reduction"]["ours"], 87.4) and rows["reduction"]["verdict"] == "agrees"
    assert rows["gap"]["verdict"] == "differs" and rows["gap"]["why"] == "because of X"
    assert rows["beyond"]["verdict"] == "no paper number" and rows["beyond"]["why"]
    assert rows["absent"]["verdict"] == "not measured" and "--quick" in rows["absent"]["why"]
    assert rows["trend"]["verdict"] == "qualitative"

    buf = io.StringIO()
    render_comparison(Console(file=buf, width=80), "t", list(rows.values()), True, {"note": "the explanation"})
    out = buf.getvalue()
    assert "--quick run" in out and "note: the explanation" in out and "because of X" in out
    # Every row's value cell says something: no bare "-" left unexplained.
    assert not re.search(r"\s-\s*$", out, re.M), out
    # Each footnote mark has its footnote.
    for mark in set(re.findall(r"\[(\d+)\]", out)):
        assert re.search(rf"^\[{mark}\] \S", out, re.M), mark


def test_experiment_command_prints_the_comparison(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "netsha-fig21", "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "--quick run" in out.stdout
    assert re.search(r"NetSHa recall\s+> 0\.9, as TLSH\s+0\.\d{3}\s+(agrees|differs)", out.stdout), out.stdout
    assert (tmp_path / "netsha-fig21.png").stat().st_size > 10_000
    import json

    doc = json.loads((tmp_path / "netsha-fig21.json").read_text())
    assert [r["quantity"] for r in doc["comparison"]][:2] == ["NetSHa recall", "TLSH recall"]
