"""`inswitch bench kvs`: what Hare's path costs and what the switch's hit path serves, in
one rack with one real Redis (issue 17).

- `none` (switch forwarding only): redis-benchmark GETs through `inswitch kvs proxy` and
  through the Hare client library, against the same redis-benchmark talking to Redis
  directly across the same switch: `direct_over_none` = direct ops/s / proxy ops/s;
- the hit path: `hare` with every key offloaded (64 keys, 128 slots, warmed up), GETs
  from the client library; `hit_path_ops` = GETs per second answered by the switch, and
  its ratio to what one Redis served directly.

`engine` is the client library's load generator for the `none` and hit-path phases:
"native" (`hare.fastload`, the default where built: a windowed UDP loop with the GIL
released, every GET's value checked against the key's, and the run's history recorded for
the linearizability checker as with the python engine: `config.native_history`) or
"python" (`hare.Client`). The
CPU the load generator and the switch daemon used over the hit-path run (from
getrusage and /proc/PID/stat) says which of them is the limit."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

from inswitch.periodic import Periodic

ENGINES = ("native", "python")


def default_engine() -> str:
    from inswitch.hare import fastload

    return "native" if fastload.available() else "python"


class CpuSampler(Periodic):
    """utime+stime of a process (all its threads) from /proc/PID/stat every `every` s, on
    the monotonic clock, so the CPU of a window can be read off afterwards."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        super().__init__(every)
        self.pid = pid
        self.tick_s = os.sysconf("SC_CLK_TCK")
        self.rows: list[tuple[int, float]] = []

    def _read(self) -> Optional[float]:
        try:
            f = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(f[11]) + int(f[12])) / self.tick_s  # fields 14, 15: utime, stime

    def tick(self) -> None:
        c = self._read()
        if c is not None:
            self.rows.append((time.monotonic_ns(), c))

    def __enter__(self) -> "CpuSampler":
        super().__enter__()
        return self

    def cores(self, t0_ns: int, t1_ns: int) -> Optional[float]:
        """Cores used between the samples nearest inside [t0, t1]."""
        inside = [r for r in self.rows if t0_ns <= r[0] <= t1_ns]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / ((inside[-1][0] - inside[0][0]) / 1e9)


def run(duration: float = 3.0, requests: int = 20000, progress: Optional[Callable[[str], None]] = None, engine: Optional[str] = None) -> dict[str, Any]:
    from inswitch.apps.hare import redisrack as rr
    from inswitch.topology import load_state

    say = progress or (lambda s: None)
    engine = engine or default_engine()
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}")
    p = rr.RackParams(clients=1, servers=1, records=64, cache=128, batch=64, t_wait=0.1, duration=duration, workload="ycsb-c", shift="none", window=64, engine=engine)
    out: dict[str, Any] = {"config": {"records": p.records, "requests": requests, "duration_s": duration, "engine": engine, "window": p.window,
                                      "redis_benchmark": f"-t get -n {requests} -r {p.records} -c 50", "loadavg_before": list(os.getloadavg()),
                                      **({"native_history": p.native_history} if engine == "native" else {})}}
    with rr.RedisRack(p) as rack:
        h = rack.client_hosts[0]
        say("none: redis-benchmark direct to Redis")
        ctl = rack.use("none")
        redis_pid = rack.redis[0].pid if rack.redis[0] is not None else None  # `ip netns exec` execs redis-server
        with CpuSampler(int(redis_pid or 0)) as redis_cpu:
            d0 = time.monotonic_ns()
            direct = rr.redis_benchmark(rack, h, rack.server_ips[0], 6379, requests, p.records, tests="get")["GET"]
            d1 = time.monotonic_ns()
        say("none: redis-benchmark through the proxy")
        px = rr.ProxyInHost(rack, h)
        try:
            proxied = rr.redis_benchmark(rack, h, "127.0.0.1", px.port, requests, p.records, tests="get")["GET"]
        finally:
            px.stop()
        say("none: the client library")
        lib_none = rack.run_load("none", ctl)
        say("hare: warming the cache")
        ctl = rack.use("hare")
        rack.run_load("hare", ctl)
        say("hare: hit path")
        st = load_state(rack.name) or rack.st
        with CpuSampler(int(st.switch.pid)) as sw_cpu:
            hit = rack.run_load("hare", ctl)
        hit_py = None
        if engine == "native":  # the Python client's hit path in the same rack and run
            say("hare: hit path, Python client")
            rack.p.engine = "python"
            hit_py = rack.run_load("hare", ctl)
            rack.p.engine = engine
    cl = hit["clients"][0]
    t0, t1 = int(cl["run_start_ns"]), int(cl["run_stop_ns"])
    client_cores = cl["cpu_s"] / ((t1 - t0) / 1e9) if t1 > t0 else None
    switch_cores = sw_cpu.cores(t0, t1)
    redis_cores = redis_cpu.cores(d0, d1)
    py_ops = None if hit_py is None else hit_py["throughput_ops"] * (hit_py["hit_rate"] or 0.0)
    hit_ops = hit["throughput_ops"] * (hit["hit_rate"] or 0.0)
    out.update({
        "direct_redis_get_ops": direct["rps"],
        "direct_redis_get_p50_ms": direct["p50_latency_ms"],
        "proxy_none_get_ops": proxied["rps"],
        "proxy_none_get_p50_ms": proxied["p50_latency_ms"],
        "direct_over_none": direct["rps"] / proxied["rps"] if proxied["rps"] else None,
        "client_none_ops": lib_none["throughput_ops"],
        "client_none_p50_us": lib_none["p50_us"],
        "direct_over_client_none": direct["rps"] / lib_none["throughput_ops"] if lib_none["throughput_ops"] else None,
        "hare_ops": hit["throughput_ops"],
        "hare_hit_rate": hit["hit_rate"],
        "hit_path_ops": hit_ops,
        "hit_path_p50_us": hit["p50_us"],
        "hit_path_over_one_redis": hit_ops / direct["rps"] if direct["rps"] else None,
        "hit_path_p99_us": hit["p99_us"],
        "hit_path_client_cores": client_cores,
        "hit_path_switch_cores": switch_cores,
        "direct_redis_cores": redis_cores,
        # What each would serve with a core to itself (the machine is shared: loadavg).
        "hit_path_ops_per_switch_core": hit_ops / switch_cores if switch_cores else None,
        "hit_path_ops_per_client_core": hit_ops / client_cores if client_cores else None,
        "direct_redis_ops_per_core": direct["rps"] / redis_cores if redis_cores else None,
        "hit_path_python_ops": py_ops,
        "native_over_python": hit_ops / py_ops if py_ops else None,
        "value_mismatches": int(lib_none.get("value_mismatches", 0)) + int(hit.get("value_mismatches", 0)),
        "client_stats": {"none": lib_none["clients"][0], "hit": cl},
        "correct": bool(lib_none["correct"] and hit["correct"] and (hit_py is None or hit_py["correct"])),
        "hit_path_linearizable": hit["linearizable"],
        "hit_path_operations_checked": hit["operations"],
        "loadavg_after": list(os.getloadavg()),
    })
    return out


def register(app: Any) -> None:
    import os
    import shutil

    import typer
    from rich.table import Table

    from inswitch.bench.cli import bench_app
    from inswitch.tables import show
    from inswitch.cliopts import JSON_PATH, Choice, Float, Int, option
    from inswitch.output import console_for, note_written, write_json

    @bench_app.command("kvs", epilog="Examples:\n\n  sudo inswitch bench kvs --json bench/kvs.json\n\n  sudo inswitch bench kvs --duration 5 --requests 50000\n")
    def kvs(
        duration: float = option(3.0, "--duration", type=Float(0.5, 600), help="Seconds per client-library measurement."),
        requests: int = option(20000, "--requests", type=Int(100, 10_000_000), help="redis-benchmark requests per measurement."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
        engine: Optional[str] = option(None, "--engine", type=Choice(*ENGINES), help="The client library's load generator: native (default where built; windowed UDP loop, GIL released) or python."),
    ) -> None:
        """Hare's path against Redis direct (direct_over_none) and the switch's hit path, in a rack with one real Redis."""
        console = console_for(json_out)
        if os.geteuid() != 0 or not shutil.which("redis-server") or not shutil.which("redis-benchmark"):
            console.print("[red]error:[/red] bench kvs needs root (a rack of namespaces), redis-server and redis-benchmark")
            raise typer.Exit(2)
        with console.status("measuring") as st:
            r = run(duration, requests, lambda s: st.update(f"measuring: {s}"), engine)
        t = Table(title="inswitch bench kvs (measured, one Redis, 2-core machine shared)")
        t.add_column("measurement", no_wrap=True)
        t.add_column("result", justify="right", no_wrap=True)
        t.add_row("redis-benchmark GET, direct to Redis", f"{r['direct_redis_get_ops']:,.0f} ops/s")
        t.add_row("redis-benchmark GET, through the proxy (none)", f"{r['proxy_none_get_ops']:,.0f} ops/s")
        t.add_row("direct_over_none", f"{r['direct_over_none']:.2f}")
        eng = r["config"]["engine"]
        t.add_row(f"client library ({eng}), none", f"{r['client_none_ops']:,.0f} ops/s")
        t.add_row("direct / client library none", "?" if r["direct_over_client_none"] is None else f"{r['direct_over_client_none']:.2f}")
        t.add_row("client library, hare, all keys offloaded", f"{r['hare_ops']:,.0f} ops/s, hit rate {r['hare_hit_rate']:.3f}")
        t.add_row("hit path (GETs answered by the switch)", f"{r['hit_path_ops']:,.0f} ops/s")
        t.add_row("hit path / one Redis (goal >= 5)", f"{r['hit_path_over_one_redis']:.2f}")
        fmt = lambda c: "?" if c is None else f"{c:.2f}"  # noqa: E731
        if r["hit_path_python_ops"] is not None:
            t.add_row("hit path, Python client (same run)", f"{r['hit_path_python_ops']:,.0f} ops/s")
            t.add_row("native / Python client, hit path", fmt(r["native_over_python"]))
        per = lambda v: "?" if v is None else f"{v:,.0f}"  # noqa: E731
        t.add_row("ops per CPU-second: switch daemon (hit) / Redis (direct)", f"{per(r['hit_path_ops_per_switch_core'])} / {per(r['direct_redis_ops_per_core'])}")
        t.add_row("CPU over the hit run: load generator / switch daemon", f"{fmt(r['hit_path_client_cores'])} / {fmt(r['hit_path_switch_cores'])} cores")
        t.add_row("GET values wrong (must be 0) / correct", f"{r['value_mismatches']} / {r['correct']}")
        show(console, t)
        if json_out:
            write_json(json_out, r, indent=2)
            note_written(console, json_out)
        if not r["correct"]:
            console.print("[red]error:[/red] a run was not correct (wrong values or a failed check); see the JSON")
            raise typer.Exit(1)
