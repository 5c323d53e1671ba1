"""`inswitch search`: distributed LSH search with NetSHa and its baselines, one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import Progress
from rich.table import Table

from inswitch.cliopts import IN_FILE, JSON_PATH, OUT_DIR, RACK_NAME, SEED, Choice, Float, Int, Text, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show
from inswitch.topology.fabric.cli import TOPOLOGY_SPEC
from inswitch.topology.fabric.plan import MAX_FABRIC_NAME

from .datasets import DatasetError, load
from .search import ALL_MODES, MODES, SWITCH_CONFIGS, SearchConfig, run_search, search_config


def _netsha_spec(text: str) -> str:
    from inswitch import native

    if text.split(":", 1)[0] not in ("netsha", "netsha-tofino1", "netsha-unbounded"):
        raise ValueError("expected netsha, netsha-tofino1, netsha-unbounded or netsha:slots=..")
    native.resources([text], "unbounded")  # the program builder checks the parameters (ValueError)
    return text


def _dataset(text: str) -> str:
    if text in ("random", "digits", "text") or text.startswith("text:") or Path(text).is_file():
        return text
    raise ValueError("no dataset by that name and no such file")


def bench_netsha(
    answers_per_packet: int = option(8, "--answers-per-packet", type=Int(1, 120), help="Answers per server packet (one pass each)."),
    queries: int = option(64, "--queries", type=Int(1, 65_536), help="Distinct queries the answers belong to."),
    duration: float = option(2.0, "--duration", type=Float(0.1, 600), help="Seconds per measurement."),
    spec: str = option("netsha", "--spec", type=Text("a NetSHa program spec", check=_netsha_spec, bad=("bogus", "netsha:slots=99")), help="Program spec: netsha (fits tofino1), netsha-unbounded (Table 1; does not fit tofino1) or netsha:slots=.."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
) -> None:
    """Answers per second through the NetSHa program on one core, in memory, with a
    forwarding-only switch measured in the same run as the base."""
    from inswitch import _native

    console = console_for(json_out)
    with console.status("measuring netsha and forward"):
        r = dict(_native.netsha_bench(spec, answers_per_packet, queries, duration))
    t = Table(title="inswitch bench netsha")
    t.add_column("measurement")
    t.add_column("result", justify="right")
    t.add_row(f"netsha ({r['spec']}), {r['answers_per_packet']} answers/packet", f"{r['netsha_answers_per_s']:,.0f} answers/s")
    t.add_row("forward only, same frames, same harness", f"{r['forward_answers_per_s']:,.0f} answers/s")
    t.add_row("ratio netsha / forward", f"{r['ratio_netsha_forward']:.3f}")
    t.add_row("netsha packets/s | forward packets/s", f"{r['netsha_packets_per_s']:,.0f} | {r['forward_packets_per_s']:,.0f}")
    show(console, t)
    if json_out:
        write_json(json_out, r, indent=2)
        note_written(console, json_out)


SEARCH_EXAMPLES = """Examples:

  inswitch search --dataset random --mode all --json out/search.json

  inswitch search --base 800 --queries 12 --servers 2 --k 5 --registers 8 --mode netsha

  inswitch search --dataset text:160 --base 0 --queries 20 --k 10 --json -

  inswitch search --rack --fabric leaf-spine:3,1,2 --base 1500 --queries 20 --servers 4 --k 10 --per-packet 10
"""


def _fabric_search(console: Any, ds: Any, cfg: SearchConfig, fabric: str, name: str, json_out: Optional[str]) -> None:
    from .fabric import FABRIC_MODES, FabricSearchError, run_fabric_search

    try:
        with console.status("fabric search") as status:
            result = run_fabric_search(ds, cfg, fabric, name, lambda m: status.update(m))
    except FabricSearchError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2)
    f = result["fabric"]
    t = Table(title=f"search --rack --fabric {fabric}: {ds.name}, {ds.base.shape[0]} × {ds.base.shape[1]}, {ds.queries.shape[0]} queries, "
                    f"K={cfg.k}, S={cfg.servers} (servers under {', '.join(sorted(f['paths']))}, agent under {f['agent']['leaf']})")
    for c in ("mode", "switches reducing", "recall", "F1", "server packets", "agent packets", "agent answers", "top K = none's"):
        t.add_column(c)
    for m in FABRIC_MODES:
        r = result["modes"][m]
        t.add_row(m, f"{len(r['reducing_switches'])} of {len(f['switches'])}", f"{r['recall']:.3f}", f"{r['f1']:.3f}", str(r["server_packets"]),
                  str(r["agent_packets"]), str(r["agent_answers"]), "yes" if r["topk_equal_to_none"] else "NO")
    show(console, t)
    s = Table(title="answers per switch, fabric mode: dropped beyond r.T, cleared at a final flush, sent on by its registers")
    for c in ("switch", "dropped", "cleared", "sent on"):
        s.add_column(c, justify="left" if c == "switch" else "right")
    for sw, e in result["modes"]["fabric"]["switches"].items():
        s.add_row(sw, str(e["dropped_by_threshold"]), str(e["cleared"]), str(e["sent"]))
    show(console, s)
    if json_out:
        write_json(json_out, result, indent=2)
        note_written(console, json_out)


def register(app: typer.Typer) -> None:
    try:
        from inswitch.bench.cli import bench_app

        bench_app.command("netsha", epilog="Examples:\n\n  inswitch bench netsha --duration 2 --json bench/netsha.json\n\n  inswitch bench netsha --spec netsha-tofino1 --answers-per-packet 16\n")(bench_netsha)
    except ImportError:  # the bench area is not built
        pass

    @app.command("search", epilog=SEARCH_EXAMPLES)
    def search_cmd(
        dataset: str = option("random", "--dataset", type=Text("random, digits, text, text:N, text:FILE or a vector file", check=_dataset, bad=("bogus-no-such-file",)), help="The data: random (generated), digits, text (text:N sentences, text:FILE) or a PATH (.fvecs/.bvecs/.ivecs/.hdf5)."),
        queries_file: Optional[str] = option(None, "--queries-file", type=IN_FILE, help="Queries for a PATH dataset, same format."),
        base: int = option(20000, "--base", type=Int(0, 10_000_000), help="Base vectors (random: generated; PATH: the first N, 0 = all)."),
        servers: int = option(4, "--servers", type=Int(1, 32), help="Search servers S (a query's server set is a 32-bit mask)."),
        queries: int = option(200, "--queries", type=Int(1, 100_000), help="Queries N."),
        k: int = option(50, "--k", type=Int(1, 10_000), help="Answers per query K."),
        registers: int = option(100, "--registers", type=Int(1, 65_536), help="Logical registers per switch (Table 1: 100)."),
        ways: int = option(2, "--ways", type=Int(1, 2), help="Candidate registers per query for Algorithm 2's weight-based selection (must divide --registers)."),
        switch_config: str = option("tofino1", "--switch-config", type=Choice(*SWITCH_CONFIGS), help="Switch parameters: tofino1 (the default; fits a Tofino 1: 6 slots, p = 4, 256-byte parse, 2 condition units) or unbounded (Table 1: 12 slots, p = 8, 1,514-byte parse, 4 condition units; does not fit tofino1). --slots, --ga, --conds override."),
        conds: Optional[int] = option(None, "--conds", type=Int(2, 4), help="Condition units of the switch's stateful ALU (4: Tofino 2; 2: Tofino 1, two ways then claim way 1 on a second pass; default: --switch-config's)."),
        arrival: str = option("concurrent", "--arrival", type=Choice("concurrent", "sequential", "stream"), help="concurrent: servers answer in parallel, packets interleave; sequential: one server after another; stream: queries arrive --query-gap-ns apart (Figs. 20, 23)."),
        query_gap_ns: int = option(250, "--query-gap-ns", type=Int(1, 10**9), help="With --arrival stream: virtual ns between two queries' arrivals (the query rate)."),
        slots: Optional[int] = option(None, "--slots", type=Int(1, 32), help="Slots per register n = p + q (default: --switch-config's, tofino1 6, Table 1 12)."),
        ga: Optional[int] = option(None, "--ga", type=Int(1, 32), help="GA slots p (default: --switch-config's, tofino1 4, Table 1 8; at most --slots)."),
        lam: float = option(0.2, "--lambda", type=Float(0, 1, lo_open=True), help="Concurrency parameter λ (H = λ × registers)."),
        switches: int = option(1, "--switches", type=Int(1, 6), help="Switches on the path, each running NetSHa."),
        mode: str = option("all", "--mode", type=Choice(*ALL_MODES, "all"), help="Which systems to run (all: netsha, layered and tlsh)."),
        tighten: bool = typer.Option(True, "--tighten/--fixed-threshold", help="Phase 2 lowers r.T to the worst answer of every ceil(K / n) full sends (default), or keeps the r.T of the first K answers sent (Algorithm 1)."),
        reduction: str = option("exact", "--reduction", type=Choice("paper", "exact"), help="paper: Algorithm 1 as written; exact: the corrected reduction."),
        tables: int = option(10, "--tables", type=Int(1, 32), help="LSH tables L."),
        hashes: int = option(6, "--hashes", type=Int(1, 32), help="Hashes per table k (concatenated)."),
        width: Optional[float] = option(None, "--width", type=Float(0, 1e9, lo_open=True), help="E2LSH bucket width w (scale with the data's distances; default 32, text 3)."),
        cap: int = option(100, "--cap", type=Int(1, 10_000), help="Answers a server returns per query (its best candidates)."),
        per_packet: int = option(0, "--per-packet", type=Int(0, 120), help="Answers per server packet (0: full packets, 120, §3.3; the switch splits those that run out of room)."),
        rack: bool = typer.Option(False, "--rack", help="NetSHa only, with real processes: a namespace rack (needs root) of S servers and the agent through the switch process."),
        rack_name: str = option("netsha", "--rack-name", type=RACK_NAME, help="Rack name (prefixes its namespaces) for --rack."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="With --rack: capture every switch port into pcapng files in this directory."),
        fabric: Optional[str] = option(None, "--fabric", type=TOPOLOGY_SPEC, help="With --rack: on a fabric (e.g. leaf-spine:3,1,2) instead of one switch: the servers under several leaves, the agent under another, every switch running NetSHa; measured in one run with every switch, only the agent's leaf and no switch reducing (the fabric's name is --rack-name)."),
        seed: int = option(0, "--seed", type=SEED, help="Seed of the data, the queries and the hashes."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
    ) -> None:
        """Run the search in every requested mode over the same data; print and write recall,
        F1, agent packets and the time split."""
        console = console_for(json_out)
        if fabric is not None:
            if not rack:
                raise typer.BadParameter("runs real processes on a fabric: add --rack", param_hint="--fabric")
            if pcap:
                raise typer.BadParameter("--pcap captures one switch's ports: not with --fabric", param_hint="--pcap")
            if switches != 1:
                raise typer.BadParameter("on a fabric the path decides the switches: not with --switches", param_hint="--switches")
            if len(rack_name) > MAX_FABRIC_NAME:
                raise typer.BadParameter(f"a fabric name has at most {MAX_FABRIC_NAME} characters", param_hint="--rack-name")
        if registers % ways != 0:
            raise typer.BadParameter(f"{ways} does not divide --registers {registers}", param_hint="--ways")
        sw = SWITCH_CONFIGS[switch_config]
        if (ga or sw["ga"]) > (slots or sw["slots"]):
            raise typer.BadParameter(f"GA slots {ga or sw['ga']} are more than --slots {slots or sw['slots']}", param_hint="--ga")
        if dataset == "random" and base < 1:
            raise typer.BadParameter("the random dataset needs at least one base vector", param_hint="--base")
        modes = list(MODES) if mode == "all" else [mode]
        try:
            ds = load(dataset, base, queries, queries_file, seed)
        except DatasetError as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        if k > ds.base.shape[0]:
            raise typer.BadParameter(f"{k} answers per query from {ds.base.shape[0]} base vectors", param_hint="--k")
        cfg = search_config(
            switch_config,
            tighten=tighten,
            servers=servers, k=k, registers=registers, slots=slots, ga=ga, lam=lam, switches=switches, reduction=reduction, seed=seed, per_packet=per_packet,
            tables=tables, hashes=hashes, width=width if width is not None else (ds.lsh_width or 32.0), cap=cap, ways=ways, conds=conds, arrival=arrival, query_gap_ns=query_gap_ns,
        )
        if rack:
            from .rack import rack_available, run_rack_search

            if not rack_available():
                console.print("[red]error:[/red] --rack needs root (network namespaces)")
                raise typer.Exit(2)
            if fabric is not None:
                _fabric_search(console, ds, cfg, fabric, rack_name, json_out)
                return
            with console.status("rack search") as status:
                result = run_rack_search(ds, cfg, rack_name, lambda m: status.update(m), pcap=pcap)
            r = result["modes"]["netsha-rack"]
            t = Table(title=f"search --rack: {ds.name}, {ds.base.shape[0]} × {ds.base.shape[1]}, {ds.queries.shape[0]} queries, K={k}, S={servers}, switch {result['switch']}")
            for c in ("mode", "recall", "F1", "server packets", "agent packets", "agent answers", "total s"):
                t.add_column(c)
            t.add_row("netsha-rack", f"{r['recall']:.3f}", f"{r['f1']:.3f}", str(r["server_packets"]), str(r["agent_packets"]), str(r["agent_answers"]), f"{r['total_s']:.2f}")
            show(console, t)
            if json_out:
                write_json(json_out, result, indent=2)
                note_written(console, json_out)
            return
        with Progress(console=console, transient=True) as prog:
            tasks = {m: prog.add_task(m, total=ds.queries.shape[0]) for m in modes}
            result = run_search(ds, cfg, modes, lambda m, n: prog.advance(tasks[m], n))
        t = Table(title=f"search: {ds.name}, {ds.base.shape[0]} × {ds.base.shape[1]}, {ds.queries.shape[0]} queries, K={k}, S={servers}, switch {result['switch']}")
        for c in ("mode", "recall", "F1", "agent packets", "agent answers", "total s", "select %", "search %", "net %", "agent %"):
            t.add_column(c)
        for m, r in result["modes"].items():
            sp = r["time_split_pct"]
            t.add_row(
                m,
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
                str(r["agent_packets"]),
                str(r["agent_answers"]),
                f"{r['total_s']:.2f}",
                *(f"{sp[x]:.1f}" for x in ("selection", "search", "network", "agent")),
            )
        show(console, t)
        if "agent_packets_ratio" in result:
            console.print(f"agent packets, netsha / layered: {result['agent_packets_ratio']:.3f} (paper: 4–10× fewer); "
                          f"against Layered's servers sending full 120-answer packets: {result['agent_packets_ratio_layered_full']:.3f}")
        if json_out:
            write_json(json_out, result, indent=2)
            note_written(console, json_out)
