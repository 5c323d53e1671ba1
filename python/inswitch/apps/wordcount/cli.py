"""`inswitch wordcount`: MapReduce WordCount through the switch, with and without in-network
aggregation, checked against a Counter over the same input.

JSON keys (also printed as a table): `correct`, `reducer_bytes` (UDP payload bytes, or TCP
stream bytes, the reducers received), `reducer_packets`, `reducer_cpu_s` (reducer processes'
CPU time, getrusage), `job_s` (first mapper start to last reducer done); for switch mode
`baseline_udp` (the same figures of the udp run in the same invocation), `reduction`
(1 - switch reducer bytes / udp reducer bytes), `packet_reduction_vs_udp`,
`cpu_reduction_vs_udp`, and with `--mode all` also `baseline_tcp` and the `*_vs_tcp`
reductions. `runs` holds every mode's full figures (per reducer and mapper too).
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch.apps.wordcount.job import FIGURES, MODES, JobError, JobSpec, run
from inswitch.apps.wordcount.progress import job_progress
from inswitch.output import ensure_writable, write_json
from inswitch.tables import show


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "[red]NO[/red]"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(doc: dict[str, Any]) -> Table:
    runs = doc["runs"]
    t = Table(title=f"WordCount: {doc['words']:,} words, {doc['distinct_words']:,} distinct "
                    f"({doc['long_keys']:,} longer than 16 bytes"
                    + (f", {doc['oversized_keys']:,} longer than a frame" if doc.get("oversized_keys") else "")
                    + f"), {doc['mappers']} mappers, {doc['reducers']} reducers"
                    + (f", loss {doc['loss']:g}" if doc["loss"] else ""))
    t.add_column("mode")
    cols = ["correct", "reducer bytes", "reducer packets", "reducer CPU s", "job s", "retransmits"]
    if doc["loss"]:
        cols.append("frames lost")
    for c in cols:
        t.add_column(c, justify="right")
    for m in MODES:
        if m in runs:
            r = runs[m]
            name = f"switch ({doc['program']})" if m == "switch" else m
            row = [_fmt(r[k]) for k in FIGURES] + [_fmt(r.get("retransmissions"))]
            if doc["loss"]:
                row.append(_fmt(r.get("switch_lost_frames")))
            t.add_row(name, *row)
    return t


def _chg(r: float | None) -> str:
    """A reduction r as a signed change: 0.68 -> "-68.0%", -3.4 -> "+340.0%"."""
    return "-" if r is None else f"{-r:+.1%}"


def summary_lines(doc: dict[str, Any]) -> list[str]:
    out = []
    if doc.get("reduction") is not None:
        out.append(f"switch vs the udp baseline of this run: reducer bytes {_chg(doc['reduction'])}, "
                   f"packets {_chg(doc.get('packet_reduction_vs_udp'))}, reducer CPU {_chg(doc.get('cpu_reduction_vs_udp'))}")
    if doc.get("reduction_vs_tcp") is not None:
        out.append(f"switch vs tcp: reducer bytes {_chg(doc['reduction_vs_tcp'])}, packets {_chg(doc.get('packet_reduction_vs_tcp'))}, "
                   f"reducer CPU {_chg(doc.get('cpu_reduction_vs_tcp'))}")
    if doc.get("fallback"):
        out.append("[yellow]the switch did not aggregate (restarted, absent or lost its stream): the job completed with host-side aggregation[/yellow]")
    out += [f"note: {n}" for n in doc.get("notes", [])]
    return out


def register(app: typer.Typer) -> None:
    @app.command("wordcount")
    def wordcount_cmd(
        input: Optional[list[str]] = typer.Option(None, "--input", help="Text files (any language, any size; streamed). Repeat or list several."),
        extra: Optional[list[str]] = typer.Argument(None, help="More input files (so `--input a.txt b.txt` works)."),
        zipf: Optional[float] = typer.Option(None, "--zipf", help="Synthetic input instead: Zipf exponent ALPHA (0 = uniform)."),
        words_: int = typer.Option(100_000, "--words", help="Synthetic input: number of words."),
        vocab: int = typer.Option(10_000, "--vocab", help="Synthetic input: vocabulary size."),
        seed: int = typer.Option(1, "--seed", help="Seed of the synthetic input and of the fault injector."),
        mappers: int = typer.Option(4, "--mappers", help="Mapper processes."),
        reducers: int = typer.Option(2, "--reducers", help="Reducer processes (one aggregation tree each)."),
        mode: str = typer.Option("switch", "--mode", help="switch | udp | tcp | all."),
        program: str = typer.Option("daiet", "--program", help="Switch program for switch mode: daiet | switchagg."),
        loss: float = typer.Option(0.0, "--loss", help="Probability that the switch's ports lose a frame (seeded by --seed)."),
        no_combiner: bool = typer.Option(False, "--no-combiner", help="Send (word, 1) per occurrence instead of one pair per word per mapper."),
        timeout: float = typer.Option(120.0, "--timeout", help="Seconds a run may take."),
        where: str = typer.Option("auto", "--where", help="auto | netns | loopback (no switch)."),
        json_out: Optional[str] = typer.Option(None, "--json", help="Write the result here."),
        pcap: Optional[str] = typer.Option(None, "--pcap", help="Capture every switch port into pcapng files in this directory (switch mode on the netns rack)."),
    ) -> None:
        """MapReduce WordCount through the switch: mappers and reducers as processes in a rack,
        the reducers' counts checked against a Counter over the input."""
        console = Console()
        if json_out:
            ensure_writable(json_out)
        if not console.is_terminal:  # a pipe or a log: do not squeeze the table to 80 columns
            console = Console(width=140)
        inputs = list(input or []) + list(extra or [])
        modes = list(MODES) if mode == "all" else [mode]
        spec = JobSpec(inputs=inputs or None, zipf=zipf, words=words_, vocab=vocab, seed=seed, mappers=mappers,
                       reducers=reducers, program=program, loss=loss, combiner=not no_combiner, timeout_s=timeout,
                       where=where, pcap=pcap)
        try:
            with job_progress(console) as bar:
                doc = run(spec, modes, *bar)
        except JobError as e:
            console.print(f"[red]error:[/red] {e}", highlight=False)
            raise typer.Exit(2)
        show(console, table(doc))
        for line in summary_lines(doc):
            console.print(line, highlight=False)
        if json_out:
            write_json(json_out, doc, indent=2)
            console.print(f"wrote {json_out}")
        console.print("correct: reducers' counts equal a Counter over the input" if doc["correct"]
                      else "[red]INCORRECT: reducers' counts differ from the Counter[/red]")
        raise typer.Exit(0 if doc["correct"] else 1)
