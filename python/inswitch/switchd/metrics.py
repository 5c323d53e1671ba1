"""Prometheus metrics for a running switch, over plain HTTP.

`/metrics` renders the data plane's counters (per port, per program, switch-wide) and the
control plane's operation counts and latencies in the Prometheus text exposition format
(version 0.0.4), so any Prometheus, or a test with a regex, can scrape a switch. `/healthz`
answers "ok" while the switch serves. The server is the standard library's, in a thread:
scrapes are rare and small.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

import inswitch

from .opstats import OpStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME_OK = re.compile(r"[^a-zA-Z0-9_]")


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _number(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


@dataclass
class Family:
    """One metric family: its HELP and TYPE lines and its samples, rendered together (the
    format requires a family's samples to be contiguous)."""

    name: str
    type: str
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: Any) -> None:
        self.samples.append((suffix, {k: str(v) for k, v in labels.items()}, value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.type}"]
        for suffix, labels, value in self.samples:
            lab = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{self.name}{suffix}{{{lab}}} {_number(value)}" if lab else f"{self.name}{suffix} {_number(value)}")
        return "\n".join(lines)


class Exposition:
    """Families in registration order."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def family(self, name: str, type_: str, help_: str) -> Family:
        fam = self._families.get(name)
        if fam is None:
            fam = self._families[name] = Family(name, type_, help_)
        return fam

    def render(self) -> str:
        return "\n".join(f.render() for f in self._families.values() if f.samples) + "\n"


def _metric_name(s: str) -> str:
    return _NAME_OK.sub("_", s)


def render(counters: Mapping[str, Any], stats: OpStats | None = None, info: Mapping[str, Any] | None = None, extra_gauges: Mapping[str, tuple[str, float]] | None = None,
           pipe_cores: Sequence[int] = ()) -> str:
    """The exposition text for a `counters_json()` document plus control-plane stats;
    `extra_gauges` maps metric names to (help, value); `pipe_cores[i]` is the CPU pipe i's
    thread is pinned to."""
    ex = Exposition()
    ex.family("inswitch_up", "gauge", "1 while the switch serves").add(1)
    if pipe_cores:
        fam = ex.family("inswitch_pipe_core", "gauge", "The CPU core each pipe's thread is pinned to (--cores)")
        for i, c in enumerate(pipe_cores):
            fam.add(c, pipe=str(i))
    if info:
        ex.family("inswitch_info", "gauge", "Constant 1, labelled with what this switch runs").add(1, **{k: v for k, v in info.items()})
    if stats is not None:
        ex.family("inswitch_start_time_seconds", "gauge", "When the switch started, in seconds since the epoch").add(stats.started)

    per_port = [
        ("rx_packets", "inswitch_port_rx_packets_total", "Packets received by the pipeline, per port"),
        ("rx_bytes", "inswitch_port_rx_bytes_total", "Bytes received by the pipeline, per port"),
        ("tx_packets", "inswitch_port_tx_packets_total", "Packets transmitted by the pipeline, per port"),
        ("tx_bytes", "inswitch_port_tx_bytes_total", "Bytes transmitted by the pipeline, per port"),
        ("queue_drops", "inswitch_port_queue_drops_total", "Packets dropped at the port's egress: its queue, or the traffic manager's ring to its pipe, was full"),
    ]
    for p in counters.get("ports", []):
        labels = {"port": p.get("port"), "name": p.get("name") or str(p.get("port"))}
        for key, name, help_ in per_port:
            ex.family(name, "counter", help_).add(p.get(key, 0), **labels)
        ex.family("inswitch_port_queue_depth_max", "gauge", "Deepest the port's egress queue has been, in packets").add(p.get("queue_depth_max", 0), **labels)
        io = p.get("io") or {}
        for key, value in io.items():
            if key == "drops":
                fam = ex.family("inswitch_port_io_drops_total", "counter", "Frames the port's I/O layer dropped, by reason")
                for reason, n in value.items():
                    fam.add(n, **labels, reason=reason)
                continue
            m = re.fullmatch(r"(rx|tx)_(\w+)", key)
            if m:
                ex.family(f"inswitch_port_io_{_metric_name(m.group(2))}_total", "counter", f"{m.group(2).capitalize()} moved by the port's I/O layer (socket, ring or memory queue)").add(value, **labels, direction=m.group(1))
            else:
                ex.family(f"inswitch_port_io_{_metric_name(key)}_total", "counter", f"Port I/O counter {key}").add(value, **labels)

    for prog, pc in counters.get("programs", {}).items():
        fam = ex.family("inswitch_program_passes_total", "counter", "Pipeline passes of packets owned by the program, by gress")
        fam.add(pc.get("ingress_passes", 0), program=prog, gress="ingress")
        fam.add(pc.get("egress_passes", 0), program=prog, gress="egress")
        fam = ex.family("inswitch_program_drops_total", "counter", "Packets the program dropped, by reason")
        for reason, n in pc.get("drops", {}).items():
            fam.add(n, program=prog, reason=reason)
        fam = ex.family("inswitch_program_violations_total", "counter", "Hardware-model violations by the program (accesses a real switch could not do), by kind")
        for kind, n in pc.get("violations", {}).items():
            fam.add(n, program=prog, kind=kind)
    fam = ex.family("inswitch_drops_total", "counter", "Packets dropped by the switch, by reason")
    for reason, n in counters.get("drops", {}).items():
        fam.add(n, reason=reason)

    scalars = [
        ("recirculations", "inswitch_recirculations_total", "Packets recirculated for another pipeline pass"),
        ("pktgen_packets", "inswitch_pktgen_packets_total", "Packets made by packet generators"),
        ("packet_in", "inswitch_packet_in_total", "Packets the data plane sent to the controller (CPU port)"),
        ("packet_out", "inswitch_packet_out_total", "Packets the controller injected (PacketOut)"),
        ("digests", "inswitch_digests_total", "Digest messages the data plane generated"),
        ("clones", "inswitch_clones_total", "Clone (mirror) copies made"),
        ("mcast_replicas", "inswitch_mcast_replicas_total", "Multicast replicas made"),
        ("batches", "inswitch_batches_total", "Packet batches the pipeline processed"),
        ("events_dropped", "inswitch_controller_events_dropped_total", "PacketIns and digests dropped because the control plane did not collect them in time"),
    ]
    for key, name, help_ in scalars:
        if key in counters:
            ex.family(name, "counter", help_).add(counters[key])

    if stats is not None:
        ops = stats.snapshot()
        total = ex.family("inswitch_p4runtime_ops_total", "counter", "Control-plane operations (P4Runtime updates, reads, RPCs, PacketOuts), by operation")
        errs = ex.family("inswitch_p4runtime_op_errors_total", "counter", "Control-plane operations that failed, by operation")
        lat = ex.family("inswitch_p4runtime_op_latency_seconds", "summary", "Latency of control-plane operations as the switch measures it (quantiles over the most recent 4096), by operation")
        for op, s in ops.items():
            total.add(s.count, op=op)
            errs.add(s.errors, op=op)
            for q, v in s.quantiles.items():
                lat.add(v, op=op, quantile=q)
            lat.add(s.seconds, "_sum", op=op)
            lat.add(s.count, "_count", op=op)
        ev = ex.family("inswitch_p4runtime_events_total", "counter", "Control-plane events without a latency: updates written, PacketIns delivered or not, digest lists and messages sent, suppressed or acknowledged")
        for name, n in sorted(stats.events().items()):
            ev.add(n, event=name)
    for name, (help_, value) in (extra_gauges or {}).items():
        ex.family(name, "gauge", help_).add(value)
    return ex.render()


class MetricsServer:
    """`/metrics` and `/healthz` on HOST:PORT in a daemon thread. `collect` returns the
    exposition text; it runs per scrape. `other` answers every other GET path (the web
    view, ui/web.py): (body, content type, status), or None for 404; `post` answers POSTs
    (path, query, body) the same way (packet traces)."""

    def __init__(self, address: str, collect: Callable[[], str], other: Callable[[str, str], tuple[bytes, str, int] | None] | None = None,
                 post: Callable[[str, str, bytes], tuple[bytes, str, int] | None] | None = None) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics address must be HOST:PORT, not {address!r}")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = f"inswitch/{inswitch.__version__}"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    try:
                        body, ctype, code = outer._collect().encode(), CONTENT_TYPE, 200
                    except Exception as e:  # report, do not kill the server thread
                        body, ctype, code = f"collecting metrics failed: {e}\n".encode(), "text/plain", 500
                elif path == "/healthz":
                    body, ctype, code = b"ok\n", "text/plain", 200
                elif outer._other is not None and (got := outer._other(path, self.path.partition("?")[2])) is not None:
                    body, ctype, code = got
                else:
                    body, ctype, code = b"not found; try /metrics or /healthz\n", "text/plain", 404
                self._answer(body, ctype, code)

            def do_POST(self) -> None:  # noqa: N802
                # Only what `post` serves (packet traces): nothing here writes switch state.
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(min(max(n, 0), 1 << 16))
                path, _, query = self.path.partition("?")
                got = outer._post(path, query, data) if outer._post is not None else None
                if got is None:
                    got = b"not found\n", "text/plain", 404
                self._answer(*got)

            def _answer(self, body: bytes, ctype: str, code: int) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: scrapes are routine
                pass

        self._collect = collect
        self._other = other
        self._post = post
        try:
            self._httpd = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        except OSError as e:
            raise OSError(f"cannot listen for metrics on {address}: {e.strerror or e}") from None
        self._httpd.daemon_threads = True
        self.address = f"{host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def collector(dp: Any, stats: OpStats, info: Mapping[str, Any], gauges: Callable[[], Mapping[str, tuple[str, float]]] | None = None) -> Callable[[], str]:
    """A `collect` function over a live data plane."""

    cores = list(getattr(dp, "cores", []))

    def collect() -> str:
        return render(json.loads(dp.counters_json()), stats, info, gauges() if gauges else None, cores)

    return collect
