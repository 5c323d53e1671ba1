"""The `--backend redis` branch of `inswitch kvs` and `inswitch kvs proxy` (issue 17):
their options (checked types, `inswitch.cliopts`) and what they run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from inswitch.cliopts import OUT_FILE, Address, Choice, Float, Int, Text, option
from inswitch.hare import ycsb
from inswitch.topology.fabric.cli import TOPOLOGY_SPEC
from inswitch.tables import show

BACKEND = option("sim", "--backend", type=Choice("sim", "redis"), help="sim: replay a trace against the in-process switch in simulated time (a model); redis: real redis-server, agents, switch daemon and clients in a rack, measured.")
WORKLOAD = option("ycsb-b", "--workload", type=Choice(*ycsb.WORKLOADS), help="--backend redis: YCSB core workload.")
RECORDS = option(2000, "--records", type=Int(16, 10_000_000), help="--backend redis: YCSB record count (keys loaded into Redis).")
FIELD_SIZE = option(32, "--field-size", type=Int(24, 251), help="--backend redis: value size in bytes (at most --value-size - 1: the switch's value cell keeps a length byte).")
CLIENTS = option(2, "--clients", type=Int(1, 16), help="--backend redis: client hosts, one load-generating process each.")
SERVERS = option(2, "--servers", type=Int(1, 16), help="--backend redis: storage hosts, one redis-server and agent each.")
WINDOW = option(32, "--window", type=Int(1, 1024), help="--backend redis: operations each client keeps in flight.")
ENGINE = option("python", "--engine", type=Choice("python", "native"), help="--backend redis: the clients' load generator: python (the client library) or native (a windowed loop in Rust replaying a precomputed stream, a --shift as a key remap at its time; ycsb-d drawn natively from YCSB's 'latest' generator). Both record every operation for the linearizability checker; the native one also checks each GET's value itself when it is the only writing client (--clients 1 or ycsb-c), and says `not checked` otherwise.")
HISTORY = option("on", "--history", type=Choice("on", "off"), help="--backend redis --engine native: record every operation for the linearizability checker (on), or not, to measure throughput without its cost (off: `correct`, `stale_reads` and `linearizable` are null in the JSON, with a `check_note`, unless the single writing client checked each GET's value itself).")
FABRIC = option(None, "--fabric", type=TOPOLOGY_SPEC, help="--backend redis: the clients and storage hosts on one leaf of this fabric (e.g. leaf-spine:2,1,3: the first leaf with --clients + --servers hosts), that leaf (their ToR) running the system's programs under this controller, every other switch forward under the fabric controller.")
CLIENT_LEAF = option(None, "--client-leaf", type=Int(1, 32), help="--backend redis --fabric: the clients are hosts of the N-th leaf (switch with hosts; leaf-spine: leafN); the storage hosts stay on the ToR, the first leaf with room for them, so another leaf puts the clients across the spine (default: the clients under the ToR too).")
PLOT = option(None, "--plot", type=OUT_FILE, help="--backend redis: throughput and hit rate over time (default: the --json path with .png).")


def run_redis(console: Console, system: str, workload: str, records: int, field_size: int, clients: int, servers: int, window: int,
              cache: int, batch: int, shift: str, shift_count: Optional[int], duration: float, t_wait: float, value_size: int, seed: int,
              json_out: Optional[str], plot: Optional[str], engine: str = "python", record_history: str = "on", fabric: Optional[str] = None,
              client_leaf: Optional[int] = None) -> None:
    from inswitch.apps.hare import redisrack
    from inswitch.hare import fastload
    from inswitch.apps.hare.workload import SHIFTS
    from inswitch.output import is_stdout, note_written, write_json

    err = Console(stderr=True, soft_wrap=True)  # one line each, exit status 2
    systems = list(redisrack.RACK_SYSTEMS) if system == "all" else [system]
    if any(s not in redisrack.RACK_SYSTEMS for s in systems):
        err.print(f"[red]error:[/red] --backend redis runs {', '.join(redisrack.RACK_SYSTEMS)} or all")
        raise typer.Exit(2)
    if shift not in SHIFTS:
        err.print(f"[red]error:[/red] --shift must be one of {', '.join(SHIFTS)}")
        raise typer.Exit(2)
    problem = fastload.unsupported(workload, shift, clients) if engine == "native" else None
    if record_history == "off" and engine != "native":
        problem = "--history off: only the native engine (--engine native) runs without recording the history"
    if problem:
        err.print(f"[red]error:[/red] {problem}")
        raise typer.Exit(2)
    if client_leaf is not None and fabric is None:
        err.print("[red]error:[/red] --client-leaf places the clients on a leaf of a fabric: use it with --fabric")
        raise typer.Exit(2)
    if fabric is not None:
        try:
            redisrack.placement(fabric, clients, servers, client_leaf)
        except ValueError as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from None
    if value_size % 4 or not 8 <= value_size <= 252 or field_size > value_size - 1:
        err.print("[red]error:[/red] --value-size 8..252, a multiple of 4, larger than --field-size")
        raise typer.Exit(2)
    if not shutil.which("redis-server"):
        err.print("[red]error:[/red] redis-server is not installed (scripts/install-deps.sh installs it)")
        raise typer.Exit(2)
    import os

    if os.geteuid() != 0:
        err.print("[red]error:[/red] --backend redis builds a rack of network namespaces: run as root")
        raise typer.Exit(2)
    count = shift_count if shift_count is not None else (cache if shift == "coldest-to-top" else min(200, records // 4))
    p = redisrack.RackParams(workload=workload, records=records, field_size=field_size, duration=duration, shift=shift, shift_count=count,
                             clients=clients, servers=servers, window=window, cache=cache, batch=min(batch, cache), t_wait=t_wait,
                             value_size=value_size, seed=seed, engine=engine, native_history=record_history == "on", fabric=fabric,
                             client_leaf=client_leaf)
    with Progress(console=console) as prog:
        out = redisrack.run_all(systems, p, prog)
    console = Console(width=max(console.width, 150), stderr=console.stderr)  # the table's numbers are never cut
    off = ", history off" if record_history == "off" else ""
    where = f", on {out['mode']}" if fabric is not None else ""
    t = Table(title=f"kvs --backend redis (measured, {engine} clients{off}{where}): {workload}, {records} records, shift {shift}, {duration:g} s per system")
    for c in ("system", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "hit rate", "stable hit", "recovery s", "offloads", "stale reads", "lost writes", "correct"):
        t.add_column(c, no_wrap=True, justify="left" if c in ("system", "recovery s", "correct") else "right")
    f = lambda v, fmt="{:.0f}": "-" if v is None else fmt.format(v)  # noqa: E731
    for name, r in out["systems"].items():
        t.add_row(name, f(r["throughput_ops"]), f(r["p50_us"]), f(r["p99_us"]), f(r["p999_us"]), f(r["hit_rate"], "{:.3f}"), f(r["stable_hit_rate"], "{:.3f}"),
                  ", ".join("-" if x is None else f"{x:g}" for x in r["recovery_s"]) or "-", str(r["control"]["offloads"]),
                  f(r["stale_reads"]), f(r["lost_writes"]), "not checked" if r["correct"] is None else "[green]yes[/green]" if r["correct"] else "[red]NO[/red]")
    show(console, t)
    for name, r in out["systems"].items():
        if r.get("check_note"):
            console.print(f"{name}: {r['check_note']}")
        if r.get("restart_note"):
            console.print(f"{name}: {r['restart_note']}")
    png = Path(plot) if plot else (Path(json_out).with_suffix(".png") if json_out and not is_stdout(json_out) else None)
    if png:
        redisrack.plot(out, png)
    if json_out:
        write_json(json_out, out, indent=1)
    note_written(console, png, json_out)
    if any(r["correct"] is False for r in out["systems"].values()):  # None: not checked (--history off)
        raise typer.Exit(1)


def _servers(text: str) -> Any:
    from inswitch.hare.proxy import parse_servers

    return parse_servers(text)


PROXY_EXAMPLES = """Examples:

  sudo inswitch rack exec h1 -- inswitch kvs proxy --listen 127.0.0.1:6380 --servers 10.0.0.3,10.0.0.4

  inswitch kvs proxy --listen 0.0.0.0:6380 --servers 10.0.0.3 --key-field 64 --value-size 64 --history ops.json
"""


def register_proxy(kvs_app: typer.Typer) -> None:
    @kvs_app.command("proxy", epilog=PROXY_EXAMPLES)
    def proxy_cmd(
        listen: str = option(..., "--listen", type=Address(), help="Address the RESP endpoint listens on."),
        servers: Any = option(..., "--servers", type=Text("comma-separated storage agent IPv4 addresses", _servers, bad=("x", "10.0.0", "10.0.0.1,,")), help="The storage agents (in the rack: the storage hosts' addresses)."),
        key_field: int = option(64, "--key-field", type=Int(1, 255), help="The switch program's key field (longest key)."),
        value_size: int = option(64, "--value-size", type=Int(8, 252), help="The switch program's value size (longest value + 1)."),
        timeout: float = option(0.3, "--timeout", type=Float(0.001, 60), help="Seconds before a request to an agent is retransmitted."),
        history: Optional[str] = option(None, "--history", type=OUT_FILE, help="Record every operation and write them here (JSON) on exit, for the linearizability checker."),
    ) -> None:
        """A RESP endpoint (GET, SET, DEL, MGET, EXISTS, PING) in front of Hare, for unmodified Redis clients."""
        from inswitch.hare.proxy import parse_listen, run

        run(parse_listen(listen), servers, key_field, value_size, timeout, lambda a: print(f"listening on {a[0]}:{a[1]}", flush=True), history)
