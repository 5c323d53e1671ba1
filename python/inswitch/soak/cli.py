"""`inswitch soak`: WordCount, NetSHa, the KV workload and INaaS tenants together under loss,
duplication and reordering, one switch restart in the middle (see `inswitch.soak.run`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from inswitch.cliopts import JSON_PATH, OUT_FILE, SEED, Float, Words, option
from inswitch.output import console_for, is_stdout, note_written, write_json
from inswitch.soak.workloads import WORKLOADS
from inswitch.tables import show

EXAMPLES = """Examples:

  sudo inswitch soak --minutes 10 --loss 0.01 --json bench/soak.json --png bench/soak.png

  sudo inswitch soak --minutes 1 --workloads kv,wordcount
"""


def soak_cmd(
    minutes: float = option(10.0, "--minutes", type=Float(0.2, 1440), help="How long the workloads run (rounds start until then)."),
    loss: float = option(0.01, "--loss", type=Float(0, 0.2), help="Probability of loss, of duplication and of reordering, each, on every switch port."),
    workloads: Any = option(list(WORKLOADS), "--workloads", type=Words(list(WORKLOADS), "all"), help="Workloads to run together, comma-separated."),
    sample: float = option(5.0, "--sample", type=Float(0.2, 600), help="Seconds between two samples of the switch's memory and file descriptors."),
    warmup: Optional[float] = option(None, "--warmup", type=Float(0, 3600), help="Seconds after the start (and the restart) left out of the memory slope (default: 60, or a fifth of a shorter soak)."),
    bound: float = option(1.0, "--bound", type=Float(0, 1000), help="Largest resident-memory slope, in MB/min, that counts as flat."),
    seed: int = option(7, "--seed", type=SEED, help="Seed of the fault injection."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result as JSON."),
    png: Optional[str] = option(None, "--png", type=OUT_FILE, help="Plot the switch's resident memory and file descriptors over time, the restart marked."),
) -> None:
    """Run the workloads together for a while under faults, kill -9 the switch in the middle,
    and check every round, the switch's memory and descriptors, and the teardown (root)."""
    from inswitch.soak import run as soak

    if "kv" not in workloads:
        raise typer.BadParameter("must include kv: its rack's switch is the one measured and restarted", param_hint="--workloads")
    console = console_for(json_out)
    if os.geteuid() != 0:
        console.print("[red]error:[/red] the soak builds racks of network namespaces: run as root")
        raise typer.Exit(2)
    secs = minutes * 60
    cfg = soak.SoakConfig(minutes=minutes, loss=loss, workloads=list(workloads), sample_s=min(sample, max(0.5, secs / 20)),
                          warmup_s=warmup if warmup is not None else min(60.0, secs / 5), rss_bound_mb_per_min=bound, seed=seed)
    console.print(f"soak {cfg.minutes:g} min: {', '.join(cfg.workloads)}; faults {cfg.fault} on every port; kill -9 of the KV rack's switch at "
                  f"{cfg.minutes * (cfg.restart_at or 0):g} min", highlight=False, soft_wrap=True)

    def progress(s: dict[str, Any]) -> None:
        rounds = "  ".join(f"{w} {ok}/{n}" for w, (ok, n) in s["rounds"].items())
        rss = "-" if s["rss_mb"] is None else f"{s['rss_mb']:.1f} MB"
        console.print(f"[{s['elapsed_s']:6.0f}/{s['total_s']:.0f} s] switch gen {s['generation']} rss {rss} fds {s['fds']}  rounds correct: {rounds}",
                      highlight=False, soft_wrap=True)

    out = soak.Soak(cfg, progress).run()
    render(out, console)
    if png:
        plot(out, Path(png))
    if json_out:
        write_json(json_out, out, indent=1)
    note_written(console, png, json_out if json_out and not is_stdout(json_out) else None)
    if not out["ok"]:
        raise typer.Exit(1)


def render(out: dict[str, Any], console: Any) -> None:
    t = Table(title=f"soak: {out['duration_s']:g} s, faults {out['config']['fault']}")
    for c in ("workload", "rounds", "correct", "failed", "through the restart", "verdict"):
        t.add_column(c, no_wrap=True)
    for w, v in out["workloads"].items():
        thru = sum(1 for r in v["results"] if r.get("switch_restarts"))
        t.add_row(w, str(v["rounds"]), str(v["correct_rounds"]), str(len(v["failed_rounds"])), str(thru),
                  "ok" if v["rounds"] and v["correct_rounds"] == v["rounds"] and v["exit"] == 0 else "[red]FAIL[/red]")
    show(console, t)
    m, r, td = out["switch_memory"], out["restart"], out["teardown"]
    s = Table(title="the KV rack's switch and the long-lived processes")
    for c in ("measure", "value", "verdict"):
        s.add_column(c, no_wrap=True)
    ok = lambda b: "-" if b is None else "ok" if b else "[red]FAIL[/red]"  # noqa: E731
    for g, v in m["by_generation"].items():
        sl, fg = v["rss_slope_mb_per_min"], v["fd_growth"]
        s.add_row(f"switch gen {g}: RSS slope after warm-up", f"{sl} MB/min ({v['rss_mb_first']} -> {v['rss_mb_last']} MB, "
                  f"{v['samples_after_warmup']} samples)", ok(None if sl is None else abs(sl) <= m["rss_bound_mb_per_min"]))
        s.add_row(f"switch gen {g}: fd growth (floor, 2nd half - 1st)", str(fg), ok(None if fg is None else fg <= 0))
    for k, v in out["host_fds"].items():
        if v.get("judged_on") == "rounds":
            if not v.get("rounds_judged"):
                s.add_row(f"{k}: fds after each round", "no round reported", ok(None))
                continue
            s.add_row(f"{k}: fds after each round", f"{v['first']} -> {v['last']} over {v['rounds_judged']} rounds (growth {v['growth']}; "
                      f"sampled {v['sampled_min']}..{v['sampled_max']} in rounds; RSS {v['rss_mb_first']} -> {v['rss_mb_last']} MB)",
                      ok(None if v["growth"] is None else v["growth"] <= 0))
        else:
            s.add_row(f"{k}: fds", f"{v['first']} -> {v['last']} (max {v['max']}, growth {v['growth']})", ok(None if v["growth"] is None else v["growth"] <= 0))
    if r.get("killed"):
        s.add_row("restart", f"kill -9 at {r['at_s']} s, new switch seen {r['back_after_s']} s later (pid {r['pid']} -> {r['new_pid']})",
                  ok(r.get("new_pid") is not None))
    s.add_row("teardown", f"{len(td['leftover_netns_and_links'])} namespaces/links, {len(td['leftover_processes'])} processes, "
              f"{len(td['leftover_rack_states'])} rack states left ({td['processes_checked']} processes checked)", ok(td["clean"]))
    show(console, s)
    for w, v in out["workloads"].items():
        for f in v["failed_rounds"][:3]:
            console.print(f"[red]{w} round {f['n']} failed:[/red] {({k: x for k, x in f.items() if k not in ('start', 'end')})}", highlight=False, soft_wrap=True)
    console.print(f"correct: {out['correct']}  memory flat: {out['rss_flat']}  fds flat: {out['fds_flat']}  torn down: {out['torn_down']}", highlight=False)


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ss = [s for s in out["samples"] if s["rss_mb"] is not None]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    t = [s["t"] / 60 for s in ss]
    a1.plot(t, [s["rss_mb"] for s in ss], ".-", ms=3, label="switch RSS")
    a2.plot(t, [s["fds"] for s in ss], ".-", ms=3, label="switch fds")
    for k in sorted({k for s in out["samples"] for k in s["hosts"]}):
        pts = [(s["t"] / 60, s["hosts"][k]) for s in out["samples"] if s["hosts"].get(k) is not None]
        a2.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=k)
    r = out["restart"]
    if r.get("killed"):
        for a in (a1, a2):
            a.axvline(r["at_s"] / 60, color="red", ls="--", lw=1, label="kill -9 of the switch" if a is a1 else None)
    m = out["switch_memory"]
    a1.set_title(f"soak {out['duration_s'] / 60:.1f} min, faults {out['config']['fault']}: "
                 f"RSS slope {m['rss_slope_mb_per_min']} MB/min (bound {m['rss_bound_mb_per_min']})", fontsize=9)
    a1.set_ylabel("switch resident memory (MB)")
    a2.set_ylabel("open file descriptors")
    a2.set_xlabel("time (min)")
    a1.legend(fontsize=7)
    a2.legend(fontsize=6, ncol=3)
    fig.text(0.01, 0.01, "no paper value: the issue asks for a flat RSS after warm-up and no fd growth", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    app.command("soak", epilog=EXAMPLES)(soak_cmd)
