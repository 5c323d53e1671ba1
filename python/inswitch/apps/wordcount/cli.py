"""`inswitch wordcount`: MapReduce WordCount through the switch, with and without in-network
aggregation, checked against a Counter over the same input.

JSON keys (also printed as a table): `correct`, `reducer_bytes` (UDP payload bytes, or TCP
stream bytes, the reducers received), `reducer_packets`, `reducer_cpu_s` (reducer processes'
CPU time, getrusage), `job_s` (first mapper start to last reducer done); for switch mode
`baseline_udp` (the same figures of the udp run in the same invocation), `reduction`
(1 - switch reducer bytes / udp reducer bytes), `packet_reduction_vs_udp`,
`cpu_reduction_vs_udp`, and with `--mode all` also `baseline_tcp` and the `*_vs_tcp`
reductions. `runs` holds every mode's full figures (per reducer and mapper too).
With `--fabric`: `switches` (switch name -> `pairs_in`, `pairs_out`, `reduction` at that
switch, its `role`; for `--program switchagg` they come from the program's own pair
counters, and `frames_*`, `bytes_*`, `pair_bytes_*` and `byte_reduction` say it in bytes
too, its pairs having variable length) and `placement` (which host and leaf each mapper and reducer got, the
aggregation switch or the path).
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.table import Table

from inswitch.apps.wordcount.job import FIGURES, MODES, PROGRAMS, WHERE, JobError, JobSpec, run
from inswitch.apps.wordcount.progress import job_progress
from inswitch.cliopts import IN_FILE, JSON_PATH, OUT_DIR, SEED, Choice, Float, Int, argument, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show
from inswitch.topology.fabric.cli import TOPOLOGY_SPEC

EXAMPLES = """Examples:

  inswitch wordcount --input /usr/share/common-licenses/GPL-3 --mode all --json out/wc.json

  inswitch wordcount --zipf 1.1 --words 200000 --vocab 5000 --mode switch --program switchagg

  inswitch wordcount --zipf 1.0 --mode tcp --where loopback --json -

  inswitch wordcount --zipf 1.1 --mappers 4 --reducers 2 --fabric leaf-spine:3,1,2 --loss 0.02
"""


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
    for name, sw in (doc.get("switches") or {}).items():
        if sw.get("restarted"):
            out.append(f"switch {name} ({sw['role']}): restarted during the run (its counters started again from 0)")
            continue
        if sw.get("pairs_in") is None and sw.get("pair_bytes_in") is not None:  # switchagg: variable-length pairs, bytes
            red = "-" if sw["byte_reduction"] is None else f"{sw['byte_reduction']:.1%}"
            out.append(f"switch {name} ({sw['role']}): {sw['pair_bytes_in']:,} pair bytes in ({sw['frames_in']:,} frames), "
                       f"{sw['pair_bytes_out']:,} out ({sw['frames_out']:,} frames), byte reduction {red}")
            continue
        if sw.get("pair_bytes_in") is not None:  # switchagg with its pair counters: pairs and bytes
            red, bred = ("-" if sw[k] is None else f"{sw[k]:.1%}" for k in ("reduction", "byte_reduction"))
            out.append(f"switch {name} ({sw['role']}): {sw['pairs_in']:,} pairs in, {sw['pairs_out']:,} out, reduction {red} "
                       f"({sw['pair_bytes_in']:,} pair bytes in, {sw['pair_bytes_out']:,} out, byte reduction {bred})")
            continue
        red = "-" if sw["reduction"] is None else f"{sw['reduction']:.1%}"
        out.append(f"switch {name} ({sw['role']}): {sw['pairs_in']:,} pairs in, {sw['pairs_out']:,} out, reduction {red}")
    out += [f"note: {n}" for n in doc.get("notes", [])]
    return out


def register(app: typer.Typer) -> None:
    @app.command("wordcount", epilog=EXAMPLES)
    def wordcount_cmd(
        input: Optional[list[str]] = option(None, "--input", type=IN_FILE, help="Text files (any language, any size; streamed). Repeat, or list several after one --input."),
        extra: Optional[list[str]] = argument(None, type=IN_FILE, help="More input files (so `--input a.txt b.txt` works)."),
        zipf: Optional[float] = option(None, "--zipf", type=Float(0, 10), help="Synthetic input instead of files: Zipf exponent ALPHA (0: uniform)."),
        words_: int = option(100_000, "--words", type=Int(1, 10**9), help="Synthetic input: number of words."),
        vocab: int = option(10_000, "--vocab", type=Int(1, 10**6), help="Synthetic input: vocabulary size."),
        seed: int = option(1, "--seed", type=SEED, help="Seed of the synthetic input and of the fault injector."),
        mappers: int = option(4, "--mappers", type=Int(1, 64), help="Mapper processes."),
        reducers: int = option(2, "--reducers", type=Int(1, 64), help="Reducer processes (one aggregation tree each)."),
        mode: str = option("switch", "--mode", type=Choice(*MODES, "all"), help="How the pairs reach the reducers: through the switch's aggregation, plain udp or tcp, or all three in turn."),
        program: str = option("daiet", "--program", type=Choice(*PROGRAMS), help="Switch program for switch mode."),
        loss: float = option(0.0, "--loss", type=Float(0, 1, hi_open=True), help="Probability that the switch's ports lose a frame (seeded by --seed)."),
        no_combiner: bool = typer.Option(False, "--no-combiner", help="Send (word, 1) per occurrence instead of one pair per word per mapper."),
        timeout: float = option(120.0, "--timeout", type=Float(0, 86_400, lo_open=True), help="Seconds a run may take."),
        where: str = option("auto", "--where", type=Choice(*WHERE), help="Where the processes run: auto (a netns rack when root, else loopback), netns, or loopback (no switch)."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Capture every switch port into pcapng files in this directory (switch mode on the netns rack)."),
        fabric: Optional[str] = option(None, "--fabric", type=TOPOLOGY_SPEC, help="Run on a fabric (e.g. leaf-spine:3,1,2) instead of one switch: mappers under several leaves, reducers under the last, two-level trees of --program (daiet or switchagg); the JSON gains `switches` (pairs, or switchagg's pair bytes, in and out per switch)."),
    ) -> None:
        """MapReduce WordCount through the switch: mappers and reducers as processes in a
        rack, the reducers' counts checked against a Counter over the input."""
        console = console_for(json_out)
        if not console.is_terminal:  # a pipe or a log: do not squeeze the table to 80 columns
            console = console_for(json_out, width=140)
        if mappers + reducers > 200:
            raise typer.BadParameter("at most 200 hosts in a rack (mappers + reducers)", param_hint="--mappers")
        if (input or extra) and zipf is not None:
            raise typer.BadParameter("give either input files or --zipf ALPHA, not both", param_hint="--zipf")
        if not (input or extra) and zipf is None:
            raise typer.BadParameter("give input files (--input FILE) or --zipf ALPHA", param_hint="--input")
        inputs = list(input or []) + list(extra or [])
        modes = list(MODES) if mode == "all" else [mode]
        spec = JobSpec(inputs=inputs or None, zipf=zipf, words=words_, vocab=vocab, seed=seed, mappers=mappers,
                       reducers=reducers, program=program, loss=loss, combiner=not no_combiner, timeout_s=timeout,
                       where=where, pcap=pcap, fabric=fabric)
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
            note_written(console, json_out)
        console.print("correct: reducers' counts equal a Counter over the input" if doc["correct"]
                      else "[red]INCORRECT: reducers' counts differ from the Counter[/red]")
        raise typer.Exit(0 if doc["correct"] else 1)
