"""`inswitch bench ...` commands."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from inswitch.cliopts import JSON_PATH, Float, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show

bench_app = typer.Typer(help="Benchmarks; each prints ratios against a baseline measured in the same run.", no_args_is_help=True)


def check_duration(duration: float) -> None:
    """Every bench's `--duration`: a positive number of seconds (a usage error otherwise)."""
    if not duration > 0:
        raise typer.BadParameter(f"must be > 0 seconds, not {duration}", param_hint="--duration")


#: Every bench's `--duration`: seconds per measurement.
DURATION = Float(0.1, 600)


@bench_app.command("forward", epilog="Examples:\n\n  inswitch bench forward --duration 3 --json bench/forward.json\n")
def forward_cmd(
    duration: float = option(3.0, "--duration", type=DURATION, help="Seconds per measurement."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
) -> None:
    """Forwarding rate: in memory on one core, and between two namespaces over veth against
    the Linux kernel bridge (same namespaces, same run)."""
    from inswitch.bench import forward

    console = console_for(json_out)
    with console.status("measuring") as st:
        r = forward.run(duration=duration, progress=lambda s: st.update(f"measuring: {s}"))
    t = Table(title="inswitch bench forward")
    t.add_column("measurement")
    t.add_column("result", justify="right")
    t.add_row("in-memory pipeline, 64 B frames, 1 core", f"{r['in_memory_mpps']:.2f} Mpps")
    t.add_row("bare loop, same essential work, no model", f"{r['bare_loop_mpps']:.2f} Mpps")
    t.add_row("ratio pipeline / bare loop", f"{r['in_memory_bare_ratio']:.2f}")
    if "veth_pps" in r:
        t.add_row("veth through inswitch (received)", f"{r['veth_pps']:,} pps")
        t.add_row("veth through Linux bridge (received)", f"{r['bridge_pps']:,} pps")
        t.add_row("ratio inswitch / bridge", f"{r['veth_bridge_ratio']:.2f}")
        t.add_row("loss through inswitch / bridge", f"{r['veth']['loss']:.1%} / {r['bridge']['loss']:.1%}")
    else:
        t.add_row("veth", r.get("veth_skipped", "skipped"))
    show(console, t)
    if json_out:
        write_json(json_out, r, indent=2)
        note_written(console, json_out)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
