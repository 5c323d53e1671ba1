"""`inswitch experiment NAME`: run a paper experiment, write JSON + PNG, print the paper's
numbers beside ours."""

from __future__ import annotations

import os
import time
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch.experiments import NAMES, TOLERANCE, all_experiments, compare
from inswitch.cliopts import OUT_DIR, Choice, Text, argument, option
from inswitch.output import ensure_dir, write_json
from inswitch.tables import show


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def _experiment(text: str) -> str:
    if text not in NAMES:
        raise ValueError(f"known: {', '.join(sorted(NAMES))}")
    return text


def register(app: typer.Typer) -> None:
    @app.command("experiment", epilog="Examples:\n\n  inswitch experiment --list\n\n  inswitch experiment hare-fig13 --quick --out out/experiments\n")
    def experiment_cmd(
        name: Optional[str] = argument(None, type=Text("an experiment name", check=_experiment, bad=("bogus",)), help="Experiment name (see --list)."),
        out: str = option("out/experiments", "--out", type=OUT_DIR, help="Directory for NAME.json and NAME.png."),
        quick: bool = typer.Option(False, "--quick", help="A small run (what the tests use)."),
        list_: bool = typer.Option(False, "--list", help="List the experiments."),
        program: Optional[str] = option(None, "--program", type=Choice("switchagg", "daiet", "netsha", "netsha-unbounded"), help="The switch program of an experiment that offers a choice (e.g. switchagg-hops: switchagg or daiet; netsha-*: netsha, which fits tofino1, or netsha-unbounded, Table 1's)."),
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
            show(console, t)
            raise typer.Exit(0 if list_ else 2)
        if name not in exps:
            console.print(f"[red]error:[/red] no experiment {name!r} (known: {', '.join(sorted(exps))})")
            raise typer.Exit(2)
        e = exps[name]
        if program is not None and program not in e.programs:
            console.print(f"[red]error:[/red] {name} " + (f"takes --program {'|'.join(e.programs)}" if e.programs else "takes no --program"))
            raise typer.Exit(2)
        if e.needs_root and os.geteuid() != 0:
            console.print(f"[red]error:[/red] {name} needs root (network namespaces)")
            raise typer.Exit(2)
        out_dir = ensure_dir(out, "--out")
        t0 = time.monotonic()
        with console.status(f"{name}: starting") as st:
            result = e.run(quick, lambda s: st.update(f"{name}: {s}"), **({"program": program} if program else {}))  # type: ignore[call-arg]
        result.setdefault("experiment", name)
        result.setdefault("paper", e.paper)
        result.setdefault("figure", e.figure)
        result["quick"] = quick
        result["wall_s"] = round(time.monotonic() - t0, 2)
        jpath, ppath = out_dir / f"{name}.json", out_dir / f"{name}.png"
        e.plot(result, ppath)
        rows = compare(result, e.numbers, quick)
        result["comparison"] = rows
        write_json(jpath, result)
        render_comparison(console, f"{name}: {e.paper}, {e.figure}", rows, quick, result)
        console.print(f"wrote {jpath} and {ppath} ({result['wall_s']} s)")


def _notes(result: dict) -> list[str]:
    """The explanations an experiment put in its JSON (`note`, `notes`, at the top or one
    level down), in order."""
    out: list[str] = []

    def take(d: dict) -> None:
        for k in ("note", "notes"):
            v = d.get(k)
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, list):
                out.extend(str(x) for x in v)

    take(result)
    for v in result.values():
        if isinstance(v, dict):
            take(v)
    return list(dict.fromkeys(out))


def render_comparison(console: Console, title: str, rows: list[dict], quick: bool, result: dict) -> None:
    """The paper's numbers beside ours (same units), a verdict per row with the reason when
    they differ or a value is missing, and the experiment's notes."""
    if quick:
        console.print("[yellow]--quick run[/yellow]: smaller than the paper's setup; the numbers show the trend, not the paper's scale", soft_wrap=True)
    t = Table(title=title)
    for c in ("quantity", "paper", "ours", "verdict"):
        t.add_column(c)
    reasons: list[str] = []
    for r in rows:
        verdict = r["verdict"]
        if r.get("why"):
            if r["why"] not in reasons:
                reasons.append(r["why"])
            verdict += f" [{reasons.index(r['why']) + 1}]"
        paper = r["paper"] if r["paper"].strip() not in ("", "-") else "(none)"
        ours = _fmt(r["ours"]) if r["ours"] is not None else "(not measured)"
        t.add_row(r["quantity"], paper, ours, verdict)
    show(console, t)
    console.print(f"agrees: inside the paper's range, or within {TOLERANCE:.0%} of its single value", soft_wrap=True)
    for i, why in enumerate(reasons, 1):
        console.print(f"[{i}] {why}", soft_wrap=True, markup=False)
    for n in _notes(result):
        console.print(f"note: {n}", soft_wrap=True, markup=False, highlight=False)
