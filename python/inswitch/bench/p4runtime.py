"""`inswitch bench p4runtime`: how fast a switch's P4Runtime server installs writes.

A real `inswitch switch` process (program `forward`, in-memory ports) is started on
loopback and driven by real gRPC clients in separate processes:

- `writes_per_s`: Write RPCs of one update each (a MODIFY of an `l2_dmac` entry), from
  `streams` client processes with `window` calls in flight each (a controller pipelining its
  writes over concurrent calls, as gNMI/P4Runtime controllers do).
- `batched_updates_per_s`: the same MODIFYs, `batch` per Write (the client declares a
  metadata limit large enough for the per-update error report of such a batch).
- `write_p99_ms_under_reads`: one writer sending one Write at a time while `readers`
  processes read a register (`rx_port_counters`, all cells) in a loop; also measured alone.

The load generator must cost little on a 2-core machine: clients send requests serialized
once in advance as raw bytes (no protobuf work per call) and do not decode the responses
(an error status is still counted), so what is measured is the server.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Optional

from rich.table import Table

from inswitch.cliopts import JSON_PATH, Float, Int, option
from inswitch.output import console_for, note_written, write_json
from inswitch.tables import show

#: The results before this bench's work (protobuf 3.20.3's pure-Python backend; measured with
#: this bench on the same machine; see bench/RESULTS.md).
BASELINE = {"writes_per_s": 2349.0, "batched_updates_per_s": 10056.0, "write_p99_ms_under_reads": 607.0}
#: The issue's goals.
GOALS = {"writes_per_s": 10_000.0, "batched_updates_per_s": 100_000.0, "write_p99_ms_under_reads": 10.0}

TABLE = "forward.l2_dmac"
REGISTER = "forward.rx_port_counters"
#: Entries the MODIFYs cycle over (inserted first; MODIFY keeps the table's size constant).
ENTRIES = 2000
#: A metadata limit the batched writer declares (per-update error reports of big batches).
_BIG_LIMIT = (("inswitch-max-metadata-size", str(8 * 1024 * 1024)),)
_WRITE = "/p4.v1.P4Runtime/Write"
_READ = "/p4.v1.P4Runtime/Read"
_OPTIONS = [("grpc.max_metadata_size", 16 * 1024 * 1024), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]


# ---- the client processes (module-level so `spawn` can import them) -------------------------


def _channel(address: str) -> Any:
    import grpc

    ch = grpc.insecure_channel(address, options=_OPTIONS)
    grpc.channel_ready_future(ch).result(timeout=30)
    return ch


def _pipelined_writer(address: str, requests: list[bytes], window: int, big: bool, go: Any, duration: float, out: Any) -> None:
    """Send `requests` round-robin with `window` calls in flight for `duration` s."""
    import grpc

    ch = _channel(address)
    call = ch.unary_unary(_WRITE)  # bytes in, bytes out: no protobuf work here
    md = _BIG_LIMIT if big else None
    end = _start(go, duration, out)
    inflight: deque[Any] = deque()
    done = errors = i = 0
    n = len(requests)
    t0 = time.perf_counter()
    while True:
        now = time.time()
        while len(inflight) < window and now < end:
            inflight.append(call.future(requests[i % n], metadata=md, timeout=30))
            i += 1
        if not inflight:
            break
        f = inflight.popleft()
        try:
            f.result()
            done += 1
        except grpc.RpcError:
            errors += 1
    out.put({"done": done, "errors": errors, "seconds": time.perf_counter() - t0})
    ch.close()


def _start(go: Any, duration: float, out: Any) -> float:
    """Say this process is ready, wait for the others; when to stop."""
    out.put(None)
    go.wait()
    return time.time() + duration


def _timed_writer(address: str, requests: list[bytes], go: Any, duration: float, out: Any) -> None:
    """One Write at a time; every latency in milliseconds."""
    import grpc

    ch = _channel(address)
    call = ch.unary_unary(_WRITE)
    end = _start(go, duration, out)
    lat: list[float] = []
    errors = i = 0
    while time.time() < end:
        t0 = time.perf_counter()
        try:
            call(requests[i % len(requests)], timeout=30)
        except grpc.RpcError:
            errors += 1
        lat.append((time.perf_counter() - t0) * 1e3)
        i += 1
    out.put({"latencies_ms": lat, "errors": errors})
    ch.close()


def _reader(address: str, request: bytes, go: Any, duration: float, out: Any) -> None:
    """Read `request` (a register) in a loop, one at a time."""
    import grpc

    ch = _channel(address)
    call = ch.unary_stream(_READ)
    end = _start(go, duration, out)
    done = errors = 0
    while time.time() < end:
        try:
            for _ in call(request, timeout=30):
                pass
            done += 1
        except grpc.RpcError:
            errors += 1
    out.put({"done": done, "errors": errors})
    ch.close()


# ---- the switch and the requests --------------------------------------------------------------


class _Switch:
    """An `inswitch switch` process on free loopback ports."""

    def __init__(self, workdir: Path) -> None:
        ready = workdir / "ready.json"
        self.log = workdir / "switch.log"
        argv = [sys.executable, "-m", "inswitch", "switch", "--program", "forward", "--ports", "memory:4",
                "--p4runtime", "127.0.0.1:0", "--metrics", "off", "--l2", "controller", "--ready-file", str(ready)]
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.address = str(json.loads(ready.read_text())["p4runtime"])
                return
            except (FileNotFoundError, ValueError, KeyError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the switch did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _requests(client: Any, batch: int) -> tuple[list[bytes], list[bytes], bytes]:
    """(single-update Writes, `batch`-update Writes, the register Read), serialized."""
    from p4.v1 import p4runtime_pb2

    Update = p4runtime_pb2.Update
    updates = [client.table_update(Update.MODIFY, TABLE, {"hdr.ethernet.dst_addr": 0x020000000000 + k}, "forward.l2_forward", {"port": k % 4})
               for k in range(ENTRIES)]

    def write(us: list[Any]) -> bytes:
        req = p4runtime_pb2.WriteRequest(device_id=client.device_id, role=client.role)
        req.election_id.high, req.election_id.low = client.election_id
        req.updates.extend(us)
        return req.SerializeToString()

    singles = [write([u]) for u in updates]
    batches = [write([updates[(i + j) % ENTRIES] for j in range(batch)]) for i in range(0, ENTRIES, max(1, ENTRIES // 8))]
    read = p4runtime_pb2.ReadRequest(device_id=client.device_id)
    read.entities.add().register_entry.register_id = client.schema.registers.by_name[REGISTER].id
    return singles, batches, read.SerializeToString()


def _run_procs(targets: list[tuple[Callable[..., None], tuple[Any, ...]]], duration: float) -> list[dict[str, Any]]:
    """Run each `fn(*args, go, duration, queue)` in its own process; all measure at once,
    once every one is connected; their results."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=fn, args=(*args, go, duration, q), daemon=True) for fn, args in targets]
    for p in procs:
        p.start()
    try:
        ready, deadline = 0, time.monotonic() + 120
        while ready < len(procs):
            try:
                q.get(timeout=0.5)
                ready += 1
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError("a client process of the bench failed to connect to the switch") from None
        go.set()
        return [q.get(timeout=duration + 120) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def run(duration: float = 3.0, readers: int = 20, streams: int = 2, window: int = 32, batch: int = 1000,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    from inswitch.p4rt.client import SwitchClient

    from google.protobuf.internal import api_implementation

    with tempfile.TemporaryDirectory(prefix="inswitch-bench-p4rt-") as tmp:
        progress("starting the switch")
        sw = _Switch(Path(tmp))
        try:
            with SwitchClient(sw.address) as c:
                progress(f"inserting {ENTRIES} entries")
                c.insert_entries(TABLE, [{"match": {"hdr.ethernet.dst_addr": 0x020000000000 + k}, "action": "forward.l2_forward", "params": {"port": k % 4}}
                                         for k in range(ENTRIES)], batch_size=150)
                singles, batches, read = _requests(c, batch)
                addr = sw.address
                progress(f"single-update writes: {streams} streams x {window} in flight")
                r = _run_procs([(_pipelined_writer, (addr, singles[i::streams], window, False)) for i in range(streams)], duration)
                writes = sum(x["done"] for x in r)
                write_errors = sum(x["errors"] for x in r)
                writes_per_s = writes / max(x["seconds"] for x in r)
                progress(f"batched writes: {streams} streams x {batch} updates")
                r = _run_procs([(_pipelined_writer, (addr, batches, 2, True)) for _ in range(streams)], duration)
                batched = sum(x["done"] for x in r) * batch
                batch_errors = sum(x["errors"] for x in r)
                batched_per_s = batched / max(x["seconds"] for x in r)
                progress("write latency, alone")
                [alone] = _run_procs([(_timed_writer, (addr, singles))], duration)
                progress(f"write latency under {readers} readers")
                r = _run_procs([(_timed_writer, (addr, singles))] + [(_reader, (addr, read)) for _ in range(readers)], duration)
                under = next(x for x in r if "latencies_ms" in x)
                reads = [x for x in r if "latencies_ms" not in x]
                if not c.is_primary:  # every Write above would have been refused
                    raise RuntimeError("the bench's controller session lost its primary role")
        finally:
            sw.stop()
    lat_alone, lat_under = alone["latencies_ms"], under["latencies_ms"]
    return {
        "writes_per_s": round(writes_per_s, 1),
        "batched_updates_per_s": round(batched_per_s, 1),
        "write_p99_ms_under_reads": round(_quantile(lat_under, 0.99), 3),
        "write_p50_ms_under_reads": round(_quantile(lat_under, 0.5), 3),
        "write_p50_ms_alone": round(_quantile(lat_alone, 0.5), 3),
        "write_p99_ms_alone": round(_quantile(lat_alone, 0.99), 3),
        "writes_under_reads": len(lat_under),
        "reads_per_s_under_writes": round(sum(x["done"] for x in reads) / duration, 1),
        "errors": write_errors + batch_errors + alone["errors"] + under["errors"] + sum(x["errors"] for x in reads),
        "config": {"duration_s": duration, "streams": streams, "window": window, "batch": batch, "readers": readers,
                   "entries": ENTRIES, "table": TABLE, "register": REGISTER, "update": "MODIFY",
                   "client": "grpc-python, requests pre-serialized as bytes, responses not decoded",
                   "server_protobuf": _server_protobuf(), "bench_protobuf": api_implementation.Type()},
        "baseline": BASELINE,
        "goals": GOALS,
        "cores": os.cpu_count(),
    }


def _server_protobuf() -> str:
    """The protobuf backend a switch process started like ours uses (it runs this Python)."""
    out = subprocess.run([sys.executable, "-c", "from google.protobuf.internal import api_implementation as a; import google.protobuf as g; print(a.Type(), g.__version__)"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


# ---- the command -------------------------------------------------------------------------------

EXAMPLES = "Examples:\n\n  inswitch bench p4runtime --json bench/p4runtime.json\n\n  inswitch bench p4runtime --duration 1 --readers 4\n"


def _fmt(key: str, v: float) -> str:
    return f"{v:,.1f} ms" if key.endswith("_ms_under_reads") else f"{v:,.0f} /s"


def bench_cmd(
    duration: float = option(3.0, "--duration", type=Float(0.1, 600), help="Seconds per measurement."),
    readers: int = option(20, "--readers", type=Int(0, 200), help="Processes reading a register while the write latency is measured."),
    streams: int = option(2, "--streams", type=Int(1, 64), help="Writer processes (each a gRPC channel) for the write rates."),
    window: int = option(32, "--window", type=Int(1, 1024), help="Single-update Writes each writer keeps in flight."),
    batch: int = option(1000, "--batch", type=Int(1, 10_000), help="Updates per Write for batched_updates_per_s."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the results as JSON."),
) -> None:
    """P4Runtime writes per second (one update per Write, and batched) and the write latency while other controllers read a register, against a real switch process over gRPC on loopback."""
    console = console_for(json_out)
    with console.status("measuring") as st:
        r = run(duration=duration, readers=readers, streams=streams, window=window, batch=batch, progress=lambda s: st.update(f"measuring: {s}"))
    cfg = r["config"]
    t = Table(title=f"inswitch bench p4runtime ({r['cores']} cores; switch protobuf: {cfg['server_protobuf']})")
    t.add_column("measurement")
    t.add_column("result", justify="right")
    t.add_column("goal", justify="right")
    t.add_column("before (protobuf 3.20.3)", justify="right")
    rows = {
        "writes_per_s": f"single-update Writes ({streams} clients x {window} in flight)",
        "batched_updates_per_s": f"updates in Writes of {batch} ({streams} clients x 2 in flight)",
        "write_p99_ms_under_reads": f"Write latency p99, {readers} clients reading {REGISTER.split('.')[-1]}",
    }
    for key, label in rows.items():
        t.add_row(label, _fmt(key, r[key]), ("< " if key.endswith("_ms_under_reads") else ">= ") + _fmt(key, GOALS[key]), _fmt(key, BASELINE[key]))
    t.add_row("Write latency p50 / p99, alone", f"{r['write_p50_ms_alone']:.2f} / {r['write_p99_ms_alone']:.2f} ms", "", "")
    t.add_row(f"Write latency p50 under reads ({r['writes_under_reads']} Writes)", f"{r['write_p50_ms_under_reads']:.2f} ms", "", "")
    t.add_row("register reads answered meanwhile", f"{r['reads_per_s_under_writes']:,.0f} /s", "", "")
    t.add_row("failed RPCs", f"{r['errors']}", "0", "")
    show(console, t)
    console.print(f"client: {cfg['client']}; updates are MODIFYs of {ENTRIES} {TABLE} entries", highlight=False, soft_wrap=True)
    if json_out:
        write_json(json_out, r, indent=2)
        note_written(console, json_out)


def register(app: Any) -> None:
    from inswitch.bench.cli import bench_app

    bench_app.command("p4runtime", epilog=EXAMPLES)(bench_cmd)
