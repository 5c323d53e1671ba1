"""`inswitch experiment NAME`: run a paper experiment, write JSON + PNG, print the paper's
numbers beside ours."""

from __future__ import annotations

import os
import time
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch.experiments import all_experiments, lookup
from inswitch.cliopts import OUT_DIR, Text, argument, option
from inswitch.output import ensure_dir, write_json


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def _experiment(text: str) -> str:
    known = all_experiments()
    if text not in known:
        raise ValueError(f"known: {', '.join(sorted(known))}")
    return text


def register(app: typer.Typer) -> None:
    @app.command("experiment", epilog="Examples:\n\n  inswitch experiment --list\n\n  inswitch experiment hare-fig13 --quick --out out/experiments\n")
    def experiment_cmd(
        name: Optional[str] = argument(None, type=Text("an experiment name", check=_experiment, bad=("bogus",)), help="Experiment name (see --list)."),
        out: str = option("out/experiments", "--out", type=OUT_DIR, help="Directory for NAME.json and NAME.png."),
        quick: bool = typer.Option(False, "--quick", help="A small run (what the tests use)."),
        list_: bool = typer.Option(False, "--list", help="List the experiments."),
    ) -> None:
        """Regenerate a paper's figure from scratch (JSON + PNG), with the paper's numbers beside ours."""
        console = Console()
        exps = all_experiments()
        if list_ or not name:
            t = Table(title="experiments")
            for c in ("name", "paper", "figure", "description"):
                t.add_column(c)
            for e in sorted(exps.values(), key=lambda e: e.name):
                t.add_row(e.name, e.paper, e.figure, e.description)
            console.print(t)
            raise typer.Exit(0 if list_ else 2)
        if name not in exps:
            console.print(f"[red]error:[/red] no experiment {name!r} (known: {', '.join(sorted(exps))})")
            raise typer.Exit(2)
        e = exps[name]
        if e.needs_root and os.geteuid() != 0:
            console.print(f"[red]error:[/red] {name} needs root (network namespaces)")
            raise typer.Exit(2)
        out_dir = ensure_dir(out, "--out")
        t0 = time.monotonic()
        with console.status(f"{name}: starting") as st:
            result = e.run(quick, lambda s: st.update(f"{name}: {s}"))
        result.setdefault("experiment", name)
        result.setdefault("paper", e.paper)
        result.setdefault("figure", e.figure)
        result["quick"] = quick
        result["wall_s"] = round(time.monotonic() - t0, 2)
        jpath, ppath = out_dir / f"{name}.json", out_dir / f"{name}.png"
        write_json(jpath, result)
        e.plot(result, ppath)
        t = Table(title=f"{name}: {e.paper}, {e.figure}")
        for c in ("quantity", "paper", "ours"):
            t.add_column(c)
        for n in e.numbers:
            t.add_row(n.what, n.paper, _fmt(lookup(result, n.ours_key)))
        console.print(t)
        console.print(f"wrote {jpath} and {ppath} ({result['wall_s']} s)")
