"""`inswitch bench aggregation`: in-memory pair updates per second on one core for the
in-network aggregation programs, with the forwarding program's packet rate measured in the
same run as the base of the ratio. Rates are per CPU-second of the measuring thread (per
core), so other work on a shared machine does not distort them; wall-clock rates are in
the JSON too."""

from __future__ import annotations

import os
import platform
from typing import Any, Callable, Optional

import typer
from rich.table import Table

from inswitch import _native
from inswitch.cliopts import JSON_PATH, Float, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show

#: The goal the issue sets for DAIET.
GOAL_PAIR_UPDATES_PER_S = 50e6


def run(duration: float = 2.0, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Measure DAIET, `forward` and SwitchAgg, one after the other."""
    progress("daiet")
    d = dict(_native.bench_daiet_pipeline(64, 4096, duration))
    progress("forward")
    fwd_pps = float(_native.bench_forward_cpu_rate(duration))
    # SwitchAgg, measured like DAIET: per CPU-second of the measuring thread, its aggregate
    # flushed and checked against the reference after the run (ValueError otherwise).
    progress("switchagg")
    s = dict(_native.bench_switchagg_pipeline(duration=duration))
    out: dict[str, Any] = {
        "daiet_pair_updates_per_s": d["pair_updates_per_cpu_s"],
        "daiet_pair_updates_per_wall_s": d["pair_updates_per_s"],
        "switchagg_pair_updates_per_s": s["pair_updates_per_cpu_s"],
        "switchagg_pair_updates_per_wall_s": s["pair_updates_per_s"],
        "switchagg_drops": s["drops"],
        # Keys whose aggregate (everything the switch sent towards the parent during the run
        # and in the flush after it) the bench checked equal to the reference.
        "switchagg_verified_keys": s["verified_keys"],
        "forward_pps": fwd_pps,
        "daiet_over_forward": d["pair_updates_per_cpu_s"] / fwd_pps if fwd_pps else None,
        "daiet_passes_per_packet": d["passes"] / d["packets"] if d["packets"] else None,
        "daiet_drops": d["drops"],
        # Keys whose aggregate (switch cells plus pairs sent on to the parent) the bench
        # checked equal to the reference after the measured run (it fails otherwise).
        "daiet_verified_keys": d.get("verified_keys"),
        "goal_daiet_pair_updates_per_s": GOAL_PAIR_UPDATES_PER_S,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version()},
    }
    return out


def aggregation_cmd(
    duration: float = option(2.0, "--duration", type=Float(0.1, 600), help="Seconds per measurement."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
) -> None:
    """Pair updates per second per core for the aggregation programs, against `forward`."""
    console = console_for(json_out)
    with console.status("measuring") as st:
        r = run(duration, progress=lambda s: st.update(f"measuring: {s}"))
    t = Table(title="inswitch bench aggregation (in memory, 1 core)")
    t.add_column("measurement")
    t.add_column("result", justify="right")
    t.add_row("daiet pair updates per CPU-second", f"{r['daiet_pair_updates_per_s'] / 1e6:.2f} M")
    t.add_row("daiet switch passes per packet", f"{r['daiet_passes_per_packet']:.1f}")
    t.add_row("daiet keys checked against the reference", f"{r['daiet_verified_keys']}")
    t.add_row("switchagg pair updates per CPU-second", f"{r['switchagg_pair_updates_per_s'] / 1e6:.2f} M")
    t.add_row("switchagg keys checked against the reference", f"{r['switchagg_verified_keys']}")
    t.add_row("forward packets per CPU-second (64 B)", f"{r['forward_pps'] / 1e6:.2f} M")
    t.add_row("ratio daiet pair updates / forward packets", f"{r['daiet_over_forward']:.2f}")
    t.add_row("goal (daiet)", f"{GOAL_PAIR_UPDATES_PER_S / 1e6:.0f} M")
    show(console, t)
    if json_out:
        write_json(json_out, r, indent=2)
        note_written(console, json_out)


def register(app: typer.Typer) -> None:
    from inswitch.bench.cli import bench_app

    bench_app.command("aggregation", epilog="Examples:\n\n  inswitch bench aggregation --duration 2 --json bench/aggregation.json\n")(aggregation_cmd)
