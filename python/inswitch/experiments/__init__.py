"""Paper experiments: each regenerates a paper's headline figure from scratch (JSON + PNG)
and states the paper's numbers beside ours.

An experiment is a module in this package that defines `EXPERIMENTS`, a list of
[`Experiment`]. `inswitch experiment NAME` runs one; `inswitch experiment --list` lists them.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper reports, and the key of ours to set beside it."""

    what: str
    paper: str
    ours_key: str


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
