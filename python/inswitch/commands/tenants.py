"""`inswitch tenants run` and `inswitch tenants ledger`: INaaS applications as tenants of
one switch (python/inswitch/apps/inaas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch.apps.inaas.runner import LEDGER_PATH, run_tenants, save_ledger
from inswitch.output import ensure_writable, write_json
from inswitch.tables import show

tenants_app = typer.Typer(help="INaaS: applications as tenants of one in-network service.", no_args_is_help=True)


def _print_ledger(ledger: list[dict], console: Console) -> None:
    t = Table(title="INaaS ledger (from the switch's own counters)")
    for c in ("tenant", "plan", "ALU ops", "leases", "register·s", "charge", "goalkeeper = switch"):
        t.add_column(c)
    for line in ledger:
        t.add_row(
            line["tenant"],
            line["plan"],
            str(line["alu_ops"]),
            str(line["leases"]),
            f"{line['register_seconds']:.6f}",
            f"{line['charge']:.9f}",
            "yes" if line["adds_up"] else "[red]no[/red]",
        )
    show(console, t)


@tenants_app.command("run")
def run_cmd(
    apps: str = typer.Option("kv,sparse,dense,bloom,paxos", help="Applications, comma-separated: kv, sparse, dense, bloom, paxos."),
    instances: int = typer.Option(1, help="Concurrent instances of each application (1, 2 or 4)."),
    scheduler: str = typer.Option("inaas", help="Switch memory scheduler: inaas, fcfs, fq."),
    loss: float = typer.Option(0.0, help="Packet loss probability on the tenants' links."),
    attacker: bool = typer.Option(False, "--attacker", help="Add an attacker tenant (forged uids, replays, random keys)."),
    subscribe: str = typer.Option("", help="Applications on the subscription plan (priority on switch memory), comma-separated."),
    budget: int = typer.Option(512, help="Registers per segment the scheduler divides among the tenants."),
    full: bool = typer.Option(False, "--full", help="Larger workloads (default: quick sizes)."),
    seed: int = typer.Option(1),
    json_out: Optional[str] = typer.Option(None, "--json", help="Write the result here."),
) -> None:
    """Run applications concurrently as tenants; speedup against host-only, correctness, ledger."""
    console = Console()
    if json_out:
        ensure_writable(json_out)
    names = [a.strip() for a in apps.split(",") if a.strip()]
    with console.status("tenants: starting") as st:
        subs = tuple(a.strip() for a in subscribe.split(",") if a.strip())
        res = run_tenants(names, instances, scheduler, loss, attacker, quick=not full, seed=seed, progress=lambda s: st.update(f"tenants: {s}"), subscribers=subs, budget=budget)
    t = Table(title=f"INaaS tenants ({scheduler}, {instances}x, loss {loss}) — {res['mode']}")
    for c in ("app", "metric", "INaaS", "host-only", "speedup", "correct"):
        t.add_column(c)
    for name, f in res["apps"].items():
        t.add_row(name, f["metric"], f"{f['inaas']:.4g} {f['unit']}", f"{f['host_only']:.4g} {f['unit']}", f"{f['speedup']:.2f}", "yes" if f["correct"] else "[red]NO[/red]")
    show(console, t)
    console.print(f"cross-tenant violations: {res['cross_tenant_violations']}")
    if res["attack"] is not None:
        a = res["attack"]
        console.print(f"attacker detected: {a['detected']} after {a['detection_time_us']} µs; values leaked: {a['attacker_values_leaked']}")
    _print_ledger(res["ledger"], console)
    save_ledger(res)
    if json_out:
        write_json(json_out, res, indent=2)
        console.print(f"wrote {json_out}")
    if res["cross_tenant_violations"] or not all(f["correct"] for f in res["apps"].values()):
        raise typer.Exit(1)


@tenants_app.command("ledger")
def ledger_cmd(path: str = typer.Option(str(LEDGER_PATH), help="Ledger written by the last `tenants run`.")) -> None:
    """Print the bill of the last `inswitch tenants run`."""
    console = Console()
    p = Path(path)
    if not p.exists():
        console.print(f"[red]error:[/red] no ledger at {p} (run `inswitch tenants run` first)")
        raise typer.Exit(2)
    _print_ledger(json.loads(p.read_text())["ledger"], console)


@tenants_app.command("rack")
def rack_cmd(name: str = typer.Option("inaas1", help="Rack name (namespaces inaas1-h1..h3)."), json_out: Optional[str] = typer.Option(None, "--json"),
             pcap: Optional[str] = typer.Option(None, "--pcap", help="Capture every switch port into pcapng files in this directory.")) -> None:
    """Real processes (needs root): goalkeeper and two tenants on a rack around the switch process."""
    from inswitch.apps.inaas.rack import run_on_rack

    if json_out:
        ensure_writable(json_out)
    res = run_on_rack(name, pcap=pcap)
    console = Console()
    for who in ("tenant_a", "tenant_b"):
        for step in res[who]:
            console.print(f"{who} request {step['seq']}: {sum(1 for x in step.get('status', []) if x == 1)}/20 done, "
                          f"{'goalkeeper' if step.get('via_goalkeeper') else 'switch'}, {step.get('rtt_us', 0):.0f} µs")
    console.print(f"goalkeeper: {res['goalkeeper']}")
    if json_out:
        write_json(json_out, res, indent=2)


def register(app: typer.Typer) -> None:
    app.add_typer(tenants_app, name="tenants")
