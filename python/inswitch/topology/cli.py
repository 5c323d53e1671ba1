"""`inswitch rack ...`: build a rack of hosts around one inswitch switch, look at it, run
commands in its hosts and take it down. Failures print one clear line (no traceback)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from inswitch.cliopts import JSON_PATH, OUT_DIR, PROGRAMS, RACK_NAME, RING_FRAMES, Address, Choice, Float, Int, argument, option
from inswitch.cliopts import Text as TextOpt
from inswitch.output import is_stdout, note_written, write_json
from inswitch.switchd.cli import FAULT
from inswitch.topology.errors import RackError
from inswitch.topology.state import MAX_HOSTS
from inswitch.topology.rack import DEFAULT_NAME, Rack, RackStatus
from inswitch.tables import show

console = Console()
err_console = Console(stderr=True)

NAME_OPT = option(DEFAULT_NAME, "--name", "-n", type=RACK_NAME, help="Rack name (prefixes its namespaces and interfaces).")
#: `exec` and `ping` take the rack from the host's name (`isw-h1`) when --name is absent.
NAME_FROM_HOST = option(None, "--name", "-n", type=RACK_NAME, help="Rack name (default: from the host's name, else isw).")


def _host(text: str) -> str:
    import re

    if not re.fullmatch(r"([a-z][a-z0-9_]*-)?h[0-9]{1,3}", text):
        raise ValueError("expected hN or RACK-hN, e.g. h1 or isw-h1")
    return text


HOST = TextOpt("a host, hN or RACK-hN", check=_host, bad=("bogus", "h", "isw-x1"))


def _subnet(text: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise ValueError(str(e)) from None
    return text


UP_EXAMPLES = """Examples:

  inswitch rack up --hosts 4

  inswitch rack up --hosts 3 --name lab --program forward,daiet --p4runtime 127.0.0.1:0 --metrics 127.0.0.1:0

  inswitch rack up --hosts 2 --mode udp --fault loss=0.01,seed=3
"""


def _fail(e: BaseException, code: int = 1) -> typer.Exit:
    err_console.print(Text("error: ", style="red") + Text(str(e)), soft_wrap=True, highlight=False)
    for note in getattr(e, "__notes__", []):
        err_console.print(f"  {note}", soft_wrap=True, highlight=False, markup=False)
    return typer.Exit(code)


def report_ping(out_console: Console, src: str, dst: str, res: Any, out: str) -> None:
    """A `rack ping` / `fabric ping` result: ping's own output (namespaces) or the
    userspace stack's count (UDP mode); exits 0 when every request was answered."""
    if out:
        out_console.print(out.rstrip(), highlight=False, markup=False)
    else:
        rtt = f", rtt avg {sum(res.rtts_ms) / len(res.rtts_ms):.3f} ms" if res.rtts_ms else ""
        out_console.print(f"{src} -> {dst}: {res.received}/{res.transmitted} replies{rtt}", highlight=False)
    raise typer.Exit(0 if res.received == res.transmitted else 1)


def _render_status(s: RackStatus) -> None:
    st = s.state
    alive = "[green]alive[/green]" if s.switch_alive else "[red]not running[/red]"
    console.print(f"rack [bold]{st.name}[/bold] ({st.mode} mode, {len(st.hosts)} hosts, subnet {st.subnet}, "
                  f"programs {','.join(st.programs)})")
    console.print(f"switch pid {st.switch.pid} {alive}  P4Runtime {st.switch.p4runtime}  "
                  f"metrics http://{st.switch.metrics}/metrics  log {st.switch.log}", soft_wrap=True)
    for r in st.extra.get("restarts", []):
        how = (f"back in {r['recovery_s']} s (serving and forwarding again)" if "forwarding_at" in r
               else r.get("gave_up") or r.get("error") or "not back")
        console.print(f"[yellow]switch restarted[/yellow]: generation {r['generation']}, the previous one ended "
                      f"({r['exit']}) at {time.strftime('%H:%M:%S', time.localtime(r['died_at']))}; {how}",
                      soft_wrap=True, highlight=False)
    t = Table(title="Hosts and switch ports", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))
    faults = s.fault_drops or {}
    show_faults = any(v for d in faults.values() for v in d.values()) or "--fault" in st.switch.argv
    cols = ["host", "ip", "mac", "port", "rx pkts", "rx bytes", "tx pkts", "tx bytes"] + (["rx fault drops", "tx fault drops"] if show_faults else [])
    for col in cols:
        t.add_column(col, no_wrap=True, justify="right" if col.startswith(("rx", "tx", "port")) else "left")
    for h in st.hosts:
        c = {**(s.counters or {}).get(h.port, {}), **faults.get(h.port, {})}
        label = h.name if s.host_present.get(h.name) else f"[red]{h.name} (missing)[/red]"
        keys = ["rx_packets", "rx_bytes", "tx_packets", "tx_bytes"] + (["rx_fault", "tx_fault"] if show_faults else [])
        t.add_row(label, h.ip, h.mac, str(h.port), *(str(c[k]) if k in c else "?" for k in keys))
    show(console, t)
    if s.counters is None or (show_faults and s.fault_drops is None):
        console.print("?: not read (see below)")
    if st.mode == "netns":
        console.print(f"host hN is namespace {st.name}-hN (eth0), cabled to switch port N-1 ({st.name}-sN)")
    else:
        console.print(f"host hN attaches to switch port N-1 at UDP {st.hosts[0].tunnel} + (N-1)")
    if s.counters_error:
        console.print(f"[yellow]counters unavailable:[/yellow] {s.counters_error}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    rack_app = typer.Typer(name="rack", help="A rack of hosts (network namespaces, or UDP tunnels without root) around one switch.",
                           no_args_is_help=True)
    app.add_typer(rack_app, name="rack")

    @rack_app.command("up", epilog=UP_EXAMPLES)
    def up_cmd(
        hosts: int = option(..., "--hosts", type=Int(1, MAX_HOSTS), help="Number of hosts."),
        name: str = NAME_OPT,
        program: str = option("forward", "--program", type=PROGRAMS, help="Program(s) the switch runs, joined by commas."),
        p4runtime: Optional[str] = option(None, "--p4runtime", type=Address(), help="Where the switch serves P4Runtime (default: 127.0.0.1:9559, or any free port if that is taken)."),
        metrics: Optional[str] = option(None, "--metrics", type=Address(), help="Where the switch serves /metrics (default: 127.0.0.1:9100, or any free port if that is taken)."),
        subnet: str = option("10.0.0.0/24", "--subnet", type=TextOpt("an IPv4 subnet, e.g. 10.0.0.0/24", check=_subnet, bad=("bogus", "10.0.0.0/33")), help="The hosts' subnet: host i gets its i-th address."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Capture every port to pcapng files in this directory (readable while the rack runs)."),
        pcap_size: Optional[float] = option(None, "--pcap-size", type=Float(0.001, 1_000_000),
                                            help="Start a new capture file when one reaches this many MB; default: one file per port."),
        mode: str = option("auto", "--mode", type=Choice("auto", "netns", "udp"), help="auto: netns if root, else udp; netns: network namespaces and veth pairs; udp: UDP tunnels, no privileges."),
        udp_base: Optional[int] = option(None, "--udp-base", type=Int(1024, 65_535 - MAX_HOSTS), help="UDP mode: tunnel port of switch port 0 (default: a free range)."),
        fault: Optional[str] = option(None, "--fault", type=FAULT, help="Seeded faults on every switch port's receive side."),
        ring_frames: Optional[int] = option(None, "--ring-frames", type=RING_FRAMES,
                                            help="The switch's receive-ring slots per AF_PACKET port (veth ports, or xdp ports where AF_XDP is "
                                                 "unavailable; `switch --ring-frames`; default 4096)."),
    ) -> None:
        """Create the hosts, start the switch and fill its MAC table."""
        try:
            with console.status(f"rack {name}: planning") as status:
                def step(msg: str) -> None:
                    console.print(f"  {msg}", soft_wrap=True, highlight=False)  # a line per step: visible when piped too
                    status.update(f"rack {name}: {msg}")

                st = Rack().up(hosts, name=name, programs=program, p4runtime=p4runtime, metrics=metrics,
                               subnet=subnet, pcap=pcap, mode=mode, udp_base=udp_base, fault=fault,  # type: ignore[arg-type]
                               pcap_size=pcap_size, progress=step, ring_frames=ring_frames)
        except KeyboardInterrupt as e:
            notes = getattr(e, "__notes__", [])
            if notes:
                err_console.print("interrupted; " + " ".join(notes), soft_wrap=True, highlight=False, markup=False)
                raise typer.Exit(130)
            err_console.print("interrupted; everything `up` had made was removed")
            raise typer.Exit(130)
        except RackError as e:
            raise _fail(e)
        console.print(f"[green]rack {st.name} is up[/green]: {len(st.hosts)} hosts ({st.mode} mode), "
                      f"switch pid {st.switch.pid}, P4Runtime {st.switch.p4runtime}, metrics {st.switch.metrics}"
                      + (f", faults {fault}" if fault else ""))
        for h in st.hosts:
            where = h.netns if st.mode == "netns" else f"udp {h.tunnel}"
            console.print(f"  {h.name}  {h.ip:<15} {h.mac}  port {h.port}  {where}")
        if pcap:
            console.print(f"  captures: {Path(pcap).resolve()} (one pcapng file per switch port)", highlight=False, soft_wrap=True)
        if st.mode == "netns":
            console.print(f"try: inswitch rack exec {st.name}-h1 -- ping -c1 h2")

    @rack_app.command("down", epilog="Examples:\n\n  inswitch rack down --name lab\n")
    def down_cmd(name: str = NAME_OPT) -> None:
        """Stop the switch and remove the rack's namespaces, interfaces and state (works after crashes too)."""
        try:
            rep = Rack().down(name)
        except RackError as e:
            raise _fail(e)
        if not rep.found:
            console.print(f"no rack named {name!r}; nothing to do")
            return
        stopped = f"stopped switch pid {', '.join(map(str, rep.stopped))}" if rep.stopped else "switch was not running"
        console.print(f"[green]rack {name} is down[/green]: {stopped}; removed {len(rep.removed)} objects")

    @rack_app.command("status", epilog="Examples:\n\n  inswitch rack status --name lab\n\n  inswitch rack status --name lab --json - | jq .counters\n")
    def status_cmd(name: str = NAME_OPT,
                   json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the status as JSON (- prints it instead of the table).")) -> None:
        """Hosts, whether the switch is alive, and per-port counters read through P4Runtime."""
        try:
            s = Rack().status(name)
        except RackError as e:
            raise _fail(e)
        if json_out:
            write_json(json_out, {"state": asdict(s.state), "switch_alive": s.switch_alive,
                                  "switch_generation": s.state.extra.get("generation", 1),
                                  "switch_restarts": s.state.extra.get("restarts", []),
                                  "host_present": s.host_present, "counters": s.counters,
                                  "fault_drops": s.fault_drops, "counters_error": s.counters_error})
        if not is_stdout(json_out):
            _render_status(s)
            note_written(console, json_out)
        if not s.switch_alive:
            raise typer.Exit(1)

    @rack_app.command("exec", epilog="Examples:\n\n  inswitch rack exec h1 -- ping -c1 h2\n\n  inswitch rack exec lab-h2 -- ip addr\n")
    def exec_cmd(
        host: str = argument(..., type=HOST, help="The host to run in: h1, or isw-h1 (the rack named in the host)."),
        command: List[str] = argument(..., type=TextOpt("a command word"), help="The command and its arguments, after `--`."),
        name: Optional[str] = NAME_FROM_HOST,
    ) -> None:
        """Run a command inside a host's namespace; exits with the command's exit code."""
        if command[:1] == ["--"]:
            command = command[1:]
        try:
            cp = Rack().exec(host, command, name=name)
        except RackError as e:
            raise _fail(e)
        raise typer.Exit(cp.returncode)

    @rack_app.command("ping", epilog="Examples:\n\n  inswitch rack ping h1 h2\n\n  inswitch rack ping lab-h1 h3 --count 10 --timeout 1\n")
    def ping_cmd(
        src: str = argument(..., type=HOST, help="Sending host (h1)."),
        dst: str = argument(..., type=HOST, help="Destination host (h2)."),
        count: int = option(3, "--count", "-c", type=Int(1, 100_000), help="Echo requests to send."),
        timeout: float = option(2.0, "--timeout", "-W", type=Float(0.01, 3600), help="Seconds to wait for each reply."),
        name: Optional[str] = NAME_FROM_HOST,
    ) -> None:
        """Ping one host from another through the switch (both modes)."""
        try:
            res, out = Rack().ping(src, dst, name=name, count=count, timeout=timeout)
        except RackError as e:
            raise _fail(e)
        report_ping(console, src, dst, res, out)
