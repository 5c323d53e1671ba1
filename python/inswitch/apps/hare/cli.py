"""`inswitch kvs`: the KV store with hot-key offloading by Hare, NetCache, DySO or none,
over the same seeded trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import Progress
from rich.table import Table

from inswitch.apps.hare import rates as plane_rates
from inswitch.apps.hare.kvsim import SYSTEMS, KvParams, KvRun
from inswitch.apps.hare.workload import SHIFTS, generate
from inswitch.cliopts import JSON_PATH, OUT_DIR, SEED, Choice, Float, Int, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import cells, show

KVS_EXAMPLES = """Examples:

  inswitch kvs --system all --keys 10000 --cache 512 --shift coldest-to-top --json kvs.json

  inswitch kvs --system hare --duration 2 --writes 0.3 --no-rates --json - | jq .systems.hare.correct

  sudo inswitch kvs --backend redis --system all --workload ycsb-b --records 2000 --cache 128 --json kvs-redis.json

  sudo inswitch kvs --backend redis --system hare --fabric leaf-spine:2,1,3 --clients 1 --servers 2 --shift none --json kvs-fabric.json

  sudo inswitch kvs --backend redis --system hare --fabric leaf-spine:2,1,3 --client-leaf 2 --clients 1 --servers 2 --shift none
"""

LOCKS_EXAMPLES = """Examples:

  inswitch locks --system all --json locks.json

  inswitch locks --system hare --locks 1000 --cache 32 --duration 1

  sudo inswitch locks --backend real --system all --clients 16 --duration 4 --json locks-real.json

  sudo inswitch locks --backend real --system hare --duration 6 --kill-agent-at 2
"""


def run_kvs(
    systems: list[str],
    keys: int,
    key_size: int,
    value_size: int,
    cache: int,
    batch: int,
    zipf: float,
    shift: str,
    duration: float,
    rate: float,
    writes: float,
    scrambled: bool,
    shift_count: Optional[int],
    seed: int,
    t_wait: float = 0.1,
    hare_stats: str = "age",
    service_s: float = 150e-6,
    table_rate: float = 10_000.0,
    packet_rate: float = 1_000_000.0,
    progress: Optional[Any] = None,
    pcap: Optional[str] = None,
) -> dict[str, Any]:
    """Generate one trace and replay it against each system; the result the CLI writes.
    `pcap`: capture each system's switch ports into `pcap/SYSTEM/port{N}.pcapng`."""
    count = shift_count if shift_count is not None else (cache if shift == "coldest-to-top" else 200)
    trace = generate(keys, rate, duration, zipf, writes, scrambled, shift, duration / 2 if shift != "none" else None, count, 1.0, seed)
    params = KvParams(n_keys=keys, key_size=key_size, value_size=value_size, cache=cache, batch=batch, t_wait=t_wait, service_s=service_s, hare_stats=hare_stats, table_rate=table_rate, packet_rate=packet_rate)
    out: dict[str, Any] = {
        "config": {
            "keys": keys, "key_size": key_size, "value_size": value_size, "cache": cache, "batch": batch, "zipf": zipf,
            "shift": shift, "shift_count": count, "shift_times": trace.shift_times, "duration_s": duration, "rate_qps": rate,
            "write_ratio": writes, "scrambled": scrambled, "seed": seed, "queries": len(trace),
            "model": {
                "path": "trace-driven, in-process switch (pisa::Switch via _native.SimSwitch), simulated time",
                "servers": params.servers, "server_service_s": params.service_s, "link_s": params.link_s,
                "table_writes_per_s": params.table_rate, "packet_interactions_per_s": params.packet_rate,
                "epoch_s": params.epoch_s, "t_wait_s": params.t_wait, "hare_stats": params.hare_stats,
            },
        },
        "systems": {},
    }
    for name in systems:
        task = progress.add_task(name, total=1.0) if progress else None
        run = KvRun(name, trace, params, pcap_dir=Path(pcap) / name if pcap else None)
        res = run.run((lambda f, task=task: progress.update(task, completed=f)) if progress else None)
        out["systems"][name] = res
    return out


def register(app: typer.Typer) -> None:
    _register_locks(app)

    # `kvs` is a group so that `kvs proxy` can sit under it; without a subcommand it runs.
    kvs_app = typer.Typer(invoke_without_command=True)
    app.add_typer(kvs_app, name="kvs")
    from inswitch.apps.hare import redis_cli

    redis_cli.register_proxy(kvs_app)

    @kvs_app.callback(epilog=KVS_EXAMPLES)
    def kvs_cmd(
        ctx: typer.Context,
        system: str = option("all", "--system", type=Choice(*SYSTEMS, "all"), help="System to run: hare, netcache, dyso, none, or all of them."),
        keys: int = option(10_000, "--keys", type=Int(1, 10_000_000), help="Number of keys."),
        key_size: int = option(80, "--key-size", type=Int(1, 252), help="Key size in bytes (enough bytes to tell the keys apart)."),
        value_size: int = option(64, "--value-size", type=Int(8, 252, multiple_of=4), help="Value size in bytes."),
        cache: int = option(512, "--cache", type=Int(1, 65_536), help="Objects the switch can hold."),
        batch: int = option(64, "--batch", type=Int(1, 4096), help="Hare's batch size K (objects moved per offloading round)."),
        zipf: float = option(0.99, "--zipf", type=Float(0, 10), help="Zipf skew of key popularity (0: uniform)."),
        shift: str = option("coldest-to-top", "--shift", type=Choice(*SHIFTS), help="Popularity change at half time."),
        duration: float = option(4.0, "--duration", type=Float(0.1, 600), help="Trace length in simulated seconds."),
        rate: float = option(10_000.0, "--rate", type=Float(1, 1_000_000), help="Queries per simulated second."),
        writes: float = option(0.0, "--writes", type=Float(0, 1), help="Fraction of queries that are PUTs."),
        scrambled: bool = typer.Option(False, help="Scrambled Zipf: the hot keys spread over the key space."),
        shift_count: Optional[int] = option(None, "--shift-count", type=Int(1, 10_000_000), help="Keys the popularity change moves (default: the cache size for coldest-to-top, else 200)."),
        seed: int = option(1, "--seed", type=SEED, help="Seed of the trace."),
        t_wait: float = option(0.1, "--t-wait", type=Float(0.001, 60), help="Hare's statistics window in seconds between offloading rounds."),
        stats: str = option("age", "--stats", type=Choice("age", "clear"), help="Hare's statistics between rounds: age (halved every second) or clear (fetch and clear)."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
        rates: bool = typer.Option(True, help="Measure the two plane-interaction rates here (starts a switch for P4Runtime); --no-rates: measure nothing and charge the paper's rates."),
        model_rates: str = option("measured", "--model-rates", type=Choice("paper", "measured"), help="Control costs charged in the run: measured (this machine's P4Runtime and data-plane rates, apps/hare/rates.py) or paper (the assumed 10K table writes/s, 1M packets/s)."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Capture each system's switch ports into DIR/SYSTEM/port{N}.pcapng (and cpu.pcapng), stamped with simulated time."),
        backend: str = redis_cli.BACKEND,
        workload: str = redis_cli.WORKLOAD,
        records: int = redis_cli.RECORDS,
        field_size: int = redis_cli.FIELD_SIZE,
        clients: int = redis_cli.CLIENTS,
        servers: int = redis_cli.SERVERS,
        window: int = redis_cli.WINDOW,
        plot: Optional[str] = redis_cli.PLOT,
        engine: str = redis_cli.ENGINE,
        record_history: str = redis_cli.HISTORY,
        fabric: Optional[str] = redis_cli.FABRIC,
        client_leaf: Optional[int] = redis_cli.CLIENT_LEAF,
    ) -> None:
        """Hare, NetCache, DySO and no caching on one workload: a trace replay in simulated time (--backend sim, a model) or real Redis servers in a rack (--backend redis, measured)."""
        if ctx.invoked_subcommand:
            return
        console = console_for(json_out)
        if backend == "redis":
            if pcap:
                raise typer.BadParameter("captures are taken with --backend sim only (a redis run's switch is a rack: use inswitch rack up --pcap)", param_hint="--pcap")
            redis_cli.run_redis(console, system, workload, records, field_size, clients, servers, window, cache, batch, shift, shift_count, duration, t_wait, value_size, seed, json_out, plot, engine, record_history,
                                fabric, client_leaf)
            return
        if client_leaf is not None:
            raise typer.BadParameter("the clients' leaf is a place in a fabric: use it with --backend redis --fabric", param_hint="--client-leaf")
        if fabric is not None:
            raise typer.BadParameter("a fabric runs real processes: use it with --backend redis", param_hint="--fabric")
        if record_history != "on":
            raise typer.BadParameter("--history off is for the native load generator of --backend redis", param_hint="--history")
        if engine != "python":
            raise typer.BadParameter("the native load generator runs against real processes: use it with --backend redis", param_hint="--engine")
        if key_size < 15 and keys > 256**key_size:
            raise typer.BadParameter(f"{key_size}-byte keys cannot tell {keys} keys apart", param_hint="--key-size")
        if shift_count is not None and shift_count > keys:
            raise typer.BadParameter(f"{shift_count} is more than the {keys} keys", param_hint="--shift-count")
        systems = list(SYSTEMS) if system == "all" else [system]
        measured = plane_rates.measure(True) if rates else None
        extra = {}
        if model_rates == "measured" and measured:
            extra = {"table_rate": measured["p4runtime_table_writes"]["per_s"], "packet_rate": measured["dataplane_control_packets"]["per_s"]}
        with Progress(console=console) as prog:
            out = run_kvs(systems, keys, key_size, value_size, cache, batch, zipf, shift, duration, rate, writes, scrambled, shift_count, seed, t_wait=t_wait, hare_stats=stats, progress=prog, pcap=pcap, **extra)
        if measured:
            out["plane_interaction_rates_measured"] = measured
        out["config"]["backend"] = "sim (model: trace replay, FIFO servers, simulated time)"
        t = Table(title=f"kvs (model, --backend sim): {len(systems)} system(s), {out['config']['queries']} queries, shift {shift}")
        for c in ("system", "stable hit rate", "recovered", "recovery (s)", "mean qps", "max P99 (µs)", "offloads", "table ops", "packet ops", "fits tofino1", "correct"):
            t.add_column(c)
        for name, r in out["systems"].items():
            p99 = [x for x in r["p99_us"] if x is not None]
            f = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
            if r["recovery_s"] is not None:
                rec = str(r["recovery_s"])
            else:
                rec = "n/a" if not r["stable_hit_rate"] else "not in run"
            t.add_row(
                name, f(r["stable_hit_rate"]), f(r["recovered_hit_rate"]), rec,
                f"{sum(r['throughput_qps']) / max(1, len(r['throughput_qps'])):.0f}", f"{max(p99) if p99 else 0:.0f}",
                str(r["offloads"]), str(r["control"]["table_ops"]), str(r["control"]["packet_ops"]),
                "yes" if r["fits"]["tofino1"] else "[yellow]no[/yellow]",
                "[green]yes[/green]" if r["correct"] else "[red]NO[/red]",
            )
        if any(c in ("n/a", "not in run") for row in cells(t)[1] for c in row):
            t.caption = ("recovery (s): from the popularity change until the hit rate is back within 5% of the stable one; "
                         "n/a: no hit rate to recover (no switch cache); not in run: never back within the run")
        show(console, t)
        failed = {n: r["failed_requests"] for n, r in out["systems"].items() if sum(r["failed_requests"].values())}
        if failed:
            console.print("requests dropped (mostly by servers under load), reported to their client as failed; reads are checked against acknowledged writes only: "
                          + "; ".join(f"{n} {f['get']} GETs, {f['put']} PUTs" for n, f in failed.items()), highlight=False)
        if "plane_interaction_rates_measured" in out:
            m = out["plane_interaction_rates_measured"]
            mod = out["config"]["model"]
            console.print(
                f"plane interactions measured here: {m['p4runtime_table_writes']['per_s']:.0f} P4Runtime table writes/s, "
                f"{m['dataplane_control_packets']['per_s']:.0f} control packets/s through the data plane "
                f"({m['packet_over_table_ratio']:.0f}x); the run charged {mod['table_writes_per_s']:.0f} and {mod['packet_interactions_per_s']:.0f} /s"
            )
        if pcap:
            console.print(f"captures in {Path(pcap).resolve()}/SYSTEM/port{{N}}.pcapng")
        if json_out:
            write_json(json_out, out, indent=1)
            note_written(console, json_out)
        if not all(r["correct"] for r in out["systems"].values()):
            raise typer.Exit(1)


def run_locks(systems: list[str], params: Any, progress: Optional[Any] = None) -> dict[str, Any]:
    """The same seeded lock sequence against each lock system."""
    from dataclasses import asdict

    from inswitch.apps.hare.locksim import LockRun

    out: dict[str, Any] = {"config": {**asdict(params), "path": "trace-driven, in-process switch (hare_lock via _native.SimSwitch), simulated time"}, "systems": {}}
    for name in systems:
        task = progress.add_task(name, total=1.0) if progress else None
        r = LockRun(name, params).run((lambda f, task=task: progress.update(task, completed=f)) if progress else None)
        step = params.epoch_s
        thr = r["throughput_tps"][:-1]
        if params.shift_at is not None:
            t0 = params.shift_at
            before = [x for i, x in enumerate(thr) if t0 - 0.5 <= i * step < t0]
            after = [x for i, x in enumerate(thr) if i * step >= len(thr) * step - 0.5]
            r["stable_tps"] = sum(before) / len(before) if before else None
            r["recovered_tps"] = sum(after) / len(after) if after else None
            rec = None
            if r["recovered_tps"]:
                for i in range(int(t0 / step), len(thr)):
                    if thr[i] >= 0.95 * r["recovered_tps"]:
                        rec = round((i + 1) * step - t0, 3)
                        break
            r["recovery_s"] = rec
        out["systems"][name] = r
    return out


def run_locks_real(console: Any, systems: list[str], locks: int, cache: int, clients: int, hosts: int, servers: int, hold: float, exclusive: float,
                   batch: int, zipf: float, duration: float, shift: bool, seed: int, json_out: Optional[str], kill_agent_at: Optional[float] = None) -> None:
    """`inswitch locks --backend real`: the lock rack (`lockrack`), measured."""
    import os

    from inswitch.apps.hare import lockrack

    if os.geteuid() != 0:
        console.print("[red]error:[/red] --backend real builds a rack of network namespaces: run as root")
        raise typer.Exit(2)
    per_host = -(-clients // hosts)
    lp = lockrack.LockRackParams(n_locks=locks, cache=cache, clients=hosts, clients_per_host=per_host, servers=servers, hold_s=hold, excl_ratio=exclusive,
                                 alpha=zipf, duration=duration, shift_at=duration / 2 if shift else None, batch=min(batch, cache), seed=seed,
                                 kill_agent_at=kill_agent_at)
    if kill_agent_at is not None:
        lp.lost_s = max(lp.lost_s, 10.0, 3 * lockrack.resend_after(lp))  # a request waits out the agent's restart, resent
    with Progress(console=console) as prog:
        out = lockrack.run_all(systems, lp, prog)
    t = Table(title=f"locks --backend real (measured): {hosts} x {per_host} clients, {servers} lock servers, {locks} locks, {duration:g} s per system")
    for c in ("system", "holds", "throughput (tps)", "p50 (µs)", "p99 (µs)", "p99.9 (µs)", "retries", "lost", "mutex violations", "offloads", "correct"):
        t.add_column(c)
    f = lambda v: "n/a" if v is None else f"{v:.1f}"  # noqa: E731
    for name, r in out["systems"].items():
        t.add_row(name, str(r["holds"]), f(r["throughput_tps"]), f(r["p50_us"]), f(r["p99_us"]), f(r["p999_us"]), str(r["clients"].get("retries", 0)),
                  str(r["lost_requests"]), str(r["mutex_violations"]), str(r["control"]["offloads"]), "[green]yes[/green]" if r["correct"] else "[red]NO[/red]")
    show(console, t)
    if kill_agent_at is not None:
        k = Table(title="lock agent killed (kill -9) and restarted, its table replayed from its journal")
        for c in ("system", "agent", "killed at (s)", "down (s)", "tps before", "tps after", "records replayed", "retransmissions"):
            k.add_column(c)
        for name, r in out["systems"].items():
            for a in r["agent_restarts"]:
                k.add_row(name, str(a["agent"]), f"{a['killed_at_s']:.3f}", f"{a['down_s']:.3f}", f(a["tps_before"]), f(a["tps_after"]),
                          str(r["agents"][a["agent"]].get("replayed", 0)), str(r["clients"].get("resent", 0)))
        show(console, k)
    if json_out:
        write_json(json_out, out, indent=1)
        note_written(console, json_out)
    if not all(r["correct"] for r in out["systems"].values()):
        raise typer.Exit(1)


def _register_locks(app: typer.Typer) -> None:
    from inswitch.apps.hare.locksim import LOCK_SYSTEMS, LockParams

    @app.command("locks", epilog=LOCKS_EXAMPLES)
    def locks_cmd(
        system: str = option("all", "--system", type=Choice(*LOCK_SYSTEMS, "all"), help="System to run: hare, netlock (static offloading), none, or all of them."),
        locks: int = option(2000, "--locks", type=Int(1, 1_000_000), help="Number of locks."),
        cache: int = option(64, "--cache", type=Int(1, 65_536), help="Locks the switch can hold."),
        clients: int = option(64, "--clients", type=Int(1, 1024), help="Concurrent clients (closed loop)."),
        hold: float = option(200e-6, "--hold", type=Float(1e-6, 1), help="Hold time per lock in seconds."),
        exclusive: float = option(0.2, "--exclusive", type=Float(0, 1), help="Fraction of exclusive requests."),
        batch: int = option(16, "--batch", type=Int(1, 4096), help="Hare's batch size K (locks moved per offloading round)."),
        zipf: float = option(0.99, "--zipf", type=Float(0, 10), help="Zipf skew of lock popularity (0: uniform)."),
        duration: float = option(2.0, "--duration", type=Float(0.1, 600), help="Run length in simulated seconds."),
        shift: bool = typer.Option(True, help="Move the coldest `cache` locks to the top at half time."),
        service: float = option(300e-6, "--service", type=Float(1e-6, 1), help="Lock server service time per request in seconds."),
        seed: int = option(5, "--seed", type=SEED, help="Seed of the lock sequence."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
        backend: str = option("sim", "--backend", type=Choice("sim", "real"), help="sim: trace replay in simulated time (a model); real: lock servers and clients as processes in a rack (root), measured."),
        hosts: int = option(2, "--hosts", type=Int(1, 16), help="--backend real: client hosts (the clients are spread over them)."),
        servers: int = option(2, "--servers", type=Int(1, 16), help="--backend real: lock server hosts."),
        kill_agent_at: Optional[float] = option(None, "--kill-agent-at", type=Float(0, 600),
                                                help="--backend real: kill -9 lock agent 0 this many seconds into each system's run and start it again (its lock table replayed from its journal); the run reports the window it was down."),
        model_rates: str = option("measured", "--model-rates", type=Choice("paper", "measured"), help="--backend sim: control costs at this machine's measured P4Runtime and data-plane rates (apps/hare/rates.py), or the paper's assumed 10K table writes/s and 1M packets/s."),
    ) -> None:
        """Lock manager: Hare's dynamic offloading (dirty lock state moved by packets) vs
        NetLock-style static offloading vs none."""
        console = console_for(json_out)
        if cache > locks:
            raise typer.BadParameter(f"{cache} is more than the {locks} locks", param_hint="--cache")
        systems = list(LOCK_SYSTEMS) if system == "all" else [system]
        if kill_agent_at is not None and backend != "real":
            raise typer.BadParameter("kills a lock agent process: only with --backend real", param_hint="--kill-agent-at")
        if kill_agent_at is not None and kill_agent_at >= duration:
            raise typer.BadParameter(f"{kill_agent_at:g} s is not within the {duration:g} s run", param_hint="--kill-agent-at")
        if backend == "real":
            run_locks_real(console, systems, locks, cache, clients, hosts, servers, hold, exclusive, batch, zipf, duration, shift, seed, json_out, kill_agent_at)
            return
        measured = plane_rates.measure(True) if model_rates == "measured" else None
        extra = {"table_rate": measured["p4runtime_table_writes"]["per_s"], "packet_rate": measured["dataplane_control_packets"]["per_s"]} if measured else {}
        p = LockParams(n_locks=locks, cache=cache, clients=clients, hold_s=hold, excl_ratio=exclusive, batch=batch, alpha=zipf,
                       duration=duration, shift_at=duration / 2 if shift else None, service_s=service, seed=seed, **extra)
        with Progress(console=console) as prog:
            out = run_locks(systems, p, prog)
        if measured:
            out["plane_interaction_rates_measured"] = measured
        out["config"]["backend"] = "sim (model: trace replay, FIFO servers, simulated time)"
        t = Table(title=f"locks (model, --backend sim): {len(systems)} system(s)")
        for c in ("system", "transactions", "stable tps", "recovered tps", "recovery (s)", "retries", "moves", "correct"):
            t.add_column(c)
        f = lambda v: "n/a" if v is None else f"{v:.0f}"  # noqa: E731
        for name, r in out["systems"].items():
            rec = r.get("recovery_s")
            rec_text = str(rec) if rec is not None else ("n/a" if "recovery_s" not in r else "not in run")
            t.add_row(name, str(r["transactions"]), f(r.get("stable_tps")), f(r.get("recovered_tps")), rec_text,
                      str(r["retries"]), str(r["moves"]), "[green]yes[/green]" if r["correct"] else "[red]NO[/red]")
        if any(c in ("n/a", "not in run") for row in cells(t)[1] for c in row):
            t.caption = ("n/a: no popularity change in this run (nothing to recover from); "
                         "not in run: throughput never back within 95% of the recovered level before the end")
        show(console, t)
        if json_out:
            write_json(json_out, out, indent=1)
            note_written(console, json_out)
        if not all(r["correct"] for r in out["systems"].values()):
            raise typer.Exit(1)
