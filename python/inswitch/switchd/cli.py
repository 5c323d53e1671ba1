"""`inswitch switch` (run a switch: data plane + P4Runtime + metrics) and `inswitch p4info`
(write the P4Info and device config a P4Runtime client needs for a program set)."""

from __future__ import annotations

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
from inswitch.output import replace_json

DEFAULT_P4RUNTIME = "127.0.0.1:9559"
DEFAULT_METRICS = "127.0.0.1:9100"


class UsageError(ValueError):
    """Bad command-line input: reported in one line, exit status 2."""


def parse_address(text: str, what: str) -> str:
    """Check HOST:PORT (IPv6 hosts in brackets); port 0 asks for any free port."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{what} must be HOST:PORT (e.g. 127.0.0.1:9559), not {text!r}")
    return f"{host}:{int(port)}"


def check_programs(spec: str) -> list[str]:
    try:
        names = native.split_programs(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None
    known = native.program_names()
    for n in names:
        if n not in known:
            raise UsageError(f"unknown program {n!r} (known: {', '.join(known)})")
    if len(set(names)) != len(names):
        raise UsageError(f"a program is named twice in {spec!r}")
    return names


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
            raise UsageError(f"--fault takes loss=P,dup=P,reorder=P,seed=N, not {text!r}")
        try:
            vals[k] = int(v) if k == "seed" else float(v)
        except ValueError:
            raise UsageError(f"--fault: {k}={v!r} is not a number") from None
        if k != "seed" and not 0.0 <= vals[k] <= 1.0:
            raise UsageError(f"--fault: {k}={v} is outside 0..1")
    return (vals["loss"], vals["dup"], vals["reorder"], int(vals["seed"]))


def run_switch(programs: str, ports: str, p4runtime: str, pipes: int, pcap: Optional[str], metrics: str, device_id: int, ready_file: Optional[str], out: Console, err: Console, fault: Optional[str] = None, port_qdisc: bool = False) -> int:
    """Run until SIGINT/SIGTERM. Returns the exit status: 0 after a clean stop, 2 for bad
    input, 1 when the switch cannot start (e.g. an address in use)."""
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
        names = check_programs(programs)
        p4rt_addr = parse_address(p4runtime, "--p4runtime")
        metrics_addr = None if metrics.strip().lower() == "off" else parse_address(metrics, "--metrics")
        if pipes < 1:
            raise UsageError("--pipes must be at least 1")
        if pcap:
            Path(pcap).mkdir(parents=True, exist_ok=True)

        from inswitch import _native
        from inswitch.switchd.metrics import MetricsServer, collector
        from inswitch.switchd.server import SwitchServer

        try:
            dp = _native.Dataplane(names, ports, pipes=pipes, pcap_dir=pcap, fault=parse_fault(fault) if fault else None,
                                   **({"port_qdisc": True} if port_qdisc else {}))
        except ValueError as e:
            raise UsageError(str(e)) from None
        server = SwitchServer(dp, p4rt_addr, device_id)
        if metrics_addr is not None:
            info = {"programs": ",".join(names), "ports": ports, "device_id": device_id, "version": _version()}
            msrv = MetricsServer(metrics_addr, collector(dp, server.stats, info, lambda: {"inswitch_p4runtime_streams": ("Open P4Runtime StreamChannels (controller sessions)", server.service.streams)}))
        server.start()
        if msrv is not None:
            msrv.start()
        port_names = list(dp.port_names())
        _summary(out, names, ports, port_names, dp.num_pipes, server.address, msrv.address if msrv else None, device_id)
        if ready is not None:
            write_ready_file(ready, {
                "pid": os.getpid(),
                "p4runtime": server.address,
                "metrics": msrv.address if msrv else None,
                "device_id": device_id,
                "programs": names,
                "ports": port_names,
                "pipes": dp.num_pipes,
            })
        while not stop.wait(0.5):
            pass
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


def _summary(out: Console, names: list[str], spec: str, port_names: list[str], pipes: int, p4rt: str, metrics: Optional[str], device_id: int) -> None:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("programs", ", ".join(names))
    shown = ", ".join(f"{i}={n}" for i, n in enumerate(port_names[:16])) + (" …" if len(port_names) > 16 else "")
    t.add_row("ports", f"{spec} ({len(port_names)}: {shown}), {pipes} pipe{'s' if pipes != 1 else ''}")
    t.add_row("P4Runtime", f"{p4rt} (device {device_id})")
    t.add_row("metrics", f"http://{metrics}/metrics" if metrics else "off")
    out.print("[bold green]inswitch switch running[/bold green] (SIGINT or SIGTERM stops it)")
    out.print(t)


def register(app: typer.Typer) -> None:
    @app.command("switch")
    def switch_cmd(
        program: str = typer.Option("forward", "--program", "-p", help="Program name, or several joined by commas (loaded together)."),
        ports: str = typer.Option("memory:4", "--ports", help="memory:N | udp:BASEPORT:N | udp:HOST:BASEPORT:N | veth:IF1,IF2,..."),
        p4runtime: str = typer.Option(DEFAULT_P4RUNTIME, "--p4runtime", help="HOST:PORT the P4Runtime server listens on (port 0: any free port)."),
        pipes: int = typer.Option(1, "--pipes", help="Pipes (data-plane threads); ports are split among them."),
        pcap: Optional[str] = typer.Option(None, "--pcap", help="Directory for per-port packet captures."),
        metrics: str = typer.Option(DEFAULT_METRICS, "--metrics", help="HOST:PORT for Prometheus /metrics, or 'off'."),
        device_id: int = typer.Option(1, "--device-id", help="P4Runtime device id."),
        ready_file: Optional[str] = typer.Option(None, "--ready-file", help="Write JSON (pid, addresses, port names) here once serving; removed on a clean stop."),
        fault: Optional[str] = typer.Option(None, "--fault", help="Inject seeded faults on every port's receive side: loss=P,dup=P,reorder=P,seed=N."),
        port_qdisc: bool = typer.Option(False, "--port-qdisc", help="veth ports send through the interface's qdisc (so `tc netem` on a port shapes what the switch sends) instead of bypassing it."),
    ) -> None:
        """Run a software switch: the data plane over PORTS, a P4Runtime server and a metrics
        endpoint, until SIGINT or SIGTERM."""
        code = run_switch(program, ports, p4runtime, pipes, pcap, metrics, device_id, ready_file, Console(), Console(stderr=True), fault=fault, port_qdisc=port_qdisc)
        raise typer.Exit(code)

    @app.command("p4info")
    def p4info_cmd(
        programs: str = typer.Argument(..., help="Program name, or several joined by commas."),
        out: Optional[str] = typer.Option(None, "--out", help="Write the P4Info (protobuf text format) here instead of printing it."),
        device_config: Optional[str] = typer.Option(None, "--device-config", help="Also write the device config (the p4_device_config bytes) here."),
    ) -> None:
        """The P4Info and device config of a program set: what a P4Runtime client (e.g.
        p4runtime-shell's FwdPipeConfig) needs to set the switch's pipeline."""
        err = Console(stderr=True)
        try:
            names = check_programs(programs)
        except UsageError as e:
            err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        from inswitch.p4rt.p4info import device_config as make_device_config
        from inswitch.p4rt.p4info import p4info_for, to_text

        p4 = p4info_for(names)
        text = to_text(p4)
        if out:
            Path(out).write_text(text)
            err.print(f"wrote P4Info of {','.join(names)} ({len(p4.tables)} tables, {len(p4.actions)} actions, {len(p4.registers)} registers, {len(p4.digests)} digests) to {out}", highlight=False, soft_wrap=True)
        else:
            typer.echo(text, nl=False)
        if device_config:
            Path(device_config).write_bytes(make_device_config(names))
            err.print(f"wrote device config to {device_config}", highlight=False, soft_wrap=True)
