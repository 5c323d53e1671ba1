"""`inswitch bench ...` commands."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from inswitch.cliopts import JSON_PATH, Float, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show
from inswitch.topology.fabric.cli import TOPOLOGY as FABRIC_TOPOLOGY

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
    """Forwarding rate: in memory on one core (L2 and the IPv4 routing path), the routing
    path replayed through file ports, the threaded data plane on 1 pipe / 1 core against
    2 pipes / 2 cores (pipes_scaling), and between two namespaces over veth against the
    Linux kernel bridge (same namespaces, same run)."""
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
    t.add_row("in-memory IPv4 routing path (simple_router's work), 1 core", f"{r['in_memory_route_mpps']:.2f} Mpps")
    t.add_row(f"routing path through file ports ({r['pcap_route']['packets']:,} frames from pcap)", f"{r['pcap_route_mpps']:.3f} Mpps")
    if "pipes_local" in r:
        for name, key in (("local", "pipes_scaling"), ("crossing", "pipes_scaling_crossing")):
            one, two = r[f"pipes_{name}"]["one_pipe"], r[f"pipes_{name}"]["two_pipes"]
            t.add_row(f"data plane, 4 ports, {name} flows: 1 pipe on core {one['cores'][0]} / 2 pipes on cores {','.join(map(str, two['cores']))}",
                      f"{one['mpps']:.2f} / {two['mpps']:.2f} Mpps")
            t.add_row(f"{key} (2 pipes on 2 cores over 1 pipe on 1 core; load average {r['load_average_before'][0]:.1f})", f"{r[key]:.2f}")
    else:
        t.add_row("pipes", r.get("pipes_skipped", "skipped"))
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


@bench_app.command("fabric", epilog="Examples:\n\n  inswitch bench fabric --json bench/fabric.json\n  inswitch bench fabric -t leaf-spine:2,2,2\n")
def fabric_cmd(
    topology: Optional[str] = option(None, "--topology", "-t", type=FABRIC_TOPOLOGY, help="One topology to measure (default: leaf-spine:4,2,4 and fat-tree:4)."),
    udp_seconds: float = option(3.0, "--udp-seconds", type=Float(0, 60, lo_open=True), help="Seconds per UDP throughput measurement."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
) -> None:
    """Fabrics of switch processes: up/down time, switch memory, all-pairs ping, UDP over 3
    switches against 1 (needs root)."""
    import os

    from rich.console import Console

    from inswitch.bench import fabric

    if os.geteuid() != 0:
        Console(stderr=True).print("error: bench fabric needs root (network namespaces, veth pairs)")
        raise typer.Exit(1)
    console = console_for(json_out)
    with console.status("measuring") as st:
        r = fabric.run((topology.source,) if topology else fabric.DEFAULT_SPECS, udp_s=udp_seconds,
                       progress=lambda s: st.update(f"measuring: {s}"))
    t = Table(title="inswitch bench fabric")
    t.add_column("measurement", no_wrap=True)
    for spec in r["topologies"]:
        t.add_column(spec, justify="right", no_wrap=True)
    rows = [("switches / hosts", lambda m: f"{m['switches']} / {m['hosts']}"),
            ("up_s", lambda m: f"{m['up_s']:.2f}"),
            ("down_s", lambda m: f"{m['down_s']:.2f}"),
            ("switch_rss_mb max / mean", lambda m: f"{m['switch_rss_mb']:.1f} / {m['switch_rss_mb_mean']:.1f}"),
            ("switch PSS MB mean", lambda m: f"{m['switch_pss_mb_mean']:.1f}"),
            ("switch RSS anon / file MB mean", lambda m: f"{m['switch_rss_anon_mb_mean']:.1f} / {m['switch_rss_file_mb_mean']:.1f}"),
            ("pairs_ok / pairs", lambda m: f"{m['pairs_ok']} / {m['pairs']}"),
            ("all-pairs ping s", lambda m: f"{m['ping_all_pairs_s']:.2f}"),
            ("UDP Mbit/s 1 switch", lambda m: f"{m['udp_hop1_mbit']:.1f}" if "udp_hop1_mbit" in m else "-"),
            ("UDP Mbit/s 3 switches", lambda m: f"{m['udp_hop3_mbit']:.1f}" if "udp_hop3_mbit" in m else "-")]
    for label, fmt in rows:
        t.add_row(label, *(fmt(m) for m in r["topologies"].values()))
    show(console, t)
    if r.get("hop3_over_hop1") is not None:
        console.print(f"hop3_over_hop1 = {r['hop3_over_hop1']:.3f}")
    if json_out:
        write_json(json_out, r, indent=2)
        note_written(console, json_out)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
