"""`inswitch switch` (run a switch: data plane + P4Runtime + metrics) and `inswitch p4info`
(write the P4Info and device config a P4Runtime client needs for a program set)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from inswitch import native
from inswitch.cliopts import CORES, OUT_DIR, OUT_FILE, PROGRAMS, RING_FRAMES, TARGET, Address, Choice, Float, Int, Text, argument, option
from inswitch.output import replace_json
from inswitch.p4rt.tls import OPTIONS as TLS_OPTIONS
from inswitch.p4rt.tls import TlsFiles, pem_file
from inswitch.tables import show

DEFAULT_P4RUNTIME = "127.0.0.1:9559"
DEFAULT_METRICS = "127.0.0.1:9100"


class UsageError(ValueError):
    """Bad command-line input: reported in one line, exit status 2."""


def _ports(text: str) -> str:
    """The port spec's shape (the data plane checks the rest when it opens the ports: a
    missing or malformed capture is a one-line error there, exit status 2)."""
    kind, sep, rest = text.strip().partition(":")
    if kind not in ("memory", "udp", "veth", "xdp", "pcap") or not sep or not rest:
        raise ValueError("expected memory:N, udp:BASEPORT:N, udp:HOST:BASEPORT:N, udp:HOST:PORT>PEERHOST:PEERPORT,.., veth:IF1,IF2,.., xdp:IF1,IF2,.. or pcap:IN:OUT,IN:OUT,..")
    if kind == "memory" and not (rest.isdigit() and 1 <= int(rest) <= 4096):
        raise ValueError("memory:N takes 1..4096 ports")
    if kind == "udp" and ">" in rest:  # udp:HOST:PORT>PEERHOST:PEERPORT,...
        for i, entry in enumerate(rest.split(","), 1):
            own, gt, peer = entry.partition(">")
            if not gt or not all(x.rpartition(":")[1] and x.rpartition(":")[2].isdigit() for x in (own, peer)):
                raise ValueError(f"port {i} {entry!r}: expected HOST:PORT>PEERHOST:PEERPORT")
    elif kind == "udp":
        own, at, peer = rest.partition("@")  # udp:[HOST:]BASEPORT:N[@PEERHOST:PEERBASE]
        if not all(x.isdigit() for x in own.split(":")[-2:]) or (at and not peer.rpartition(":")[2].isdigit()):
            raise ValueError("udp ports need a numeric BASEPORT and N (and a numeric PEERBASE after @)")
    if kind == "pcap":
        for i, pair in enumerate(rest.split(","), 1):
            parts = pair.split(":")
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"port {i} {pair!r}: expected IN:OUT (file paths without ':' or ',')")
    return text.strip()


def _fault(text: str) -> str:
    parse_fault(text)
    return text


PORTS = Text("memory:N, udp:[HOST:]BASEPORT:N[@PEERHOST:PEERBASE] (with a peer, port i accepts datagrams only from PEERHOST:PEERBASE+i), udp:HOST:PORT>PEERHOST:PEERPORT,.. (each port's own address and fixed peer), veth:IF1,IF2,.. (AF_PACKET), xdp:IF1,IF2,.. (AF_XDP; AF_PACKET where XDP is unavailable or INSWITCH_XDP=off) or pcap:IN:OUT,IN:OUT,.. (file ports: replay IN, write OUT)", check=_ports, bad=("bogus:4", "memory:x", "memory:0", "udp:x:4", "pcap:x", "pcap:a:b:c"))
#: A PEM file given to --tls-cert, --tls-key or --tls-ca.
PEM = Text("a readable PEM file", check=pem_file, bad=("/nonexistent.pem",))
#: The fault injector's spec (`--fault` of `switch` and `rack up`).
FAULT = Text("loss=P,dup=P,reorder=P,seed=N (P in [0, 1])", check=_fault, bad=("loss=2", "loss=nan", "bogus=1", "seed=-1", "loss"))


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT can be reached from this machine only."""
    import ipaddress

    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def exposure_warnings(p4rt_addr: str, metrics_addr: Optional[str], tls: bool) -> list[str]:
    """What a listener beyond loopback exposes (listening there is the user's choice; saying
    what it means is ours)."""
    out = []
    if not is_loopback(p4rt_addr) and not tls:
        out.append(f"P4Runtime listens on {p4rt_addr} without TLS: anyone who can reach it can program "
                   f"the switch (give {TLS_OPTIONS} for mutual TLS)")
    if metrics_addr is not None and not is_loopback(metrics_addr):
        out.append(f"/metrics listens on {metrics_addr}: anyone who can reach it reads the switch's counters")
    return out


def write_ready_file(path: Path, doc: dict[str, Any]) -> None:
    """Write atomically, so a reader never sees half a file."""
    replace_json(path, doc)


def parse_fault(text: str) -> tuple[float, float, float, int]:
    """`loss=P,dup=P,reorder=P,seed=N` (any subset; missing ones are 0, seed 1) for the
    ports' fault injector."""
    vals: dict[str, float] = {"loss": 0.0, "dup": 0.0, "reorder": 0.0, "seed": 1}
    for part in filter(None, (x.strip() for x in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k not in vals:
            raise UsageError(f"{part!r} is not one of loss=P, dup=P, reorder=P, seed=N")
        try:
            vals[k] = int(v) if k == "seed" else float(v)
        except ValueError:
            raise UsageError(f"{k}={v!r} is not a number") from None
        if k != "seed" and not 0.0 <= vals[k] <= 1.0:  # (NaN fails this too)
            raise UsageError(f"{k}={v} is outside 0..1")
        if k == "seed" and not 0 <= vals[k] < 2**64:
            raise UsageError(f"seed={v} is outside 0..2**64-1")
    return (vals["loss"], vals["dup"], vals["reorder"], int(vals["seed"]))


def run_switch(programs: str, ports: str, p4runtime: str, pipes: int, pcap: Optional[str], metrics: str, device_id: int, ready_file: Optional[str], out: Console, err: Console, fault: Optional[str] = None,
               tls: TlsFiles = TlsFiles(), generation: int = 1, pcap_size: Optional[float] = None, l2: str = "learn", replay_wait: float = 0.0, port_qdisc: bool = False,
               target: Optional[str] = None, xdp_busy_poll: bool = False, cores: Optional[list[int]] = None,
               ring_frames: Optional[int] = None) -> int:
    """Run until SIGINT/SIGTERM, or, with file ports (`pcap:IN:OUT,...`), until every input
    has been replayed (starting `replay_wait` s after the switch serves, so a controller can
    install entries) and the pipeline is empty: the outputs are then complete. Returns the
    exit status: 0 after a clean stop or a finished replay, 2 for bad input, 1 when the
    switch cannot start (e.g. an address in use)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    ready = Path(ready_file) if ready_file else None
    if ready is not None and ready.exists():
        ready.unlink()  # a stale file from an earlier run must not look like this one
    dp: Any = None
    server: Any = None
    msrv: Any = None
    status = 0
    try:
        # The options were checked where the command declares them (PROGRAMS, Address, ...);
        # callers from Python pass checked values too.
        names = native.split_programs(programs)
        p4rt_addr = p4runtime
        metrics_addr = None if metrics == "off" else metrics
        if tls.enabled and not (tls.cert and tls.key and tls.ca):
            raise UsageError(f"{TLS_OPTIONS} go together: give all three or none")
        if pcap:
            Path(pcap).mkdir(parents=True, exist_ok=True)

        from inswitch import _native
        from inswitch.switchd.metrics import MetricsServer, collector
        from inswitch.switchd.server import SwitchServer

        try:
            dp = _native.Dataplane(names, ports, pipes=pipes, pcap_dir=pcap, fault=parse_fault(fault) if fault else None,
                                   pcap_max_bytes=int(pcap_size * 1e6) if pcap_size else None, hold_replay=True,
                                   **({"port_qdisc": True} if port_qdisc else {}), **({"target": target} if target else {}),
                                   **({"xdp_busy_poll": True} if xdp_busy_poll else {}), **({"cores": cores} if cores else {}),
                                   **({"rx_ring_frames": ring_frames} if ring_frames is not None else {}))
        except ValueError as e:
            raise UsageError(str(e)) from None
        server = SwitchServer(dp, p4rt_addr, device_id, tls=tls, target=target)
        for w in exposure_warnings(p4rt_addr, metrics_addr, server.tls):
            err.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
        learning = l2 == "learn" and server.enable_learning()
        if metrics_addr is not None:
            info = {"programs": ",".join(names), "ports": ports, "device_id": device_id, "version": _version(),
                    "cores": ",".join(map(str, dp.cores)) or "unpinned"}
            from inswitch.trace import Sessions
            from inswitch.ui.web import local_view, switch_handler, trace_post_handler

            traces = Sessions(dp, lambda: server.device.pipeline.index)
            msrv = MetricsServer(metrics_addr, collector(dp, server.stats, info, lambda: {
                "inswitch_p4runtime_streams": ("Open P4Runtime StreamChannels (controller sessions)", server.service.streams),
                "inswitch_switch_generation": ("Which start of this switch this is: 1, then one more per restart by the rack's supervisor", generation)}),
                other=switch_handler(local_view(server, dp), traces), post=trace_post_handler(traces))
        server.start()
        if msrv is not None:
            msrv.start()
        port_names = list(dp.port_names())
        rings = list(dp.port_rx_rings())
        _summary(out, names, ports, port_names, dp.num_pipes, server.address, msrv.address if msrv else None, device_id, pcap, pcap_size, list(dp.cores), rings)
        if learning:
            out.print("L2: learning MACs from the mac_learn digest and flooding unknown destinations, until a P4Runtime controller writes", soft_wrap=True)
        if ready is not None:
            write_ready_file(ready, {
                "pid": os.getpid(),
                "p4runtime": server.address,
                "metrics": msrv.address if msrv else None,
                "device_id": device_id,
                "programs": names,
                "ports": port_names,
                "pipes": dp.num_pipes,
                "cores": list(dp.cores),
                "generation": generation,
                # Per port: its receive ring as opened (AF_PACKET ports; null for others).
                "rx_rings": [None if r is None else {"slots": r[0], "bytes": r[1]} for r in rings],
            })
        if dp.replay_done() is None:
            while not stop.wait(0.5):
                pass
        elif not stop.wait(replay_wait):
            dp.start_replay()
            while not dp.replay_done():
                if stop.wait(0.01):
                    break
            else:
                c = [p["io"] or {} for p in json.loads(dp.counters_json())["ports"]]
                out.print(f"replay done: {sum(p.get('rx_packets', 0) for p in c)} frames replayed, {sum(p.get('tx_packets', 0) for p in c)} written", highlight=False)
    except UsageError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        status = 2
    except OSError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        status = 1
    finally:
        if msrv is not None:
            msrv.stop()
        if server is not None:
            server.stop()
        if dp is not None:
            dp.stop()  # other threads still inside a call get an "unavailable" error
        if ready is not None and status == 0 and ready.exists():
            ready.unlink()
        for s, h in old.items():
            signal.signal(s, h)
    return status


def _version() -> str:
    import inswitch

    return inswitch.__version__


def _summary(out: Console, names: list[str], spec: str, port_names: list[str], pipes: int, p4rt: str, metrics: Optional[str], device_id: int, pcap: Optional[str] = None, pcap_size: Optional[float] = None,
             cores: Optional[list[int]] = None, rings: Optional[list[Any]] = None) -> None:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("programs", ", ".join(names))
    shown = ", ".join(f"{i}={n}" for i, n in enumerate(port_names[:16])) + (" …" if len(port_names) > 16 else "")
    t.add_row("ports", f"{spec} ({len(port_names)}: {shown}), {pipes} pipe{'s' if pipes != 1 else ''}")
    sized = [r for r in rings or [] if r is not None]
    if sized:
        slots = sorted({r[0] for r in sized})
        t.add_row("rings", f"receive ring of {'/'.join(map(str, slots))} slots per AF_PACKET port, "
                           f"{sum(r[1] for r in sized) / 2**20:.1f} MB mapped in all (--ring-frames sets it)")
    t.add_row("cores", ", ".join(f"pipe {i} on core {c}" for i, c in enumerate(cores)) if cores else "pipe threads not pinned (--cores pins them)")
    t.add_row("P4Runtime", f"{p4rt} (device {device_id})")
    t.add_row("metrics", f"http://{metrics}/metrics" if metrics else "off")
    t.add_row("web view", f"http://{metrics}/ (read-only; packet traces: inswitch trace --metrics {metrics})" if metrics else "off")
    if pcap:
        t.add_row("captures", f"{Path(pcap).resolve()}/port{{N}}.pcapng, flushed after every batch"
                  + (f"; a new file port{{N}}.{{k}}.pcapng every {pcap_size:g} MB" if pcap_size else ""))
    out.print("[bold green]inswitch switch running[/bold green] (SIGINT or SIGTERM stops it)")
    show(out, t)


SWITCH_EXAMPLES = """Examples:

  inswitch switch --program forward --ports memory:4

  inswitch switch --program forward,daiet --ports veth:s1,s2,s3 --p4runtime 127.0.0.1:9559 --metrics off

  inswitch switch --ports udp:127.0.0.1:40000:4 --p4runtime 127.0.0.1:0 --ready-file /tmp/sw.json

  inswitch switch --ports pcap:p0-in.pcap:p0-out.pcapng,p1-in.pcap:p1-out.pcapng --replay-wait 2
"""

P4INFO_EXAMPLES = """Examples:

  inswitch p4info forward,daiet --out daiet.p4info.txt --device-config daiet.bin

  inswitch p4info netsha

  inswitch p4info forward,inaas --target tofino1 --out inaas-t1.p4info.txt
"""


def register(app: typer.Typer) -> None:
    @app.command("switch", epilog=SWITCH_EXAMPLES)
    def switch_cmd(
        program: str = option("forward", "--program", "-p", type=PROGRAMS, help="Program name, or several joined by commas (loaded together)."),
        ports: str = option("memory:4", "--ports", type=PORTS, help="The switch's ports."),
        p4runtime: str = option(DEFAULT_P4RUNTIME, "--p4runtime", type=Address(), help="Where the P4Runtime server listens."),
        pipes: int = option(1, "--pipes", type=Int(1, 64), help="Pipes (data-plane threads); the ports are split among them."),
        cores: Any = option(None, "--cores", type=CORES, metavar="LIST", help="Pin pipe i's thread to the i-th core listed (one core per pipe); default: not pinned."),
        pcap: Optional[str] = option(None, "--pcap", type=OUT_DIR, help="Directory for per-port packet captures (port{N}.pcapng, readable while the switch runs)."),
        pcap_size: Optional[float] = option(None, "--pcap-size", type=Float(0.001, 1_000_000),
                                            help="Start a new capture file (port{N}.1.pcapng, ...) when one reaches this many MB; default: one file per port."),
        metrics: str = option(DEFAULT_METRICS, "--metrics", type=Address(off_ok=True), help="Where Prometheus /metrics and the read-only web view (/) are served, or off."),
        device_id: int = option(1, "--device-id", type=Int(0, 2**64 - 1), help="P4Runtime device id."),
        ready_file: Optional[str] = option(None, "--ready-file", type=OUT_FILE, help="Write JSON (pid, addresses, port names) here once serving; removed on a clean stop."),
        fault: Optional[str] = option(None, "--fault", type=FAULT, help="Inject seeded faults on every port's receive side."),
        l2: str = option("learn", "--l2", type=Choice("learn", "controller"),
                         help="learn: with the forward program, learn MACs and flood unknown destinations until a P4Runtime controller writes; controller: forward only what a controller installs."),
        tls_cert: Optional[str] = option(None, "--tls-cert", type=PEM, help="Serve P4Runtime over TLS with this certificate (with --tls-key and --tls-ca)."),
        tls_key: Optional[str] = option(None, "--tls-key", type=PEM, help="The private key of --tls-cert."),
        tls_ca: Optional[str] = option(None, "--tls-ca", type=PEM, help="Accept only P4Runtime clients whose certificate this CA signed."),
        generation: int = option(1, "--generation", type=Int(1, 2**31), help="Which start of this switch this is (set by the rack's supervisor when it restarts one; in the ready file and /metrics)."),
        port_qdisc: bool = typer.Option(False, "--port-qdisc", help="veth ports send through the interface's qdisc (so `tc` shaping on a port applies to what the switch sends) instead of bypassing it (xdp ports then fall back to AF_PACKET)."),
        target: Optional[str] = option(None, "--target", "-t", type=TARGET,
                                       help="Refuse to load the programs unless they fit this target (tofino1, tofino2, unbounded, switchagg-fpga); default: the model's own limits (unbounded)."),
        xdp_busy_poll: bool = typer.Option(False, "--xdp-busy-poll", help="xdp ports ask the kernel to busy-poll their sockets (SO_PREFER_BUSY_POLL; costs CPU, cuts latency)."),
        ring_frames: Optional[int] = option(None, "--ring-frames", type=RING_FRAMES,
                                            help="Receive-ring slots per veth (AF_PACKET) port, rounded up to whole 64 KiB blocks; "
                                                 "default 4096 (6.4 MiB per port at a 1500-byte MTU). Fewer slots, less memory; a burst "
                                                 "longer than the ring while the switch is off its core is lost (counted as rx_full)."),
        replay_wait: float = option(0.0, "--replay-wait", type=Float(0, 3600), help="With pcap: ports, seconds to wait after starting before replaying (time for a controller to install entries); the switch exits once every input is replayed and the pipeline is empty."),
    ) -> None:
        """Run a software switch: the data plane over PORTS, a P4Runtime server and a
        metrics endpoint, until SIGINT or SIGTERM."""
        code = run_switch(program, ports, p4runtime, pipes, pcap, metrics, device_id, ready_file, Console(), Console(stderr=True), fault=fault, pcap_size=pcap_size, l2=l2,
                          tls=TlsFiles(cert=tls_cert, key=tls_key, ca=tls_ca), generation=generation, port_qdisc=port_qdisc, replay_wait=replay_wait, target=target,
                          xdp_busy_poll=xdp_busy_poll, cores=cores, ring_frames=ring_frames)
        raise typer.Exit(code)

    @app.command("p4info", epilog=P4INFO_EXAMPLES)
    def p4info_cmd(
        programs: str = argument(..., type=PROGRAMS, help="Program name, or several joined by commas."),
        out: Optional[str] = option(None, "--out", type=OUT_FILE, help="Write the P4Info (protobuf text format) here instead of printing it."),
        device_config: Optional[str] = option(None, "--device-config", type=OUT_FILE, help="Also write the device config (the p4_device_config bytes) here."),
        target: Optional[str] = option(None, "--target", "-t", type=TARGET,
                                       help="The switch's target, which sizes some programs (inaas: segments per pass); default: unbounded, as `inswitch switch`."),
    ) -> None:
        """The P4Info and device config of a program set: what a P4Runtime client (e.g.
        p4runtime-shell's FwdPipeConfig) needs to set the switch's pipeline."""
        err = Console(stderr=True)
        names = native.split_programs(programs)
        from inswitch.p4rt.p4info import device_config as make_device_config
        from inswitch.p4rt.p4info import p4info_for, to_text

        p4 = p4info_for(names, target)
        text = to_text(p4)
        if out:
            Path(out).write_text(text)
            err.print(f"wrote P4Info of {','.join(names)} ({len(p4.tables)} tables, {len(p4.actions)} actions, {len(p4.registers)} registers, {len(p4.digests)} digests) to {out}", highlight=False, soft_wrap=True)
        else:
            typer.echo(text, nl=False)
        if device_config:
            Path(device_config).write_bytes(make_device_config(names))
            err.print(f"wrote device config to {device_config}", highlight=False, soft_wrap=True)
