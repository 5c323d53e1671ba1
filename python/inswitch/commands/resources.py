"""`inswitch resources`: what a program (or a set of programs) uses, stage by stage, against
a target's limits, and whether it fits."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch import native
from inswitch.cliopts import JSON_PATH, PROGRAMS, TARGET, argument, option
from inswitch.output import is_stdout, note_written, write_json
from inswitch.tables import show

EXAMPLES = """Examples:

  inswitch resources forward,daiet --target tofino1

  inswitch resources netsha --target tofino2 --json - | jq .fits
"""



UNLIMITED = 2**32 - 1


def _lim(v: int) -> str:
    return "∞" if v >= UNLIMITED else str(v)


def _cell(used: int, limit: int) -> str:
    text = f"{used}/{_lim(limit)}"
    return f"[red]{text}[/red]" if limit < UNLIMITED and used > limit else text


def render(report: dict[str, Any], console: Console) -> None:
    t = report["target"]
    names = ", ".join(p["name"] for p in report["programs"])
    console.print(f"[bold]{names}[/bold] on [bold]{t['name']}[/bold] ({t['description']})")
    st = Table(title="Stages", show_lines=False)
    for col in ("stage", "stateful ALUs", "SRAM blocks", "map RAMs", "TCAM blocks", "logical tables", "hash units", "exact key bits"):
        st.add_column(col)
    for s in report["stages"]:
        st.add_row(
            str(s["stage"]),
            _cell(s["stateful_alus"], t["salus_per_stage"]),
            _cell(s["sram_blocks"], t["sram_blocks_per_stage"]),
            str(s["map_rams"]),
            _cell(s["tcam_blocks"], t["tcam_blocks_per_stage"]),
            _cell(s["logical_tables"], t["logical_tables_per_stage"]),
            _cell(s["hash_units"], t["hash_units_per_stage"]),
            _cell(s["exact_key_bits"], t["exact_key_bits_per_stage"]),
        )
    show(console, st)
    for s in report["stages"]:
        console.print(f"  stage {s['stage']}: " + "; ".join(s["objects"]), soft_wrap=True)
    if report["registers"]:
        rt = Table(title="Register arrays")
        rt.add_column("register", no_wrap=True)
        for col in ( "gress", "stage", "cells", "cell bits", "bits", "SRAM blocks", "actions", "output bits"):
            rt.add_column(col)
        for r in report["registers"]:
            rt.add_row(r["name"], r["gress"], str(r["stage"]), str(r["cells"]), str(r["cell_bits"]), str(r["bits"]), str(r["sram_blocks"]), f'{r["register_actions"]}/{_lim(t["max_register_actions"])}', str(r["max_action_out_bits"]))
        show(console, rt)
        at = Table(title="Stateful ALU instructions (register actions)")
        at.add_column("register action", no_wrap=True)
        for col in ("ALU", "conditions", "updates lo", "updates hi", "outputs"):
            at.add_column(col)
        for r in report["registers"]:
            for a in r.get("actions", []):
                name = f"{r['name']}.{a['name']}"
                if not a["checked"]:
                    at.add_row(name, "[yellow]unchecked ALU[/yellow]", "-", "-", "-", "-")
                    continue
                per_half = t["salu_updates_per_half"]
                at.add_row(name, "declared", _cell(a["conditions"], t["salu_conditions"]), _cell(a["updates_lo"], per_half), _cell(a["updates_hi"], per_half), _cell(a["outputs"], t["salu_output_words"]))
        show(console, at)
    if report["tables"]:
        tt = Table(title="Match tables")
        tt.add_column("table", no_wrap=True)
        for col in ( "gress", "stage", "match", "entries", "key bits", "action data bits", "SRAM", "TCAM"):
            tt.add_column(col)
        for x in report["tables"]:
            tt.add_row(x["name"], x["gress"], str(x["stage"]), ",".join(x["match_kinds"]), str(x["entries"]), str(x["key_bits"]), str(x["action_data_bits"]), str(x["sram_blocks"]), str(x["tcam_blocks"]))
        show(console, tt)
    console.print(
        f"stages used {_cell(report['stages_used'], t['stages'])}   "
        f"parse depth {_cell(report['parse_depth_bytes'], t['parse_depth_bytes'])} B   "
        f"PHV {_cell(report['phv_bits'], t['phv_bits'])} bits   "
        f"register bits {report['register_bits_total']}   "
        f"SRAM {report['sram_blocks_total']}   TCAM {report['tcam_blocks_total']}   "
        f"stateful ALUs {report['stateful_alus_total']}   hash units {report['hash_units_total']}"
    )
    if report.get("memories"):
        # Block memories (FPGA targets): bytes by kind against the target's capacities.
        console.print(
            f"block memories: SRAM {report['memory_sram_bytes']}/{_lim(t.get('block_sram_bytes', 0))} B   "
            f"DRAM {report['memory_dram_bytes']}/{_lim(t.get('dram_bytes', 0))} B"
        )
    for p in report["programs"]:
        if p.get("items_per_pass", 1) > 1:
            console.print(f"  {p['name']}: up to {p['items_per_pass']} items per packet through the payload analyzer (target: {t.get('payload_analyzer_items', 0)})")
        recirc = "unbounded (perpetual packet)" if p["recirculations_per_packet"] is None else str(p["recirculations_per_packet"])
        digests = ", ".join(f"{n} ({b} B)" for n, b in p["digests"]) or "none"
        console.print(f"  {p['name']}: {p['stages']} stages, parse {p['parse_depth_bytes']} B, recirculations/packet {recirc}, packet generators {p['packet_generators']}, digests {digests}")
        for note in p["notes"]:
            console.print(f"    note: {note}")
    unchecked = report.get("unchecked_alus", [])
    if unchecked:
        # A Rust body: the loader cannot tell whether the target's stateful ALU computes it.
        console.print(f"[yellow]unchecked ALU[/yellow]: {len(unchecked)} register actions are Rust bodies, not declared instructions: {', '.join(unchecked)}", soft_wrap=True)
    if report["fits"]:
        console.print(f"[bold green]FITS[/bold green] {t['name']}" + (f" (except {len(unchecked)} unchecked ALUs)" if unchecked else ""))
    else:
        console.print(f"[bold red]DOES NOT FIT[/bold red] {t['name']}:")
        for prob in report["problems"]:
            console.print(f"  - {prob}")


def register(app: typer.Typer) -> None:
    @app.command("resources", epilog=EXAMPLES)
    def resources_cmd(
        program: str = argument(..., type=PROGRAMS, help="Program name, or several joined by commas (loaded together)."),
        target: str = option("tofino1", "--target", "-t", type=TARGET, help="Target whose limits the program is checked against: tofino1, tofino2, unbounded or switchagg-fpga."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the report as JSON (- prints it instead of the tables)."),
        out: Optional[str] = option(None, "--out", type=JSON_PATH, help="Also write the JSON report to this file (the same as --json FILE, kept for old scripts)."),
    ) -> None:
        """Stages, register bits, stateful ALUs, table entries, hash units and parse depth a
        program uses against a target's limits, and whether it fits."""
        console = Console()
        try:
            names = native.split_programs(program)
            report = native.resources(names, target)
        except ValueError as e:
            Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        written = [p for p in (json_out, out) if p]
        for p in written:
            write_json(p, report)
        if not is_stdout(json_out):
            render(report, console)
            note_written(console, *written)
        raise typer.Exit(0 if report["fits"] else 1)
