"""`inswitch tenants run` and `inswitch tenants ledger`: INaaS applications as tenants of
one switch (python/inswitch/apps/inaas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch.apps.inaas.adapters import APPS
from inswitch.apps.inaas.runner import ledger_path, run_tenants, save_ledger
from inswitch.cliopts import JSON_PATH, OUT_DIR, RACK_NAME, SEED, Choice, Float, Int, Text, Words, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show
from inswitch.topology.fabric.cli import TOPOLOGY_SPEC

RUN_EXAMPLES = """Examples:

  inswitch tenants run --apps kv,sparse,dense,bloom,paxos --instances 2 --attacker --json out/t.json

  inswitch tenants run --apps kv,bloom --scheduler fq --loss 0.01 --subscribe kv

  sudo inswitch tenants run --real --apps kv,dense,bloom --instances 2 --json out/real.json

  sudo inswitch tenants run --real --apps paxos --loss 0.02 --paxos-crash-at 0.4

  sudo inswitch tenants run --real --apps paxos --loss 0.02 --paxos-crash-at 0.4 --paxos-zombie

  sudo inswitch tenants run --real --apps paxos --paxos-crash-at 0.4 --paxos-zombie --paxos-zombie-fights --dup 0.2 --reorder 0.2

  sudo inswitch tenants run --real --apps paxos --loss 0.02 --paxos-crash-at 0.4 --paxos-zombie --paxos-zombie-duels

  sudo inswitch tenants run --real --apps kv,sparse,bloom --attacker --attack-during inaas --pcap out/caps

  inswitch tenants ledger
"""

LEDGER_EXAMPLES = """Examples:

  inswitch tenants ledger

  inswitch tenants ledger --json - | jq '.ledger[0]'
"""

RACK_EXAMPLES = """Examples:

  sudo inswitch tenants rack --name inaas1 --json out/inaas-rack.json

  sudo inswitch tenants rack --fabric leaf-spine:2,1,3 --name iafab
"""

tenants_app = typer.Typer(help="INaaS: applications as tenants of one in-network service.", no_args_is_help=True)


def _print_ledger(ledger: list[dict], console: Console) -> None:
    t = Table(title="INaaS ledger (from the switch's own counters)")
    for c in ("tenant", "plan", "ALU ops", "leases", "register·s", "held·s measured", "register·s full term", "charge", "goalkeeper = switch"):
        t.add_column(c)

    def num(x: Any) -> str:
        return "n/a" if x is None else f"{x:.6f}"

    for line in ledger:
        # Ledgers written before holds were measured have no such keys: their
        # register-seconds were the full-term figure.
        t.add_row(
            line["tenant"],
            line["plan"],
            str(line["alu_ops"]),
            str(line["leases"]),
            f"{line['register_seconds']:.6f}",
            num(line.get("held_s_measured")),
            num(line.get("register_seconds_full_term", line["register_seconds"])),
            f"{line['charge']:.9f}",
            "yes" if line["adds_up"] else "[red]no[/red]",
        )
    show(console, t)
    notes = sorted({line.get("pricing", "full term: leases x min(T, run)") for line in ledger})
    for n in notes:
        console.print(f"register·s charged: {n}", highlight=False, soft_wrap=True)


def _ms(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.1f} ms"


@tenants_app.command("run", epilog=RUN_EXAMPLES)
def run_cmd(
    apps: Any = option(None, "--apps", type=Words(list(APPS), "all"), help="Applications to run as tenants, comma-separated (default: all)."),
    instances: int = option(1, "--instances", type=Int(1, 4), help="Concurrent instances of each application."),
    scheduler: str = option("inaas", "--scheduler", type=Choice("inaas", "fcfs", "fq"), help="Switch memory scheduler."),
    loss: float = option(0.0, "--loss", type=Float(0, 0.5), help="Packet loss probability on the tenants' links."),
    attacker: bool = typer.Option(False, "--attacker", help="Add an attacker tenant (forged uids, replays, random keys)."),
    subscribe: Any = option(None, "--subscribe", type=Words(list(APPS)), help="Applications on the subscription plan (priority on switch memory), comma-separated (default: none)."),
    budget: int = option(512, "--budget", type=Int(16, 32_768), help="Registers per segment the scheduler divides among the tenants."),
    full: bool = typer.Option(False, "--full", help="Larger workloads (default: quick sizes)."),
    seed: int = option(1, "--seed", type=SEED, help="Seed of the workloads and the loss."),
    real: bool = typer.Option(False, "--real/--sim", help="--real: every tenant a process on its own host of a rack around the switch process, wall clock (needs root); --sim (default): the in-process model on simulated microseconds."),
    rack_name: str = option("inaasreal", "--name", type=RACK_NAME, help="With --real: the rack's name (namespaces NAME-h1..)."),
    attack_during: str = option("after", "--attack-during", type=Choice("after", "inaas"), help="With --real --attacker: attack after the tenants' phases (as the model does), or during the INaaS phase, while the tenants work."),
    pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="With --real: capture every switch port into pcapng files in this directory (readable while the run goes on)."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
    paxos_crash_at: Optional[float] = option(None, "--paxos-crash-at", type=Float(0, 1, lo_open=True, hi_open=True), help="With --real: the paxos tenant's leader is SIGKILLed after proposing this fraction of its values; a backup process takes over with a higher ballot (safety checked on every learner's log)."),
    paxos_zombie: bool = typer.Option(False, "--paxos-zombie", help="With --real --paxos-crash-at: SIGSTOP the leader at its crash point instead, SIGCONT it once the backup decided (a zombie with its stale state and ballot, which proposes fresh values), SIGKILL it 300 ms later; the acceptors must refuse it."),
    paxos_zombie_fights: bool = typer.Option(False, "--paxos-zombie-fights", help="With --paxos-zombie: the zombie ignores the acceptors' refusals and keeps proposing and resending at its old ballot until it is killed (it never steps down); the acceptors must refuse it all along."),
    paxos_zombie_duels: bool = typer.Option(False, "--paxos-zombie-duels", help="With --paxos-zombie: a duel of ballots. The zombie, refused, backs off and takes over again above the ballot that refused it (at most 3 times, then it defers); the backup does the same when refused, without limit; the logs must agree."),
    dup: float = option(0.0, "--dup", type=Float(0, 0.5), help="With --real: probability that a switch port duplicates a frame it receives (the switch's --fault, as --loss)."),
    reorder: float = option(0.0, "--reorder", type=Float(0, 0.5), help="With --real: probability that a switch port holds a frame it receives back until the port's next frame passed (the switch's --fault)."),
) -> None:
    """Run applications concurrently as tenants: speedup against host-only, correctness,
    and the ledger (kept for `inswitch tenants ledger`)."""
    console = console_for(json_out)
    names = list(apps or APPS)
    if paxos_zombie and not real:
        raise typer.BadParameter("only with --real and --paxos-crash-at (the model's zombie: `_native.paxos_run(zombie=True)`)", param_hint="--paxos-zombie")
    if paxos_crash_at is not None and not real:
        raise typer.BadParameter("only with --real (the model's crash runs: `_native.paxos_run`, tests/test_inaas_paxos.py)", param_hint="--paxos-crash-at")
    if paxos_zombie_fights and not real:
        raise typer.BadParameter("only with --real and --paxos-zombie (the model's zombie fights: `_native.paxos_run(zombie=True)`)", param_hint="--paxos-zombie-fights")
    if paxos_zombie_duels and not real:
        raise typer.BadParameter("only with --real and --paxos-zombie (the model's duel of ballots: `_native.paxos_run(zombie=True)`)", param_hint="--paxos-zombie-duels")
    for hint, v in (("--dup", dup), ("--reorder", reorder)):
        if v > 0 and not real:
            raise typer.BadParameter("only with --real (the model's tenants see loss only; Paxos's faults: `_native.paxos_run`)", param_hint=hint)
    if real:
        from inswitch.apps.inaas.real import RealRunError, check_args

        try:
            check_args(names, attacker, paxos_crash_at, paxos_zombie, paxos_zombie_fights, paxos_zombie_duels)
        except RealRunError as e:
            Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
    else:
        if pcap is not None:
            raise typer.BadParameter("captures need switch ports: only with --real (the model has none)", param_hint="--pcap")
        if attack_during != "after":
            raise typer.BadParameter("the model attacks after the tenants' phases; --attack-during inaas needs --real", param_hint="--attack-during")
    if attack_during != "after" and not attacker:
        raise typer.BadParameter("there is no attacker: add --attacker", param_hint="--attack-during")
    subs_list = list(subscribe or [])
    if any(a not in names for a in subs_list):
        raise typer.BadParameter(f"{', '.join(a for a in subs_list if a not in names)} is not among --apps", param_hint="--subscribe")
    if budget < len(names) * instances:
        raise typer.BadParameter(f"{budget} registers cannot hold {len(names) * instances} tenants", param_hint="--budget")
    with console.status("tenants: starting") as st:
        subs = tuple(subs_list)
        if real:
            from inswitch.apps.inaas.real import RealRunError, run_tenants_real

            from inswitch.topology.errors import RackError

            try:
                res = run_tenants_real(names, instances, scheduler, loss, quick=not full, seed=seed, progress=lambda s: st.update(f"tenants: {s}"),
                                       subscribers=subs, budget=budget, name=rack_name, attacker=attacker,
                                       attack_during=attack_during, pcap=pcap, paxos_crash_at=paxos_crash_at,
                                       paxos_zombie=paxos_zombie, paxos_zombie_fights=paxos_zombie_fights, paxos_zombie_duels=paxos_zombie_duels, dup=dup,
                                       reorder=reorder)
            except RealRunError as e:  # a bad combination, found before the rack is up
                Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
                raise typer.Exit(2)
            except (RackError, RuntimeError) as e:  # torn down already; say why in one line
                Console(stderr=True).print(f"[red]error:[/red] tenants run --real: {' '.join(str(e).split())}", highlight=False, soft_wrap=True)
                raise typer.Exit(1)
        else:
            res = run_tenants(names, instances, scheduler, loss, attacker, quick=not full, seed=seed, progress=lambda s: st.update(f"tenants: {s}"), subscribers=subs, budget=budget)
    what = "real processes in a rack, wall clock" if real else "model: in-process, simulated µs"
    t = Table(title=f"INaaS tenants ({scheduler}, {instances}x, loss {loss}) — {what}")
    for c in ("app", "metric", "INaaS", "host-only", "speedup", "correct"):
        t.add_column(c)
    for name, f in res["apps"].items():
        t.add_row(name, f["metric"], f"{f['inaas']:.4g} {f['unit']}", f"{f['host_only']:.4g} {f['unit']}", f"{f['speedup']:.2f}", "yes" if f["correct"] else "[red]NO[/red]")
    show(console, t)
    console.print(f"cross-tenant violations: {res['cross_tenant_violations']}")
    console.print(f"mode: {res['mode']}" + (f" (load average {res['real']['load_average'][0]:.2f})" if real else ""), highlight=False, soft_wrap=True)
    for name, f in res["apps"].items():
        if "bloom_fp_theory" in f:
            rate = "n/a (no lookup answered by the switch)" if f["bloom_fp_rate"] is None else f"{f['bloom_fp_rate']:.2%}"
            console.print(
                f"{name}: false positives answered by the switch {rate} of {f['bloom_fp_probes_answered_by_switch']} lookups; "
                f"theory (1-e^(-kn/m))^k {f['bloom_fp_theory']:.2%} (n={f['bloom_elements']}, m={f['bloom_bits']}, k={f['bloom_hashes']}); "
                f"paper {f['bloom_fp_paper']:.1%}",
                highlight=False,
                soft_wrap=True,
            )
    if (res.get("real") or {}).get("dup") or (res.get("real") or {}).get("reorder"):
        console.print(f"switch faults on every port (receive): {res['real']['fault']}", highlight=False, soft_wrap=True)
    for name, f in res["apps"].items():
        if "dml_path" in f:
            line = f"{name}: Table II's DML row from {f['dml_path']}"
            if "dml_accuracy_switch" in f:
                lease = f.get("allreduce_lease") or {}

                def num(v: Any, fmt: str) -> str:  # a phase that did not finish has no figure
                    return "n/a" if v is None else format(v, fmt)

                line += (f"; accuracy {num(f['dml_accuracy_switch'], '.2%')} through the switch, {num(f['dml_accuracy_exact_sum'], '.2%')} with the exact sum, "
                         f"max_weight_diff {num(f['max_weight_diff'], '.3g')} ({f['dml_steps']} steps, {f['dml_workers']} workers); "
                         f"job {lease.get('job')} leased {num(lease.get('held_s'), '.2f')} s, after it {lease.get('unknown_job_drops_during_host_phase')} "
                         f"allreduce packets refused (unknown job)")
                if "forged_port_drops" in lease:
                    line += f", during it {lease['forged_port_drops']} from port {lease['forged_port']} (not the job's)"
                if "forged_worker_drops" in lease:
                    line += (f", {lease['forged_worker_drops']} as worker {lease['forged_worker_id']} from port {lease['forged_worker_port']} "
                             f"(a job's port, not that worker's)")
            console.print(line, highlight=False, soft_wrap=True)
    for name, f in res["apps"].items():
        if "paxos_crash_at" in f:
            console.print(
                f"{name}: leader {'SIGSTOPped as a zombie, then SIGKILLed' if f.get('zombie') else 'SIGKILLed'} (signal {f['killed_by_signal']}) after {f['values_by_dead_leader']} values; took over: {f['took_over']} "
                f"(detected {_ms(f['detection_ms'])}, phase 1 done {_ms(f['phase1_done_ms'])}, first decision {_ms(f['takeover_ms'])} after the kill); "
                f"delivered {f['delivered']}, gap-free: {f['gap_free']}",
                highlight=False,
                soft_wrap=True,
            )
        if f.get("zombie"):
            ending = (f"fought: still at ballot {f['zombie_ballot_at_kill']} when killed" if f.get("zombie_fights")
                      else (f"duelled: {f['zombie_duel_rounds']} takeovers above a refusal (ballot {f['zombie_ballot_at_kill']} at its kill), the survivor "
                            f"{f['survivor_duel_rounds']} (ballot {f['survivor_final_ballot']}); {f['ballot_rounds']} phase-1 rounds in all") if f.get("zombie_duels")
                      else f"stepped down to ballot {f['zombie_stepped_down_to']} {_ms(f['zombie_stepped_down_ms'])} after resuming")
            console.print(
                f"{name}: zombie leader (ballot {f['zombie_ballot']}) SIGCONTed {_ms(f['zombie_resumed_ms'])} after its SIGSTOP: sent {f['zombie_frames_sent']} frames "
                f"({f['zombie_retransmissions']} retransmissions, {f['zombie_values_proposed']} fresh values), {f['zombie_refusals']} refusals by the acceptors, "
                f"{ending}; its values decided: {f['zombie_values_decided']}"
                + (" (deposed before its stop: the backup suspected it while it stalled, so it had nothing stale left to send)"
                   if f.get("zombie_deposed_before_stop") else ""),
                highlight=False,
                soft_wrap=True,
            )
        for v in f.get("violations") or []:
            console.print(f"[red]{name}: safety violation:[/red] {v}", highlight=False, soft_wrap=True)
    if res["attack"] is not None:
        a = res["attack"]
        console.print(f"attacker detected: {a['detected']} after {a['detection_time_us']} µs; values leaked: {a['attacker_values_leaked']}")
    _print_ledger(res["ledger"], console)
    ledger = save_ledger(res)
    console.print(f"ledger kept in {ledger} (`inswitch tenants ledger` prints it)", highlight=False, soft_wrap=True)
    if real and res["real"]["pcap"]:
        console.print(f"captures: {res['real']['pcap']}/port{{N}}.pcapng (`tshark -r` with `inswitch wireshark install` decodes INaaS)", highlight=False, soft_wrap=True)
    if json_out:
        write_json(json_out, res, indent=2)
        note_written(console, json_out)
    if res["cross_tenant_violations"] or not all(f["correct"] for f in res["apps"].values()):
        raise typer.Exit(1)


@tenants_app.command("ledger", epilog=LEDGER_EXAMPLES)
def ledger_cmd(
    path: Optional[str] = option(None, "--path", type=Text("a ledger file"), help="Ledger file to print (default: the one the last `tenants run` kept, in the state directory)."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Also write the ledger as JSON."),
) -> None:
    """Print the bill of the last `inswitch tenants run` (from any working directory)."""
    console = console_for(json_out)
    p = Path(path) if path else ledger_path()
    if not p.is_file():
        Console(stderr=True).print(f"[red]error:[/red] no ledger at {p} (run `inswitch tenants run` first)", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    try:
        doc = json.loads(p.read_text())
        ledger = doc["ledger"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        Console(stderr=True).print(f"[red]error:[/red] {p} is not a ledger: {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    _print_ledger(ledger, console)
    if doc.get("mode"):
        console.print(f"mode of that run: {doc['mode']}", highlight=False, soft_wrap=True)
    console.print(f"read {p}", highlight=False, soft_wrap=True)
    if json_out:
        write_json(json_out, doc, indent=2)
        note_written(console, json_out)


@tenants_app.command("rack", epilog=RACK_EXAMPLES)
def rack_cmd(
    name: str = option("inaas1", "--name", type=RACK_NAME, help="Rack name (namespaces NAME-h1..h3)."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
    pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Capture every switch port into pcapng files in this directory."),
    fabric: Optional[str] = option(None, "--fabric", type=TOPOLOGY_SPEC, help="Run on the ToR of the three hosts inside a fabric (e.g. leaf-spine:2,1,3; its first leaf with three hosts runs forward,inaas); --name is the fabric's (at most 6 characters)."),
) -> None:
    """Real processes (needs root): the goalkeeper and two tenants on a rack around the
    switch process (or on their ToR inside a fabric)."""
    from inswitch.apps.inaas.rack import run_on_rack
    from inswitch.topology.fabric.plan import MAX_FABRIC_NAME

    if fabric is not None and pcap:
        raise typer.BadParameter("--pcap captures a rack's switch: not with --fabric", param_hint="--pcap")
    if fabric is not None and len(name) > MAX_FABRIC_NAME:
        raise typer.BadParameter(f"a fabric name has at most {MAX_FABRIC_NAME} characters", param_hint="--name")
    try:
        res = run_on_rack(name, pcap=pcap, fabric=fabric)
    except ValueError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    console = console_for(json_out)
    for who in ("tenant_a", "tenant_b"):
        for step in res[who]:
            console.print(f"{who} request {step['seq']}: {sum(1 for x in step.get('status', []) if x == 1)}/20 done, "
                          f"{'goalkeeper' if step.get('via_goalkeeper') else 'switch'}, {step.get('rtt_us', 0):.0f} µs")
    console.print(f"goalkeeper: {res['goalkeeper']}")
    if json_out:
        write_json(json_out, res, indent=2)
        note_written(console, json_out)


def register(app: typer.Typer) -> None:
    app.add_typer(tenants_app, name="tenants")
