"""Trace-driven KV runs of Hare, NetCache, DySO and no caching on the in-process switch.

Every query is a real Hare frame through the real data-plane program (`_native.SimSwitch`,
the same `pisa::Switch` switchd runs, stepped here so a replayed trace is deterministic):
the switch answers hits itself, misses reach the backend servers (2 by default), whose
replies and write-throughs pass the switch again. Time is simulated: queries carry their
trace time, each backend server is a FIFO queue with a fixed service time, and every
control action costs what it would on a switch — table and register writes through the
switch OS at `table_rate` per second, packet-based interactions at `packet_rate` per second
(the paper's >10K/s and 1 Mpps) — and takes effect when it would have finished.

The offloading logic of each system:

- hare: K2, run by the K3 framework (`framework.Hare`; the servers are `kvapp.Server`,
  which supplies only the hooks). Every `t_wait` the analyzer fetches OO-Stat with packets (halving it every
  second, or fetch-and-clear with `hare_stats="clear"`),
  takes the K coldest offloaded objects and the integrated K hottest of the servers'
  NOO-Stat heaps, keeps the K globally hottest (Steps 1–3), marks the replaced slots
  (Step 4, packets), rewrites the e-MAT with the updating mechanism (Step 5, ≤ 2×M table
  writes each) while each server moves the value in with a packet (D-modifier), marks
  the slots valid (Step 6) and restarts the replaced slots' statistics (Step 7).
- netcache: hot keys reported by the switch's count-min sketch + Bloom filter (clones to
  the controller); for each, the controller samples cached keys' counters (register
  reads), evicts the coldest if colder than the report threshold, and installs the key
  (table delete + insert, value and valid register writes). Statistics reset every 1 s.
- dyso: the analyzer reads the queried keys (QO-Record) with packets every slice, keeps
  counts (halved every 1 s) and offloads the locally hottest C keys of each r-MAT row with
  packets.
- none: the base program only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.apps.hare import framework
from inswitch.apps.hare.dyso_ctl import DysoAnalyzer, dyso_row
from inswitch.apps.hare.kvapp import Server
from inswitch.apps.hare.netcache_ctl import NetCacheController
from inswitch.apps.hare.workload import Trace, key_bytes, value_bytes

SYSTEMS = ("hare", "netcache", "dyso", "none")

OP_GET, OP_GET_REPLY, OP_PUT, OP_PUT_REPLY = 1, 2, 3, 4
OP_STAT_FETCH, OP_STATE_SET, OP_DATAMV_TO_SWITCH = 16, 17, 18
FLAG_HIT = 0x01
PORT_SERVER, PORT_CLIENT = 7370, 7371
STATE_EMPTY, STATE_VALID, STATE_INVALID, STATE_REPLACING = 0, 1, 2, 3
NETCACHE_REPORT_SESSION = 90


def _mac(i: int) -> bytes:
    return bytes([2, 0, 0, 0, 0, i])


def _ip(i: int) -> bytes:
    return bytes([10, 0, 0, i])


CLIENT = (_mac(1), _ip(1), PORT_CLIENT)
CPU = (_mac(0xFE), _ip(0xFE), PORT_CLIENT)


def server_ep(s: int) -> tuple[bytes, bytes, int]:
    return (_mac(2 + s), _ip(2 + s), PORT_SERVER)


@dataclass
class KvParams:
    n_keys: int = 10_000
    key_size: int = 80
    value_size: int = 64
    cache: int = 512
    batch: int = 64
    servers: int = 2
    #: Backend service time per query (s): each server is a FIFO queue.
    service_s: float = 150e-6
    #: One-way host-switch latency (s).
    link_s: float = 2e-6
    #: Requests waiting longer than this at a server are dropped.
    max_wait_s: float = 2e-3
    #: Control-plane rates: switch-OS table/register writes, and packet interactions.
    table_rate: float = 10_000.0
    packet_rate: float = 1_000_000.0
    slice_s: float = 0.005
    epoch_s: float = 0.1
    #: Hare's statistics window (Step 1). The paper's 50 ms is at millions of queries per
    #: second; at the rates simulated here a window needs about as many queries per
    #: offloaded object to rank them, so the default is longer.
    t_wait: float = 0.1
    #: NetCache's report threshold; None: a sketch counter's average load over the
    #: 1 s statistics period (the paper's 384 is for its rates), so a report means hot.
    netcache_threshold: Optional[int] = None
    netcache_sample: int = 128
    dyso_columns: Optional[int] = None
    qo_record: int = 4096
    #: Hare's statistics between rounds: "clear" (Step 7 clears OO-Stat and NOO-Stat every
    #: round) or "age" (kept, halved every second).
    hare_stats: str = "age"


def dyso_key_field(key_size: int) -> int:
    return (key_size + 3) // 4 * 4


def dyso_fit(p: KvParams, target: str = "tofino1") -> tuple[int, int]:
    """Columns and rows of the largest r-MAT of `cache` cells that fits the target beside
    the base program (at least one column)."""
    import json

    best = (1, _pow2(p.cache))
    for c in range(1, 9):
        rows = _pow2(max(1, p.cache // c))
        spec = f"dyso:key={dyso_key_field(p.key_size)},value={p.value_size},rows={rows},columns={c}"
        rep = json.loads(_native.resources_json(["forward", spec], target))
        if rep["fits"]:
            best = (c, rows)
        else:
            break
    return best


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


@dataclass
class Metrics:
    epochs: int
    epoch_s: float
    gets: np.ndarray = field(init=False)
    hits: np.ndarray = field(init=False)
    done: np.ndarray = field(init=False)
    dropped: np.ndarray = field(init=False)
    lat: list[list[float]] = field(init=False)

    def __post_init__(self) -> None:
        self.gets = np.zeros(self.epochs, dtype=np.int64)
        self.hits = np.zeros(self.epochs, dtype=np.int64)
        self.done = np.zeros(self.epochs, dtype=np.int64)
        self.dropped = np.zeros(self.epochs, dtype=np.int64)
        self.lat = [[] for _ in range(self.epochs)]

    def ep(self, t: float) -> int:
        return min(self.epochs - 1, max(0, int(t / self.epoch_s)))


class KvRun:
    """One system over one trace."""

    def __init__(self, system: str, trace: Trace, p: KvParams, wal_dir: Optional[Path] = None, pcap_dir: Optional[Path] = None):
        if system not in SYSTEMS:
            raise ValueError(f"system must be one of {', '.join(SYSTEMS)}")
        self.system, self.trace, self.p = system, trace, p
        self.kf = dyso_key_field(p.key_size) if system == "dyso" else p.key_size
        self._keys = [key_bytes(i, p.key_size) for i in range(trace.n_keys)]
        rate = len(trace) / max(float(trace.t[-1]), 1e-9) if len(trace) else 0.0
        self.nc_threshold = p.netcache_threshold or max(8, int(rate / 256))
        if system == "hare":
            prog = f"hare:key={self.kf},value={p.value_size},slots={p.cache}"
        elif system == "netcache":
            prog = f"netcache:key={self.kf},value={p.value_size},slots={p.cache},threshold={self.nc_threshold}"
        elif system == "dyso":
            cols, rows = (p.dyso_columns, _pow2(max(1, p.cache // p.dyso_columns))) if p.dyso_columns else dyso_fit(p)
            self.dyso_cols, self.dyso_rows = cols, rows
            prog = f"dyso:key={self.kf},value={p.value_size},rows={rows},columns={cols}"
        self.prog = prog if system != "none" else "forward"
        programs = ["forward"] + ([prog] if system != "none" else [])
        import json as _json

        rep = _json.loads(_native.resources_json(programs, "tofino1"))
        self.fits = {"tofino1": rep["fits"], "problems": rep["problems"]}
        self.sw = _native.SimSwitch(programs, 1 + p.servers)
        #: Simulated time of the slice being run (stamps captured frames).
        self.t_now = 0.0
        if pcap_dir is not None:
            from inswitch.capture import CapturedSim

            self.sw = CapturedSim(self.sw, 1 + p.servers, Path(pcap_dir), lambda: self.t_now)
        for h, port in [(1, 0)] + [(2 + s, 1 + s) for s in range(p.servers)] + [(0xFE, 0)]:
            self.sw.table_write("forward", "l2_dmac", "insert", [_mac(h)], "l2_forward", [port.to_bytes(2, "big")])
            self.sw.table_write("forward", "l2_smac", "insert", [_mac(h)], "nop", [])
        if system in ("hare", "dyso"):
            for s in range(p.servers):
                self.sw.table_write(system, "control_ports", "insert", [(1 + s).to_bytes(2, "big")], "allow_control", [])
        if system == "netcache":
            self.sw.clone_to_cpu(NETCACHE_REPORT_SESSION)
        self.servers = [
            Server(s, trace.n_keys, self._keys.__getitem__, p.servers, p.value_size, self.kf, p.batch, (wal_dir / f"server{s}.wal") if wal_dir else None)
            for s in range(p.servers)
        ]
        for srv in self.servers:
            srv.send = lambda frames, port=1 + srv.idx: self.server_send(port, frames)
        # The client's reference, per key: the latest version a PUT carried (issued) and the
        # latest one the store acknowledged (acked). A PUT the servers drop under load is
        # never acknowledged: its client learns it failed (`failed`), and a later read of
        # the older value is not stale. A read must return a version written no earlier
        # than the last acknowledged one when it was sent (nor one never written).
        self.version = np.zeros(trace.n_keys, dtype=np.int64)  # issued
        self.acked = np.zeros(trace.n_keys, dtype=np.int64)
        self.failed = {"get": 0, "put": 0}
        self.epochs = int(math.ceil((float(trace.t[-1]) if len(trace) else 0.0) / p.epoch_s)) + 1
        self.m = Metrics(self.epochs, p.epoch_s)
        self.correct = True
        self.stale: list[dict[str, Any]] = []
        self.table_ops = 0
        self.packet_ops = 0
        self.busy_until = 0.0
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self.offloads = 0
        # Hare: the K3 framework does the offloading; the servers are the application.
        self.fw: Optional[framework.Hare] = None
        if system == "hare":
            fp = framework.FrameworkParams(p.cache, p.batch, p.t_wait, p.table_rate, p.packet_rate, p.hare_stats)
            self.fw = framework.Hare(self.sw, "hare", self.kf, self.servers, lambda k: self.server_of(self._key_index[k]), fp)
        # NetCache
        self.nc = NetCacheController(self.sw, p.cache, p.value_size, self.nc_threshold, p.netcache_sample)
        self.nc_next_clear = 1.0
        self.nc_pending: set[bytes] = set()
        # DySO
        if system == "dyso":
            self.dy = DysoAnalyzer[int](self.dyso_cols, self.dyso_row_of)

    # ---- helpers -----------------------------------------------------------------------

    def server_of(self, i: int) -> int:
        return i % self.p.servers

    def key(self, i: int) -> bytes:
        return self._keys[i]

    def value(self, i: int) -> bytes:
        return value_bytes(i, int(self.version[i]), self.p.value_size)

    def frame(self, src: tuple, dst: tuple, op: int, key: bytes, value: bytes = b"", seq: int = 0, **kw: int) -> bytes:
        return _native.hare_frame(src, dst, op, key, self.kf, value, seq, **kw)

    def cpu(self, op: int, slot: int = 0, status: int = 0, value: bytes = b"", key: bytes = b"", aux: int = 0) -> list[bytes]:
        self.packet_ops += 1
        kf = self.kf if key or op == OP_DATAMV_TO_SWITCH else 0
        f = _native.hare_frame(CPU, server_ep(0), op, key, kf, value, 0, slot, aux, status, 0)
        return self.sw.packet_out(f)

    def server_send(self, port: int, frames: list[bytes]) -> list[tuple[int, bytes]]:
        self.packet_ops += len(frames)
        return self.sw.process(port, frames)

    def schedule(self, start: float, cost: float, fn: Callable[[], None]) -> None:
        begin = max(start, self.busy_until)
        self.busy_until = begin + cost
        self.pending.append((self.busy_until, fn))

    def run_pending(self, now: float) -> None:
        keep = []
        for t, fn in sorted(self.pending, key=lambda x: x[0]):
            if t <= now:
                fn()
            else:
                keep.append((t, fn))
        self.pending = keep

    # ---- the run -----------------------------------------------------------------------

    def run(self, progress: Optional[Callable[[float], None]] = None) -> dict[str, Any]:
        tr, p = self.trace, self.p
        n = len(tr)
        lo = 0
        t_end = float(tr.t[-1]) if n else 0.0
        now = 0.0
        while lo < n:
            self.t_now = now
            now += p.slice_s
            self.run_pending(now - p.slice_s)
            if self.fw is not None:
                self.fw.run_due(now - p.slice_s)
            hi = int(np.searchsorted(tr.t, now))
            if hi > lo:
                self.slice(lo, hi)
            self.control(now)
            lo = hi
            if progress:
                progress(min(1.0, now / max(t_end, 1e-9)))
        if hasattr(self.sw, "close"):
            self.sw.close()  # a capture: flush its files
        return self.result()

    def slice(self, lo: int, hi: int) -> None:
        tr, p = self.trace, self.p
        frames = []
        expect: dict[int, int] = {}  # GET seq -> the key's acknowledged version when sent
        put_version: dict[int, int] = {}  # PUT seq -> the version it writes
        for q in range(lo, hi):
            i = int(tr.key[q])
            s = self.server_of(i)
            if tr.put[q]:
                self.version[i] += 1
                put_version[q] = int(self.version[i])
                frames.append(self.frame(CLIENT, server_ep(s), OP_PUT, self.key(i), self.value(i), q))
            else:
                expect[q] = int(self.acked[i])
                frames.append(self.frame(CLIENT, server_ep(s), OP_GET, self.key(i), b"", q))
        out = self.sw.process(0, frames)
        replies: list[bytes] = []
        to_server: dict[int, list[bytes]] = {}
        for port, f in out:
            if port == 0:
                replies.append(f)
            else:
                to_server.setdefault(port - 1, []).append(f)
        if self.system == "netcache":
            self.nc_reports(self.sw.take_packet_ins(), float(tr.t[hi - 1]))
        # Backend servers, in arrival order.
        for s, fs in sorted(to_server.items()):
            srv = self.servers[s]
            back = []
            for f in fs:
                q = framework.Query.parse(f)
                if q is None:
                    continue
                t0 = float(tr.t[q.seq]) + p.link_s
                start = max(t0, srv.free_at)
                if start - t0 > p.max_wait_s:
                    self.m.dropped[self.m.ep(t0)] += 1
                    continue
                srv.free_at = start + p.service_s
                fin = srv.free_at + p.link_s
                e = self.m.ep(fin)
                self.m.done[e] += 1
                self.m.lat[e].append((fin - float(tr.t[q.seq])) * 1e6)
                if q.op == OP_GET:
                    self.m.gets[self.m.ep(float(tr.t[q.seq]))] += 1
                back.extend(srv.process_query(q))
            for port, f in self.sw.process(1 + s, back):
                if port == 0:
                    replies.append(f)
        answered: set[int] = set()
        for f in replies:
            m = _native.hare_parse(f)
            if m is None:
                continue
            op, flags, seq, _hi, _aux, _st, key, value, _ip, _port = m
            if op == OP_PUT_REPLY and seq in put_version:
                answered.add(seq)
                i = int(tr.key[seq])
                self.acked[i] = max(int(self.acked[i]), put_version[seq])
                continue
            if op != OP_GET_REPLY or seq not in expect:
                continue
            answered.add(seq)
            i = int(tr.key[seq])
            if flags & FLAG_HIT:
                t = float(tr.t[seq])
                e = self.m.ep(t)
                self.m.gets[e] += 1
                self.m.hits[e] += 1
                self.m.done[e] += 1
                self.m.lat[e].append(2 * p.link_s * 1e6)
            if not read_ok(value, i, expect[seq], int(self.version[i]), p.value_size):
                self.correct = False
                if len(self.stale) < 10:
                    self.stale.append({"seq": seq, "key": i, "hit": bool(flags & FLAG_HIT), "want_version": expect[seq],
                                       "got_version": int.from_bytes(value[4:8], "big") if len(value) >= 8 else None})
        # Every request of the slice has had its answer (the servers answer within it): one
        # without is reported to its client as failed (a drop under load, or by the switch).
        for q in range(lo, hi):
            if q not in answered:
                self.failed["put" if tr.put[q] else "get"] += 1

    # ---- control -----------------------------------------------------------------------

    def control(self, now: float) -> None:
        if self.fw is not None:
            self.fw.tick(now)
        elif self.system == "netcache" and now >= self.nc_next_clear:
            self.nc_next_clear += 1.0
            self.schedule(now, 8 / self.p.table_rate, self.nc_clear)
        elif self.system == "dyso":
            self.dyso_round(now)

    @property
    def _key_index(self) -> dict[bytes, int]:
        if not hasattr(self, "_ki"):
            self._ki = {k: i for i, k in enumerate(self._keys)}
        return self._ki

    # NetCache ------------------------------------------------------------------------------

    def nc_reports(self, pins: list[bytes], t: float) -> None:
        p = self.p
        for f in pins:
            m = _native.hare_parse(f)
            if m is None:
                continue
            key = bytes(m[6])
            if key in self.nc.cached or key in self.nc_pending:
                continue
            self.nc_pending.add(key)
            sample = min(p.netcache_sample, len(self.nc.cached)) if len(self.nc.cached) + len(self.nc_pending) > p.cache else 0
            ops = sample + 2 + p.value_size // 4 + 1

            def install(key: bytes = key) -> None:
                self.nc_pending.discard(key)
                self.nc.install(key, lambda k: self.servers[self.server_of(self._key_index[k])].store[k])

            self.schedule(t, ops / p.table_rate, install)

    def nc_clear(self) -> None:
        self.nc.clear()

    # DySO ----------------------------------------------------------------------------------

    def dyso_row_of(self, i: int) -> int:
        if not hasattr(self, "_dy_rows"):
            self._dy_rows = [dyso_row(k, self.kf, self.dyso_rows) for k in self._keys]
        return self._dy_rows[i]

    def dyso_round(self, now: float) -> None:
        p = self.p
        lo = int(np.searchsorted(self.trace.t, now - p.slice_s))
        hi = int(np.searchsorted(self.trace.t, now))
        recorded = [int(k) for k, put in zip(self.trace.key[lo:hi], self.trace.put[lo:hi]) if not put][: p.qo_record]
        counts: dict[int, float] = {}
        for i in recorded:
            counts[i] = counts.get(i, 0.0) + 1.0
        changes = self.dy.changes(self.dy.record(counts, now))
        if not changes:
            return
        cost = (len(recorded) + len(changes)) / p.packet_rate

        def apply() -> None:
            for r, c, i in changes:
                key = self._keys[i]
                v = self.servers[self.server_of(i)].store[key]
                self.cpu(OP_DATAMV_TO_SWITCH, key=key, value=v, aux=c)
                self.dy.installed(r, c, i)
                self.offloads += 1

        self.schedule(now, cost, apply)

    # ---- results -----------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        m, p = self.m, self.p
        hr = [float(h / g) if g else None for h, g in zip(m.hits, m.gets)]
        thr = [float(d / p.epoch_s) for d in m.done]
        p50 = [float(np.percentile(x, 50)) if x else None for x in m.lat]
        p99 = [float(np.percentile(x, 99)) if x else None for x in m.lat]
        shifts = self.trace.shift_times
        t_shift = shifts[0] if shifts else None
        stable = _mean_window(hr, p.epoch_s, (t_shift or self.epochs * p.epoch_s) - 1.0, t_shift or self.epochs * p.epoch_s)
        end = self.epochs * p.epoch_s
        recovered = _mean_window(hr, p.epoch_s, end - 1.0, end - p.epoch_s) if t_shift is not None else stable
        rec = None
        if t_shift is not None and stable:
            # First epoch after the shift whose hit rate is back within 5% of the stable one.
            for e in range(int(t_shift / p.epoch_s), self.epochs - 1):
                v = hr[e]
                if v is not None and v >= 0.95 * stable:
                    rec = round((e + 1) * p.epoch_s - t_shift, 3)
                    break
        return {
            "program": self.prog,
            "fits": self.fits,
            "hit_rate": hr,
            "stable_hit_rate": stable,
            "recovered_hit_rate": recovered,
            "recovery_s": rec,
            "throughput_qps": thr,
            "p50_us": p50,
            "p99_us": p99,
            "dropped": int(m.dropped.sum()),
            # Requests the client saw fail (no reply): what the servers dropped, and any the
            # switch dropped. Reads are checked against acknowledged writes only.
            "failed_requests": dict(self.failed),
            "correct": self.correct,
            "stale_examples": self.stale,
            "offloads": self.offloads + self.nc.offloads + (self.fw.offloads if self.fw else 0),
            "control": {"table_ops": self.table_ops + self.nc.table_ops + (self.fw.table_ops if self.fw else 0), "packet_ops": self.packet_ops + (self.fw.packet_ops if self.fw else 0)},
            "switch_drops": self.sw.drops(),
            **({"dyso_columns": self.dyso_cols, "dyso_rows": self.dyso_rows} if self.system == "dyso" else {}),
        }


def read_ok(value: bytes, i: int, acked: int, issued: int, size: int) -> bool:
    """A read of key `i` is right if it returns a value some PUT wrote (or the initial one),
    of a version no older than the one acknowledged when the read was sent (`acked`) and
    no newer than the latest sent (`issued`): an unacknowledged write may or may not have
    been applied, an acknowledged one must be seen."""
    if len(value) < 8:
        return False
    v = int.from_bytes(value[4:8], "big")
    return acked <= v <= issued and value == value_bytes(i, v, size)


def _mean_window(v: list[Optional[float]], step: float, t0: float, t1: float) -> Optional[float]:
    xs = [x for e, x in enumerate(v) if x is not None and t0 <= e * step < t1]
    return float(np.mean(xs)) if xs else None
