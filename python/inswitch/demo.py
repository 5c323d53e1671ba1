"""`inswitch demo` (what `make demo` runs): a rack of hosts around the software switch,
traffic through it, and what the switch counted — as a table, JSON and a plot.

In network-namespace mode (root) the hosts are real namespaces with kernel stacks: every
pair pings, then two UDP flows run at once (h1->h2, h3->h4) through the switch and, in the
same run, the same flows through a Linux bridge for comparison. Without root the rack runs
on UDP-tunnel ports with userspace hosts and the demo pings every pair.

By default the demo is an application through the switch with and without in-network
computing: MapReduce WordCount on a real text found on this machine (the licence texts
under /usr/share/common-licenses, Vim's documentation), in tcp, udp and switch mode (see
`inswitch.apps.wordcount.demo`). `inswitch demo --rack` runs the rack tour above instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from inswitch.cliopts import OUT_DIR, Float, Int, option
from inswitch.topology import control, netns
from inswitch.topology.rack import Rack
from inswitch.tables import show
from inswitch.topology.state import RackState, process_tag


def demo_rack() -> str:
    """The demo rack's name: `demo` and this process's pid in base 36 (see `process_tag`), so
    the leftover clean-up below never removes another run's rack."""
    return f"demo{process_tag()}"
FLOW_PORT = 9000


def _flows(st: RackState, pairs: list[tuple[int, int]], duration: float) -> list[dict[str, Any]]:
    """Run UDP flows src->dst concurrently (blaster in src's namespace, sink in dst's)."""
    py = sys.executable
    sinks, blasts = [], []
    for s, d in pairs:
        dh = st.hosts[d]
        sinks.append(subprocess.Popen(netns.netns_argv(dh.netns, [py, "-m", "inswitch.bench.traffic", "sink", "--bind", f"{dh.ip}:{FLOW_PORT}", "--duration", str(duration + 5), "--idle", "1"]), stdout=subprocess.PIPE, text=True))
    time.sleep(0.3)
    for s, d in pairs:
        sh, dh = st.hosts[s], st.hosts[d]
        blasts.append(subprocess.Popen(netns.netns_argv(sh.netns, [py, "-m", "inswitch.bench.traffic", "blast", "--dst", f"{dh.ip}:{FLOW_PORT}", "--payload", "18", "--duration", str(duration)]), stdout=subprocess.PIPE, text=True))
    out = []
    for (s, d), b, k in zip(pairs, blasts, sinks):
        sent = json.loads(b.communicate(timeout=duration + 30)[0].strip().splitlines()[-1])
        got = json.loads(k.communicate(timeout=duration + 30)[0].strip().splitlines()[-1])
        out.append({"flow": f"{st.hosts[s].name}->{st.hosts[d].name}", "sent": int(sent["sent"]), "received": int(got["packets"]), "pps": got["pps"]})
    return out


def _with_bridge(st: RackState, pairs: list[tuple[int, int]], duration: float) -> list[dict[str, Any]]:
    """The same flows with the switch-side veth ends on a kernel bridge instead of our switch."""
    br = f"{st.name}-br"
    netns.ip("link", "add", br, "type", "bridge")
    try:
        netns.write_sysctl_root(f"net.ipv6.conf.{br}.disable_ipv6", "1")
        for h in st.hosts:
            netns.ip("link", "set", h.switch_if, "master", br)
        netns.ip("link", "set", br, "up")
        return _flows(st, pairs, duration)
    finally:
        for h in st.hosts:
            netns.ip("link", "set", h.switch_if, "nomaster", check=False)
        netns.ip("link", "del", br, check=False)


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hosts = result["hosts"]
    n = len(hosts)
    has_flows = bool(result.get("flows"))
    fig, axes = plt.subplots(1, 3 if has_flows else 2, figsize=(15 if has_flows else 10, 4.2))
    rtt = [[float("nan")] * n for _ in range(n)]
    for p in result["pings"]:
        if p["rtt_ms"] is not None:
            rtt[p["src"]][p["dst"]] = p["rtt_ms"]
    ax = axes[0]
    im = ax.imshow(rtt, cmap="viridis")
    ax.set_xticks(range(n), hosts)
    ax.set_yticks(range(n), hosts)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    ax.set_title("ping RTT through the switch (ms)")
    fig.colorbar(im, ax=ax)
    ax = axes[1]
    ports = result["ports"]
    xs = range(len(ports))
    ax.bar([x - 0.2 for x in xs], [p["rx_packets"] for p in ports], 0.4, label="rx (into switch)")
    ax.bar([x + 0.2 for x in xs], [p["tx_packets"] for p in ports], 0.4, label="tx (out of switch)")
    ax.set_xticks(list(xs), [f"port {p['port']}\n{p['host']}" for p in ports])
    ax.set_ylabel("packets")
    ax.set_yscale("log")
    ax.set_title("per-port counters (switch registers)")
    ax.legend()
    if has_flows:
        ax = axes[2]
        flows = result["flows"]
        names = [f["flow"] for f in flows]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [f["pps"] / 1e3 for f in flows], 0.4, label="inswitch")
        ax.bar([x + 0.2 for x in xs], [f["pps"] / 1e3 for f in result["bridge_flows"]], 0.4, label="Linux bridge")
        ax.set_xticks(list(xs), names)
        ax.set_ylabel("received kpps (64-byte frames)")
        ax.set_title("concurrent UDP flows")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(hosts: int, duration: float, out_dir: Path, console: Console) -> dict[str, Any]:
    rack = Rack()
    name = demo_rack()
    rack.down(name)  # a leftover of a crashed run of this pid
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    try:
        with console.status(f"building a rack of {hosts} hosts around the switch"):
            st = rack.up(hosts, name=name, p4runtime="127.0.0.1:0", metrics="127.0.0.1:0")
        console.print(f"rack [bold]{name}[/bold] up in {st.mode} mode: {', '.join(f'{h.name}={h.ip}' for h in st.hosts)}; switch pid {st.switch.pid}, P4Runtime {st.switch.p4runtime}")
        result = {"mode": st.mode, "hosts": [h.name for h in st.hosts], "pings": []}
        with console.status("every host pings every other host through the switch"):
            for s in st.hosts:
                for d in st.hosts:
                    if s is d:
                        continue
                    r, _ = rack.ping(s.name, d.name, name=name, count=3, timeout=2.0)
                    rtt = min(r.rtts_ms) if r.rtts_ms else None
                    result["pings"].append({"src": s.index - 1, "dst": d.index - 1, "received": r.received, "sent": r.transmitted, "rtt_ms": rtt})
        if st.mode == "netns" and hosts >= 4:
            pairs = [(0, 1), (2, 3)]
            with console.status(f"two UDP flows through the switch for {duration:g} s"):
                result["flows"] = _flows(st, pairs, duration)
        counters = control.read_port_counters(st.switch.p4runtime, [h.port for h in st.hosts])
        metrics = control.scrape_metrics(st.switch.metrics)
        result["ports"] = [{"port": h.port, "host": h.name, **counters[h.port]} for h in st.hosts]
        result["drops"] = {m[1].get("reason", "?"): m[2] for m in metrics if m[0] == "inswitch_drops_total" and m[2] > 0}
        # Frames lost before the pipeline saw them (e.g. the AF_PACKET receive ring overran).
        result["port_io_drops"] = {f'{m[1].get("name", m[1].get("port"))}:{m[1].get("reason", "?")}': m[2] for m in metrics if m[0] == "inswitch_port_io_drops_total" and m[2] > 0}
        if result.get("flows"):
            # Same flows with the switch process stopped and a kernel bridge on its veths.
            from inswitch.topology import switchproc

            switchproc.stop(st.switch.pid, st.switch.ready_file, timeout=5.0)
            with console.status(f"the same flows through a Linux bridge for {duration:g} s"):
                result["bridge_flows"] = _with_bridge(st, [(0, 1), (2, 3)], duration)
    finally:
        rack.down(name)
    return result


def report(result: dict[str, Any], out_dir: Path, console: Console) -> None:
    pings_ok = sum(1 for p in result["pings"] if p["received"] == p["sent"])
    t = Table(title=f"ping through the switch: {pings_ok}/{len(result['pings'])} host pairs answered every ping")
    t.add_column("from \\ to")
    for h in result["hosts"]:
        t.add_column(h, justify="right")
    n = len(result["hosts"])
    grid = [["-"] * n for _ in range(n)]
    for p in result["pings"]:
        grid[p["src"]][p["dst"]] = f"{p['rtt_ms']:.2f} ms" if p["rtt_ms"] is not None else "lost"
    for i, h in enumerate(result["hosts"]):
        t.add_row(h, *grid[i])
    show(console, t)
    t = Table(title="per-port counters read from the switch's registers through P4Runtime")
    for c in ("port", "host", "rx packets", "rx bytes", "tx packets", "tx bytes"):
        t.add_column(c, justify="right")
    for p in result["ports"]:
        t.add_row(str(p["port"]), p["host"], f"{p['rx_packets']:,}", f"{p['rx_bytes']:,}", f"{p['tx_packets']:,}", f"{p['tx_bytes']:,}")
    show(console, t)
    if result.get("flows"):
        t = Table(title="concurrent UDP flows, 64-byte frames (received rate)")
        for c in ("flow", "inswitch kpps", "inswitch loss", "Linux bridge kpps", "bridge loss", "inswitch / bridge"):
            t.add_column(c, justify="right")
        for f, b in zip(result["flows"], result["bridge_flows"]):
            loss = lambda x: f"{1 - x['received'] / max(x['sent'], 1):.1%}"
            t.add_row(f["flow"], f"{f['pps'] / 1e3:.0f}", loss(f), f"{b['pps'] / 1e3:.0f}", loss(b), f"{f['pps'] / max(b['pps'], 1):.2f}")
        show(console, t)
    console.print(f"pipeline drops by reason: {result['drops'] or 'none'}")
    console.print(f"port I/O drops (frames lost before the pipeline, e.g. receive-ring overruns): {result.get('port_io_drops') or 'none'}")
    console.print(f"wrote {out_dir / 'demo.json'} and {out_dir / 'demo.png'}")


def register(app: typer.Typer) -> None:
    @app.command("demo", epilog="Examples:\n\n  inswitch demo\n\n  sudo inswitch demo --rack --hosts 4 --duration 3 --out out/demo\n")
    def demo_cmd(
        hosts: int = option(4, "--hosts", type=Int(2, 32), help="With --rack: hosts in the rack."),
        duration: float = option(3.0, "--duration", type=Float(0.1, 600), help="With --rack: seconds of UDP traffic per measurement."),
        out: str = option("out/demo", "--out", type=OUT_DIR, help="Directory for the demo's JSON and PNG."),
        rack_tour: bool = typer.Option(False, "--rack", help="The rack tour (pings, UDP flows, port counters) instead of WordCount."),
    ) -> None:
        """WordCount through the switch with and without in-network aggregation (or, with
        --rack, a rack around the switch, traffic through it, and what it counted)."""
        console = Console()
        out_dir = Path(out)
        if not rack_tour:
            from inswitch.apps.wordcount import demo as wc_demo

            raise typer.Exit(wc_demo.main(out_dir, console))
        try:
            result = run(hosts, duration, out_dir, console)
        except Exception as e:  # RackError and friends: one line, the rack is already down
            console.print(f"[red]demo failed:[/red] {e}")
            raise typer.Exit(1)
        (out_dir / "demo.json").write_text(json.dumps(result, indent=2))
        _plot(result, out_dir / "demo.png")
        report(result, out_dir, console)
        bad = [p for p in result["pings"] if p["received"] == 0]
        raise typer.Exit(1 if bad else 0)


