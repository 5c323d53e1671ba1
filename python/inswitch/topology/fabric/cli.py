"""`inswitch fabric ...`: bring a fabric of switches up from a topology (generator or
containerlab file), look at it, run commands in its hosts, take it down, export a topology.
Failures print one line (no traceback): exit 2 for bad options or topologies, 1 otherwise."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text as RichText

from inswitch.cliopts import JSON_PATH, OUT_DIR, OUT_FILE, RING_FRAMES, Choice, Float, Int, Text, argument, option
from inswitch.output import is_stdout, note_written, write_json
from inswitch.topology import restarts
from inswitch.topology.cli import report_ping
from inswitch.topology.errors import RackError
from inswitch.topology.fabric.fabric import DEFAULT_NAME, FABRIC_RING_FRAMES, Fabric, FabricStatus, status_json, udp_ends
from inswitch.topology.fabric.generators import load_spec, split_machines
from inswitch.topology.fabric.model import LinkProps, Topology, TopologyError, parse_link_props
from inswitch.topology.fabric.plan import MAX_FABRIC_NAME
from inswitch.topology.state import check_name
from inswitch.tables import show

console = Console()
err_console = Console(stderr=True)


def _topology(text: str) -> Topology:
    try:
        return load_spec(text)
    except RackError as e:
        raise ValueError(str(e)) from None


def _name(text: str) -> str:
    if not re.fullmatch(rf"[a-z][a-z0-9_]{{0,{MAX_FABRIC_NAME - 1}}}", text):
        raise ValueError(f"1-{MAX_FABRIC_NAME} characters a-z, 0-9, _ starting with a letter")
    return check_name(text)


def _bad_node() -> str:
    raise ValueError("a node name is letters, digits and _, starting with a letter")


def _link_default(text: str) -> LinkProps:
    vals: dict[str, str] = {}
    for part in text.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep or k not in ("delay", "jitter", "rate", "loss") or k in vals:
            raise ValueError("expected delay=T,jitter=T,rate=R,loss=P (each at most once)")
        vals[k] = v
    try:
        return parse_link_props(vals, "")
    except RackError as e:
        raise ValueError(str(e)) from None


TOPOLOGY = Text("leaf-spine:LEAVES,SPINES,HOSTS_PER_LEAF, fat-tree:K or a topology file", check=_topology,
                bad=("ring:3", "leaf-spine:1,1", "fat-tree:3", "/nonexistent.yml"))
#: The same check, keeping the text (for commands that bring their own fabric up later).
TOPOLOGY_SPEC = Text("leaf-spine:LEAVES,SPINES,HOSTS_PER_LEAF, fat-tree:K or a topology file",
                     check=lambda t: (_topology(t), t)[1], bad=("ring:3", "leaf-spine:1,1", "fat-tree:3", "/nonexistent.yml"))
NAME = Text(f"a fabric name (at most {MAX_FABRIC_NAME} characters a-z, 0-9, _; it prefixes interface names)", check=_name, bad=("Bad-Name", "x" * 20))
NODE = Text("a host of the fabric, e.g. h1", check=lambda t: t if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,23}", t) else _bad_node(),
            bad=("-x", "h 1", "1h"))
def _machine(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,23}", text):
        raise ValueError("a machine name is letters, digits and _, starting with a letter")
    return text


MACHINE = Text("a machine of the topology (its nodes' `machine`)", check=_machine,
               bad=("-m", "m 1", "1m"))
LINK_DEFAULT = Text("delay=T,jitter=T,rate=R,loss=P, e.g. delay=1ms,rate=100mbit", check=_link_default,
                    bad=("delay", "speed=1", "delay=soon", "loss=200%"))


def _fail(e: BaseException, code: int = 1) -> typer.Exit:
    err_console.print(RichText("error: ", style="red") + RichText(str(e)), soft_wrap=True, highlight=False)
    for note in getattr(e, "__notes__", []):
        err_console.print(f"  {note}", soft_wrap=True, highlight=False, markup=False)
    return typer.Exit(code)


def _render(s: FabricStatus) -> None:
    st = s.state
    alive = sum(sw.alive for sw in s.switches)
    console.print(f"fabric [bold]{st.name}[/bold] ({st.mode} mode): {len(s.switches)} switches ({alive} alive), {len(st.hosts)} hosts, "
                  f"{len(st.links)} links" + (f"; up in {st.timings['up_s']:.2f} s" if "up_s" in st.timings else ""))
    for r in restarts.read(st.restarts_file):
        back = f"forwarding again after {r['recovery_s']:.1f} s" if "forwarding_at" in r else r.get("gave_up") or r.get("error") or "restarting"
        console.print(f"restart: {r['switch']} died ({r['exit']}) at {time.strftime('%H:%M:%S', time.localtime(r['died_at']))}; {back}",
                      highlight=False)
    t = Table(title="Switch ports", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    udp = st.mode == "udp"
    ends = udp_ends(st) if udp else {}
    for col in ("switch", "pid", "P4Runtime (device)", "port", "UDP address > peer" if udp else "interface", "rx pkts", "rx bytes", "tx pkts", "tx bytes"):
        t.add_column(col, no_wrap=True, justify="right" if col.startswith(("rx", "tx", "pid")) else "left")
    for sw, run in zip(s.switches, st.switches):
        label = sw.name if sw.alive else f"[red]{sw.name} (not running)[/red]"
        for p, (pname, ifname) in enumerate(zip(run.plan.port_names, run.plan.ifaces)):
            c = (sw.counters or {}).get(p, {})
            pid = str(sw.pid) if sw.pid else f"on {run.plan.machine}" if run.remote else "-"
            t.add_row(label if p == 0 else "", pid if p == 0 else "", f"{sw.p4runtime} ({sw.device_id})" if p == 0 else "",
                      f"{pname} = {p}", " > ".join(ends[ifname]) if udp else ifname, *(str(c[k]) if k in c else "-" for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")))
    show(console, t)
    pt = Table(title="Programs", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    for col in ("switch", "program", "ingress passes", "egress passes", "drops (by reason)"):
        pt.add_column(col, no_wrap=col != "drops (by reason)", justify="right" if "passes" in col else "left")
    for sw in s.switches:
        for prog, c in sw.programs.items():
            drops = ", ".join(f"{r} {n}" for r, n in sorted(c["drops"].items())) or "-"
            pt.add_row(sw.name, prog, str(c["ingress_passes"]), str(c["egress_passes"]), drops)
    if pt.row_count:
        show(console, pt)
    h = Table(title="Hosts", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    for col in ("host", "ip", "mac", "gateway", "switch:port", "UDP NIC > switch port" if udp else "namespace"):
        h.add_column(col, no_wrap=True)
    for hp in st.hosts:
        if hp.name not in s.host_present:
            name = f"{hp.name} (on {hp.machine})"  # another machine's host
        else:
            name = hp.name if s.host_present[hp.name] else f"[red]{hp.name} (missing)[/red]"
        h.add_row(name, f"{hp.ip}/{hp.prefix_len}", hp.mac, hp.gateway, f"{hp.switch}:{hp.port}",
                  f"{hp.tunnel_nic} > {hp.tunnel}" if udp else hp.netns)
    show(console, h)
    shaped = [ln for ln in st.links if not ln.props.is_empty()]
    if shaped:
        lt = Table(title="Shaped links (tc on each end)", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
        for col in ("link", "properties", "qdiscs"):
            lt.add_column(col, no_wrap=col != "qdiscs")
        for ln in shaped:
            q = "; ".join(f"{k}: {v}" for k, v in s.qdiscs.items() if k in (ln.a_if, ln.b_if, f"{ln.a_netns}:{ln.a_if}", f"{ln.b_netns}:{ln.b_if}"))
            lt.add_row(ln.endpoints, ln.props.describe(), q)
        show(console, lt)
    for sw in s.switches:
        if sw.error:
            console.print(f"[yellow]{sw.name}:[/yellow] {sw.error}", soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    fab = typer.Typer(name="fabric", help="Many switches, each its own process, with hosts and links between them.",
                      no_args_is_help=True)
    app.add_typer(fab, name="fabric")

    @fab.command("up", epilog="Examples:\n\n  inswitch fabric up --topology leaf-spine:2,2,2 --name fab\n\n  inswitch fabric up --topology fat-tree:4 --name ft --link-default rate=100mbit\n")
    def up_cmd(
        topology: Any = option(..., "--topology", "-t", type=TOPOLOGY, help="The topology."),
        name: Any = option(DEFAULT_NAME, "--name", "-n", type=NAME, help="Fabric name."),
        link_default: Any = option(None, "--link-default", type=LINK_DEFAULT,
                                   help="Link properties for every link that does not set its own."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Capture every switch's ports into DIR/SWITCH/port{N}.pcapng (readable while the fabric runs)."),
        machine: Optional[str] = option(None, "--machine", "-m", type=MACHINE,
                                        help="A topology across machines: build this machine's part (run it on every machine); "
                                             "links to other machines are kernel VXLAN links to their underlay addresses."),
        emulate_machines: bool = typer.Option(False, "--emulate-machines",
                                              help="A topology across machines: build every machine's part here, each machine a "
                                                   "network namespace with its underlay address, VXLAN links between them."),
        mode: str = option("auto", "--mode", type=Choice("auto", "netns", "udp"),
                           help="auto: netns if root, else udp; netns: namespaces and veth pairs (root); udp: every link a pair "
                                "of UDP sockets on loopback and hosts userspace stacks, no privileges."),
        udp_base: Optional[int] = option(None, "--udp-base", type=Int(1024, 65_535),
                                         help="UDP mode: UDP port of the first link end; link k's ends are BASE+2k and BASE+2k+1 "
                                              "(default: a free range)."),
        ring_frames: int = option(FABRIC_RING_FRAMES, "--ring-frames", type=RING_FRAMES,
                                  help="Every switch's receive-ring slots per port (`switch --ring-frames`: 6.4 MiB per port "
                                       "at 4096; fewer save memory but lose bursts a loaded machine makes)."),
    ) -> None:
        """Create hosts and links, start one switch process per switch, program the routing."""
        topo: Topology = topology
        if machine and emulate_machines:
            raise typer.BadParameter("give --machine (one machine's part) or --emulate-machines (all here), not both",
                                     param_hint="--machine")
        try:
            st = Fabric().up(topo, name=name, link_default=link_default or LinkProps(), pcap=pcap, machine=machine,
                             emulate_machines=emulate_machines, mode=mode, udp_base=udp_base, ring_frames=ring_frames)
        except KeyboardInterrupt:
            err_console.print("interrupted; everything `up` had made was removed")
            raise typer.Exit(130)
        except TopologyError as e:  # the topology and the options do not fit: a bad option
            raise _fail(e, 2)
        except RackError as e:
            raise _fail(e)
        part = f" (machine {st.machine}'s part)" if st.machine else " (machines emulated)" if st.emulated else ""
        part += " (UDP-tunnel mode)" if st.mode == "udp" else ""
        console.print(f"[green]fabric {st.name} is up{part}[/green] in {st.timings['up_s']:.2f} s: {len(st.switches)} switches, "
                      f"{len(st.hosts)} hosts, {len(st.links)} links", highlight=False)
        for m, addr in sorted(st.underlay.items()):
            vx = [ln for ln in st.links if ln.vni is not None and m in (ln.a_machine, ln.b_machine)]
            console.print(f"  machine {m}: underlay {addr}, {len(vx)} VXLAN links (UDP 4789)", highlight=False)
        for sw in st.switches:
            if sw.remote:
                console.print(f"  {sw.plan.name:<8} on machine {sw.plan.machine}: P4Runtime {sw.p4runtime} (device {sw.plan.device_id})",
                              highlight=False, soft_wrap=True)
                continue
            ports = sw.ports if st.mode == "udp" else ",".join(sw.plan.ifaces)
            console.print(f"  {sw.plan.name:<8} pid {sw.pid}  P4Runtime {sw.p4runtime} (device {sw.plan.device_id})  "
                          f"ports {ports}", highlight=False, soft_wrap=True)
        if pcap:
            console.print(f"captures: {Path(pcap).resolve()}/SWITCH/port{{N}}.pcapng", highlight=False, soft_wrap=True)
        mine = [h for h in st.hosts if st.machine is None or h.machine == st.machine]
        h0 = mine[0]
        h1 = next((h for h in reversed(st.hosts) if h is not h0), h0)
        if st.mode == "udp":
            console.print(f"try: inswitch fabric ping --name {st.name} {h0.name} {h1.name}")
        else:
            console.print(f"try: inswitch fabric exec --name {st.name} {h0.name} -- ping -c1 {h1.ip}")

    @fab.command("down", epilog="Examples:\n\n  inswitch fabric down --name fab\n")
    def down_cmd(name: Any = option(DEFAULT_NAME, "--name", "-n", type=NAME, help="Fabric name.")) -> None:
        """Stop every switch and remove the namespaces, links and state (also after a crash)."""
        try:
            rep = Fabric().down(name)
        except RackError as e:
            raise _fail(e)
        if not rep.found:
            console.print(f"no fabric named {name!r}; nothing to do")
            return
        console.print(f"[green]fabric {name} is down[/green]: stopped {len(rep.stopped)} switch processes; "
                      f"removed {len(rep.removed)} objects")

    @fab.command("status", epilog="Examples:\n\n  inswitch fabric status --name fab\n\n  inswitch fabric status --name fab --json - | jq .switches\n")
    def status_cmd(name: Any = option(DEFAULT_NAME, "--name", "-n", type=NAME, help="Fabric name."),
                   json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the status as JSON (- prints it instead of the tables).")) -> None:
        """Switches (alive, P4Runtime, per-port and per-program counters), hosts and link shaping."""
        try:
            s = Fabric().status(name)
        except RackError as e:
            raise _fail(e)
        if json_out:
            write_json(json_out, status_json(s))
        if not is_stdout(json_out):
            _render(s)
            note_written(console, json_out)
        if not all(sw.alive for sw in s.switches):
            raise typer.Exit(1)

    @fab.command("exec", epilog="Examples:\n\n  inswitch fabric exec --name fab h1 -- ping -c1 10.0.2.1\n")
    def exec_cmd(
        host: str = argument(..., type=NODE, help="A host of the fabric (h1)."),
        command: List[str] = argument(..., type=Text("a command word"), help="The command and its arguments, after `--`."),
        name: Any = option(DEFAULT_NAME, "--name", "-n", type=NAME, help="Fabric name."),
    ) -> None:
        """Run a command in a host's namespace; exits with the command's exit code."""
        if command[:1] == ["--"]:
            command = command[1:]
        try:
            cp = Fabric().exec(host, command, name=name)
        except RackError as e:
            raise _fail(e)
        raise typer.Exit(cp.returncode)

    @fab.command("ping", epilog="Examples:\n\n  inswitch fabric ping --name fab h1 h4\n\n  inswitch fabric ping h1 h2 --count 10 --timeout 1\n")
    def ping_cmd(
        src: str = argument(..., type=NODE, help="Sending host (h1)."),
        dst: str = argument(..., type=NODE, help="Destination host (h2)."),
        count: int = option(3, "--count", "-c", type=Int(1, 100_000), help="Echo requests to send."),
        timeout: float = option(2.0, "--timeout", "-W", type=Float(0.01, 3600), help="Seconds to wait for each reply."),
        name: Any = option(DEFAULT_NAME, "--name", "-n", type=NAME, help="Fabric name."),
    ) -> None:
        """Ping one host from another across the fabric (both modes; in udp mode the hosts are userspace stacks)."""
        try:
            res, out = Fabric().ping(src, dst, name=name, count=count, timeout=timeout)
        except RackError as e:
            raise _fail(e)
        report_ping(console, src, dst, res, out)

    @fab.command("export", epilog="Examples:\n\n  inswitch fabric export --topology fat-tree:4 --out ft.clab.yml\n")
    def export_cmd(
        topology: Any = option(..., "--topology", "-t", type=TOPOLOGY, help="The topology."),
        out: Optional[str] = option(None, "--out", "-o", type=OUT_FILE, help="Write here instead of printing."),
        machines: Optional[int] = option(None, "--machines", type=Int(2, 16),
                                         help="Spread the nodes over machines m1..mN (leaves round-robin, hosts with their leaf), "
                                              "with placeholder underlay addresses 192.0.2.N to replace on real machines."),
    ) -> None:
        """Write a topology (e.g. a generator's) as a containerlab topology file."""
        if machines:
            try:
                topology = split_machines(topology, machines)
            except RackError as e:
                raise _fail(e, 2)
        text = topology.to_yaml()
        if out:
            try:
                Path(out).write_text(text)
            except OSError as e:
                raise _fail(e)
            err_console.print(f"wrote {out} ({len(topology.switches)} switches, {len(topology.hosts)} hosts, "
                              f"{len(topology.links)} links)", highlight=False)
        else:
            typer.echo(text, nl=False)
