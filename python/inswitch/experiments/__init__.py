"""Paper experiments: each regenerates a paper's headline figure from scratch (JSON + PNG)
and states the paper's numbers beside ours.

An experiment is a module in this package that defines `EXPERIMENTS`, a list of
[`Experiment`]. `inswitch experiment NAME` runs one; `inswitch experiment --list` lists them.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper reports, and the key of ours to set beside it."""

    what: str
    paper: str
    ours_key: str
    #: Ours times `scale` is in the paper's unit (100: ours is a fraction, the paper's a %).
    scale: float = 1.0
    #: Why ours differs from the paper, when it does (printed with the verdict). Empty: the
    #: output says the reason is not established.
    why: str = ""
    #: What "-" in `paper` means: why the paper has no number here.
    no_paper: str = "beyond the paper, which reports no number for this"


@dataclass(frozen=True)
class Experiment:
    name: str
    paper: str
    figure: str
    description: str
    #: `run(quick, progress) -> result` (JSON-serialisable). `quick` is a smaller run for tests.
    run: Callable[[bool, Callable[[str], None]], dict[str, Any]]
    #: `plot(result, png_path)`.
    plot: Callable[[dict[str, Any], Path], None]
    numbers: list[PaperNumber] = field(default_factory=list)
    needs_root: bool = False
    #: Switch programs `--program` may choose (passed to `run` as `program=`; the first is
    #: the default); empty: the experiment takes no `--program`.
    programs: tuple[str, ...] = ()


#: Every experiment's name, without importing the modules (they import matplotlib and every
#: system: seconds on a loaded machine), so `inswitch experiment NAME` refuses a bad NAME
#: before any work starts. `tests/test_cli_inputs.py` checks it equals `all_experiments()`.
NAMES = frozenset({
    "daiet-fig1", "daiet-fig3", "daiet-two-level",
    "hare-fig12a", "hare-fig12b", "hare-fig13", "hare-fig13-real", "hare-fig14", "hare-fig14-real", "hare-fig15", "hare-fig15-real",
    "hare-table2", "hare-ycsb",
    "inaas-attack", "inaas-attack-real", "inaas-fig7", "inaas-fig7-real", "inaas-table2", "inaas-table2-real", "inaas-table3",
    "inaas-table3-real",
    "netsha-fig11", "netsha-fig12", "netsha-fig13", "netsha-fig14-15", "netsha-fig16", "netsha-fig17", "netsha-fig18-19",
    "netsha-fig20", "netsha-fig21", "netsha-fig22", "netsha-fig23", "netsha-table2",
    "switchagg-fig10-11", "switchagg-fig2", "switchagg-fig9", "switchagg-hops", "switchagg-table2",
})


def all_experiments() -> dict[str, Experiment]:
    """Every experiment of every module in this package, by name."""
    out: dict[str, Experiment] = {}
    for m in pkgutil.iter_modules(__path__):
        if m.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{m.name}")
        for e in getattr(mod, "EXPERIMENTS", []):
            if e.name in out:
                raise RuntimeError(f"experiment {e.name!r} defined twice")
            out[e.name] = e
    return out


def lookup(result: dict[str, Any], key: str) -> Any:
    """`a.b.c` in nested dicts (None if absent)."""
    cur: Any = result
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


#: A single paper value agrees when ours is within this fraction of it.
TOLERANCE = 0.2

_NUM = r"[-+]?\d+(?:\.\d+)?"


def paper_bounds(text: str) -> tuple[float, float] | None:
    """The range of values a paper number allows, from its text: `> X`, `< X`, `A-B`,
    `≈ X` / `~X` / `X` (within TOLERANCE), percentages kept as percentages; a parenthesised
    aside is ignored. None when the text is qualitative ("rising", "immediately")."""
    t = re.sub(r"\(.*?\)", "", text).replace("×", "x").replace("−", "-").strip()
    t = t.split(";")[0].split(",")[0].strip()
    m = re.fullmatch(rf"([<>])\s*({_NUM})\s*[%x]?", t)
    if m:
        v = float(m.group(2))
        return (v, math.inf) if m.group(1) == ">" else (-math.inf, v)
    m = re.fullmatch(rf"({_NUM})\s*%?\s*or (?:higher|more)", t)
    if m:
        return float(m.group(1)), math.inf
    m = re.fullmatch(rf"({_NUM})\s*[%x]?\s*[-–]\s*({_NUM})\s*[%x]?", t)
    if m:
        return float(m.group(1)), float(m.group(2))
    m = re.fullmatch(rf"(?:≈|~)?\s*({_NUM})\s*[%x]?", t)
    if m:
        v = float(m.group(1))
        d = TOLERANCE * abs(v) if v else 0.05
        return v - d, v + d
    return None


def compare(result: dict[str, Any], numbers: list[PaperNumber], quick: bool) -> list[dict[str, Any]]:
    """Each paper number beside ours, in the paper's unit, with a verdict: `agrees`,
    `differs`, `qualitative` (the paper gives no figure to compare), `no paper number`,
    or `not measured` (with why)."""
    rows = []
    for n in numbers:
        raw = lookup(result, n.ours_key)
        ours = raw * n.scale if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
        row: dict[str, Any] = {"quantity": n.what, "paper": n.paper, "ours": ours, "ours_key": n.ours_key}
        if raw is None:
            row["verdict"] = "not measured"
            row["why"] = ("not part of a --quick run" if quick else "this run did not produce it") + f" ({n.ours_key})"
        elif n.paper.strip() in ("", "-"):
            row["verdict"] = "no paper number"
            row["why"] = n.no_paper
        elif not isinstance(ours, (int, float)) or isinstance(ours, bool):
            row["verdict"] = "qualitative"
        else:
            b = paper_bounds(n.paper)
            if b is None:
                row["verdict"] = "qualitative"
            else:
                row["verdict"] = "agrees" if b[0] <= ours <= b[1] else "differs"
                if row["verdict"] == "differs":
                    row["why"] = n.why or "reason not established"
        rows.append(row)
    return rows
