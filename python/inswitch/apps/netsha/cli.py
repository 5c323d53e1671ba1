"""`inswitch search`: distributed LSH search with NetSHa and its baselines, one run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from inswitch.output import ensure_writable, write_json
from inswitch.tables import show

from .datasets import DatasetError, load
from .search import ALL_MODES, MODES, SearchConfig, run_search


def bench_netsha(
    answers_per_packet: int = typer.Option(8, help="Answers per server packet (one pass each)."),
    queries: int = typer.Option(64, help="Distinct queries the answers belong to."),
    duration: float = typer.Option(2.0, help="Seconds per measurement."),
    spec: str = typer.Option("netsha", help="Program spec (netsha, netsha-tofino1, netsha:slots=..)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results here."),
) -> None:
    """Answers per second through the NetSHa program on one core, in memory, with a
    forwarding-only switch measured in the same run as the base."""
    from inswitch import _native
    from inswitch.bench.cli import check_duration

    check_duration(duration)
    console = Console()
    if json_out:
        ensure_writable(json_out)
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
        console.print(f"wrote {json_out}")


def register(app: typer.Typer) -> None:
    try:
        from inswitch.bench.cli import bench_app

        bench_app.command("netsha")(bench_netsha)
    except ImportError:  # the bench area is not built
        pass

    @app.command("search")
    def search_cmd(
        dataset: str = typer.Option("random", help="random | digits | text (text:N sentences, text:FILE) | PATH (.fvecs/.bvecs/.ivecs/.hdf5)."),
        queries_file: Optional[str] = typer.Option(None, help="Queries for a PATH dataset, same format."),
        base: int = typer.Option(20000, help="Base vectors (random: generated; PATH: first N, 0 = all)."),
        servers: int = typer.Option(4, help="Search servers S."),
        queries: int = typer.Option(200, help="Queries N."),
        k: int = typer.Option(50, help="Answers per query K."),
        registers: int = typer.Option(100, help="Logical registers per switch (Table 1: 100)."),
        ways: int = typer.Option(2, min=1, max=2, help="Candidate registers per query for Algorithm 2's weight-based selection (must divide --registers)."),
        arrival: str = typer.Option("concurrent", help="concurrent (servers answer in parallel, packets interleave) | sequential (one server after another) | stream (queries arrive --query-gap-ns apart; Figs. 20, 23)."),
        query_gap_ns: int = typer.Option(250, min=1, help="With --arrival stream: virtual ns between two queries' arrivals (the query rate)."),
        slots: int = typer.Option(12, help="Slots per register n = p + q (Table 1: 12)."),
        ga: int = typer.Option(8, help="GA slots p (Table 1: 8)."),
        lam: float = typer.Option(0.2, "--lambda", help="Concurrency parameter λ (H = λ × registers)."),
        switches: int = typer.Option(1, min=1, max=6, help="Switches on the path, each running NetSHa."),
        mode: str = typer.Option("all", help="netsha | layered | tlsh | netsha-agg | all."),
        reduction: str = typer.Option("exact", help="paper (Algorithm 1 as written) | exact."),
        tables: int = typer.Option(10, help="LSH tables L."),
        hashes: int = typer.Option(6, help="Hashes per table k (concatenated)."),
        width: Optional[float] = typer.Option(None, help="E2LSH bucket width w (scale with the data's distances; default 32, text 3)."),
        cap: int = typer.Option(100, help="Answers a server returns per query (its best candidates)."),
        per_packet: int = typer.Option(0, help="Answers per server packet (0: full packets, 120, §3.3; the switch splits those that run out of room)."),
        rack: bool = typer.Option(False, "--rack", help="NetSHa only, with real processes: a namespace rack (needs root) of S servers and the agent through the switch process."),
        rack_name: str = typer.Option("netsha", "--rack-name", help="Rack name (prefixes its namespaces) for --rack."),
        pcap: Optional[str] = typer.Option(None, "--pcap", help="With --rack: capture every switch port into pcapng files in this directory."),
        seed: int = typer.Option(0),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result here."),
    ) -> None:
        """Run the search in every requested mode over the same data; print and write recall, F1, agent packets and the time split."""
        console = Console()
        if json_out:
            ensure_writable(json_out)
        if reduction not in ("paper", "exact"):
            console.print("[red]error:[/red] --reduction must be paper or exact")
            raise typer.Exit(2)
        if arrival not in ("concurrent", "sequential", "stream") or registers % ways != 0:
            console.print("[red]error:[/red] --arrival must be concurrent, sequential or stream, and --ways must divide --registers")
            raise typer.Exit(2)
        modes = list(MODES) if mode == "all" else [mode]
        if any(m not in ALL_MODES for m in modes):
            console.print(f"[red]error:[/red] --mode must be one of {', '.join(ALL_MODES)} or all")
            raise typer.Exit(2)
        try:
            ds = load(dataset, base, queries, queries_file, seed)
        except DatasetError as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        cfg = SearchConfig(
            servers=servers, k=k, registers=registers, slots=slots, ga=ga, lam=lam, switches=switches, reduction=reduction, seed=seed, per_packet=per_packet,
            tables=tables, hashes=hashes, width=width if width is not None else (ds.lsh_width or 32.0), cap=cap, ways=ways, arrival=arrival, query_gap_ns=query_gap_ns,
        )
        if rack:
            from .rack import rack_available, run_rack_search

            if not rack_available():
                console.print("[red]error:[/red] --rack needs root (network namespaces)")
                raise typer.Exit(2)
            with console.status("rack search") as status:
                result = run_rack_search(ds, cfg, rack_name, lambda m: status.update(m), pcap=pcap)
            r = result["modes"]["netsha-rack"]
            t = Table(title=f"search --rack: {ds.name}, {ds.base.shape[0]} × {ds.base.shape[1]}, {ds.queries.shape[0]} queries, K={k}, S={servers}")
            for c in ("mode", "recall", "F1", "server packets", "agent packets", "agent answers", "total s"):
                t.add_column(c)
            t.add_row("netsha-rack", f"{r['recall']:.3f}", f"{r['f1']:.3f}", str(r["server_packets"]), str(r["agent_packets"]), str(r["agent_answers"]), f"{r['total_s']:.2f}")
            show(console, t)
            if json_out:
                write_json(json_out, result, indent=2)
                console.print(f"wrote {json_out}")
            return
        with Progress(console=console, transient=True) as prog:
            tasks = {m: prog.add_task(m, total=ds.queries.shape[0]) for m in modes}
            result = run_search(ds, cfg, modes, lambda m, n: prog.advance(tasks[m], n))
        t = Table(title=f"search: {ds.name}, {ds.base.shape[0]} × {ds.base.shape[1]}, {ds.queries.shape[0]} queries, K={k}, S={servers}")
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
            console.print(f"agent packets, netsha / layered: {result['agent_packets_ratio']:.3f} (paper: 4–10× fewer)")
        if json_out:
            write_json(json_out, result, indent=2)
            console.print(f"wrote {json_out}")
