"""Tenant-facing adapters (INaaS §IV-E) and their host-only versions, on one service.

Each application runs twice in the same run and through the same switch: first through
INaaS (`phase="inaas"`), then host-only (`phase="host"`: every request to a server host).
Both are open-loop: requests are issued at fixed times, so a busy server queues. Every
answer is checked against a plain reference (a dict, exact sums, a set).

- `KvApp`: a key-value store whose hot items (recorded at the end host, like NetCache) are
  cached in the switch, each stored twice (two segments); misses go to the store server.
  Figure: average GET latency.
- `SparseApp`: sparse gradient aggregation: keys hashed mod 20 into 20 queues, one head of
  each per packet; the switch reduces, the parameter server collects. Figure: throughput.
- `DenseApp`: dense aggregation of float gradients quantized to integers; the parameter
  server finishes partial results (via the goalkeeper). Figure: throughput, and the
  quantization error against the float sum. The in-process model's; on real processes
  the dense tenant trains a model through the switch's allreduce program instead
  (`dense_train.DenseTrainApp`).
- `BloomApp`: a Bloom filter (k = 3) whose bits live in the switch under the tenant's
  leases; the switch answers membership. Figure: average query latency; the measured
  false-positive rate beside the theoretical one for its size and the paper's 2.4 %.
- `PaxosApp`: Multi-Paxos with the three acceptors in the switch (segments 0-2 under the
  tenant's leases; phases 1 and 2, ballots), proposer and learners on hosts; a value is
  chosen when two of three accept. Figure: 99th-percentile latency of one decision,
  against phase 2 to three acceptor hosts.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from inswitch.apps.inaas.controller import KIND, Region
from inswitch.apps.inaas.service import BLOOM_HASHES, BLOOM_INSERT, BLOOM_QUERY, ITEMS, READ, REDUCE, WRITE, Service


#: Retransmission timeout of the tenants' adapters (µs): well above a loaded round trip
#: through the goalkeeper, so only losses are retransmitted.
RTO_US = 1_000


def h32(x: int, salt: int = 0) -> int:
    return zlib.crc32(int(x).to_bytes(8, "little") + bytes([salt]))


def mix64(z: int) -> int:
    """splitmix64's finalizer (a 64-bit mixing function)."""
    m = (1 << 64) - 1
    z = (z + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


@dataclass
class Sizes:
    kv_keys: int = 2000
    kv_gets: int = 1500
    kv_gap_us: int = 4
    sparse_keys: int = 4000
    sparse_nnz: int = 400
    workers: int = 4
    dense_len: int = 600
    bloom_elems: int = 400
    bloom_queries: int = 800
    bloom_gap_us: int = 4
    paxos_instances: int = 600
    paxos_gap_us: int = 4
    server_us: int = 3


QUICK = Sizes(kv_keys=500, kv_gets=300, sparse_keys=1000, sparse_nnz=100, dense_len=160, bloom_elems=100, bloom_queries=200, paxos_instances=150)


class App:
    """One tenant's application: `setup`, then `step` every tick until `finished`."""

    name = "app"
    figure = ""

    def __init__(self, svc: Service, region: Region, inst: int, sizes: Sizes, rng: np.random.Generator) -> None:
        self.svc, self.region, self.inst, self.sz, self.rng = svc, region, inst, sizes, rng
        self.phase = "inaas"
        self.start_us = 0
        self.t: int = -1
        self.server: int = -1
        self.wrong = 0
        self.foreign = 0
        self.result: dict[str, Any] = {}

    def tenant(self, kind_app: str) -> int:
        port = self.svc.raw.new_port()
        r = self.region
        return self.svc.raw.add_tenant(port, KIND[kind_app], r.lease_us, r.max_lease_us, r.subscription, RTO_US)

    def prepare(self, phase: str) -> None:
        """Work before the timed phase (it may run the service)."""

    def begin(self, phase: str) -> None:
        self.phase = phase
        self.start_us = self.svc.now_us
        self.bl: dict[tuple[int, int, int], list] = {}

    # Host-only requests: plain frames to a server, resent after `BL_RTO_US` if lost.
    BL_RTO_US = 300

    def bl_send(self, member: int, server: int, req: int, body: bytes = b"") -> None:
        self.bl[(member, server, req)] = [self.svc.now_us, body]
        self.svc.baseline(member, server, req, int(server).to_bytes(2, "little") + body)

    def bl_take(self, member: int) -> list[tuple[int, int, int, bytes]]:
        """Answers to `member`: (request, server, answered at, body); duplicates dropped."""
        now = self.svc.now_us
        for (m, srv, req), v in self.bl.items():
            if m == member and now - v[0] > self.BL_RTO_US:
                v[0] = now
                self.svc.baseline(m, srv, req, int(srv).to_bytes(2, "little") + v[1])
        _, done, payloads = self.svc.take_baseline(member)
        out = []
        for i, p in enumerate(payloads):
            req, srv = int.from_bytes(p[:4], "little"), int.from_bytes(p[4:6], "little")
            if self.bl.pop((member, srv, req), None) is not None:
                out.append((req, srv, int(done[i]), p[6:]))
        return out

    def step(self) -> None:
        raise NotImplementedError

    def finished(self) -> bool:
        raise NotImplementedError

    def cells(self, half: int = 0, halves: int = 1) -> tuple[int, int]:
        """(base, size) of this tenant's registers (a half of them, if asked)."""
        size = self.region.size // halves
        return self.region.base + half * size, max(1, size)


# ---------------------------------------------------------------------------------- KV
class KvApp(App):
    name = "kv"
    figure = "average latency"

    def setup(self) -> None:
        sz = self.sz
        self.t = self.tenant("kv")
        self.server = self.svc.raw.add_server(sz.server_us)
        ranks = np.arange(1, sz.kv_keys + 1)
        p = 1.0 / ranks**0.95
        self.keys = self.rng.choice(sz.kv_keys, size=sz.kv_gets, p=p / p.sum())
        # 5% of the requests are PUTs (write-through: the store, then the switch's copies).
        self.is_put = self.rng.random(sz.kv_gets) < 0.05
        self.store = {k: (self.inst + 1) * 1_000_000 + k for k in range(sz.kv_keys)}
        # Hot items recorded at the end host (a warm-up sample of the workload).
        history = self.rng.choice(sz.kv_keys, size=sz.kv_gets, p=p / p.sum())
        counts = np.bincount(history, minlength=sz.kv_keys)
        base, half = self.cells(0, 2)
        cap = min(sz.kv_keys, ITEMS * half)
        hot = [int(k) for k in np.argsort(-counts, kind="stable")[:cap] if counts[k] > 0]
        self.where: dict[int, list[tuple[int, int]]] = {}
        for i, k in enumerate(hot):
            places = [(i % ITEMS, base + i // ITEMS)]
            if self.region.replicas > 1:
                places.append(((i + 10) % ITEMS, base + half + i // ITEMS))
            self.where[k] = places
        # Install: one write packet per 20 cells.
        pending: list[tuple[int, int, int]] = []
        for k, pl in self.where.items():
            for seg, idx in pl:
                pending.append((seg, idx, k))
        by_seg: dict[int, list[tuple[int, int]]] = {}
        for seg, idx, k in pending:
            by_seg.setdefault(seg, []).append((idx, k))
        while any(by_seg.values()):
            segs, idxs, keys, vals = [], [], [], []
            for seg, lst in by_seg.items():
                if lst:
                    idx, k = lst.pop()
                    segs.append(seg), idxs.append(idx), keys.append(k + 1), vals.append(self.store[k])
            self.svc.submit(self.t, segs, idxs, [WRITE] * len(segs), keys, vals)
        self.svc.run(100_000)
        self.svc.take(self.t)

    def begin(self, phase: str) -> None:
        super().begin(phase)
        if phase == "host":
            self.inaas_hits = self.hits
        self.next = 0
        self.lat: list[int] = []
        self.start: dict[int, int] = {}
        self.seq_get: dict[int, int] = {}
        self.seq_put: dict[int, int] = {}
        self.pending_put: dict[int, int] = {}
        self.puts: set[int] = set()
        self.expect: dict[int, int] = {}
        self.hits = 0

    def put_value(self, g: int, k: int) -> int:
        return (self.inst + 1) * 1_000_000 + (k + 31 * g) % 999_999

    def step(self) -> None:
        svc, now = self.svc, self.svc.now_us
        while self.next < len(self.keys) and self.start_us + self.next * self.sz.kv_gap_us <= now:
            g, k = self.next, int(self.keys[self.next])
            self.next += 1
            if self.is_put[g]:
                # Write-through: the store (its host-side reference here) and the server
                # first; the switch's copies are skipped by GETs until rewritten.
                v = self.put_value(g, k)
                if self.phase == "inaas":
                    self.store[k] = v
                self.puts.add(g)
                self.bl_send(self.t, self.server, g)
                if self.phase == "inaas" and k in self.where:
                    pl = self.where[k]
                    seq = svc.submit(self.t, [s for s, _ in pl], [i for _, i in pl], [WRITE] * len(pl), [k + 1] * len(pl), [v] * len(pl))
                    self.seq_put[seq] = k
                    self.pending_put[k] = self.pending_put.get(k, 0) + 1
                continue
            self.start[g] = now
            self.expect[g] = self.store[k]
            if self.phase == "inaas" and k in self.where and k not in self.pending_put:
                pl = self.where[k]
                seq = svc.submit(self.t, [s for s, _ in pl], [i for _, i in pl], [READ] * len(pl), [k + 1] * len(pl), [0] * len(pl))
                self.seq_get[seq] = g
            else:
                self.bl_send(self.t, self.server, g)
        d = svc.take(self.t)
        for row in range(len(d.seq)):
            seq = int(d.seq[row])
            if seq in self.seq_put:
                k = self.seq_put.pop(seq)
                self.pending_put[k] -= 1
                if self.pending_put[k] == 0:
                    del self.pending_put[k]
                if not all(d.status[row, s] == 1 for s, _ in self.where.get(k, [])):
                    self.where.pop(k, None)  # not rewritten everywhere: no longer cached
                continue
            g = self.seq_get.pop(seq)
            k = int(self.keys[g])
            if k not in self.where:
                self.bl_send(self.t, self.server, g)
                continue
            got = [int(d.value[row, s]) for s, _ in self.where[k] if d.status[row, s] == 1]
            if got:
                if any(v not in (self.store[k], self.expect[g]) for v in got):
                    self.wrong += 1
                    if any(v // 1_000_000 != self.inst + 1 for v in got):
                        self.foreign += 1
                self.hits += 1
                self.lat.append(int(d.latency_us[row]))
                self.start.pop(g)
            else:
                self.bl_send(self.t, self.server, g)
        for g, _, done, _ in self.bl_take(self.t):
            if g in self.puts:
                self.puts.discard(g)
                continue
            # The server's answer is store[key] itself: nothing to check beyond arrival.
            self.lat.append(done - self.start.pop(g))

    def finished(self) -> bool:
        return self.next >= len(self.keys) and not self.start and not self.pending_put and not self.puts

    def figure_value(self) -> float:
        return float(np.mean(self.lat)) if self.lat else float("nan")

    def extra(self) -> dict[str, Any]:
        return {"hit_ratio": getattr(self, "inaas_hits", self.hits) / max(1, len(self.keys)), "hot_items": len(self.where)}


# ----------------------------------------------------------------------- aggregation
class _AggApp(App):
    """Reduce of (key, value) contributions from `workers` hosts; the last host (the
    parameter server) collects."""

    figure = "throughput"

    def contributions(self) -> list[dict[int, int]]:
        raise NotImplementedError

    def setup(self) -> None:
        sz = self.sz
        self.t = self.tenant(self.name)
        self.members = [self.t] + [self.svc.raw.add_member(self.t, self.svc.raw.new_port()) for _ in range(sz.workers)]
        self.ps = self.members[-1]
        self.workers = self.members[: sz.workers]
        self.server = self.svc.raw.add_server(sz.server_us)
        self.data = self.contributions()
        self.ref: dict[int, int] = {}
        for c in self.data:
            for k, v in c.items():
                self.ref[k] = self.ref.get(k, 0) + v
        self.who: dict[int, int] = {}
        for w, c in enumerate(self.data):
            for k in c:
                self.who[k] = self.who.get(k, 0) | 1 << w
        self.round = 0
        self.missing = 0

    def place(self, k: int) -> tuple[int, int]:
        base, size = self.cells()
        hk = h32(k, 1)
        return hk % ITEMS, base + (hk // ITEMS) % size

    def packets(self, c: dict[int, int]) -> list[list[tuple[int, int]]]:
        """Keys hashed mod 20 into 20 queues; each packet takes the head of every queue."""
        queues: list[list[tuple[int, int]]] = [[] for _ in range(ITEMS)]
        for k, v in c.items():
            queues[self.place(k)[0]].append((k, v))
        out = []
        while any(queues):
            out.append([q.pop(0) for q in queues if q])
        return out

    def prepare(self, phase: str) -> None:
        if phase == "inaas":
            # The parameter server takes the round's registers (short leases) first.
            for pkt in self.packets({k: 0 for k in self.ref}):
                segs = [self.place(k)[0] for k, _ in pkt]
                idxs = [self.place(k)[1] for k, _ in pkt]
                self.svc.submit(self.ps, segs, idxs, [WRITE] * len(segs), [0] * len(segs), [0] * len(segs))

    def renew_prepared(self, phase: str, since_s: float) -> bool:
        """Real runs: the parameter server's registers taken in `prepare` `since_s` ago, with
        the run's lease (`svc.lease_us`, wall µs). If half of it is gone, wait until it has
        lapsed (a holder cannot extend its lease; no attacker is released before this
        tenant's BEGUN) and take them again, so they are held at the phase's start."""
        lease_s = getattr(self.svc, "lease_us", 0) / 1e6
        if phase != "inaas" or lease_s <= 0 or since_s < lease_s / 2:
            return False
        time.sleep(max(0.0, lease_s - since_s) + 0.02)
        self.prepare(phase)
        self.svc.run(100_000)
        return True

    def begin(self, phase: str) -> None:
        super().begin(phase)
        self.svc.take(self.ps)
        self.round += 1
        self.stage = "send"
        self.outstanding: dict[tuple[int, int], list[int]] = {}
        self.got: dict[int, int] = {}
        self.end_us: Optional[int] = None
        self.ps_frames = 0
        if phase == "inaas":
            for w, c in enumerate(self.data):
                for pkt in self.packets(c):
                    segs, idxs, keys, vals = [], [], [], []
                    for k, v in pkt:
                        seg, idx = self.place(k)
                        segs.append(seg), idxs.append(idx), keys.append((k & 0xFFFF) << 16 | w), vals.append(v)
                    seq = self.svc.submit(self.workers[w], segs, idxs, [REDUCE] * len(segs), keys, vals)
                    self.outstanding[(self.workers[w], seq)] = [k for k, _ in pkt]
        else:
            self.expect = 0
            for w, c in enumerate(self.data):
                for pkt in self.packets(c):
                    self.bl_send(self.workers[w], self.server, self.expect, np.asarray([[k, v] for k, v in pkt], dtype="<i8").tobytes())
                    self.expect += 1
            self.host_sum: dict[int, int] = {}

    def step(self) -> None:
        svc = self.svc
        if self.phase == "host":
            for w in self.workers:
                for _, _, done, body in self.bl_take(w):
                    arr = np.frombuffer(body, dtype="<i8").reshape(-1, 2)
                    for k, v in arr:
                        self.host_sum[int(k)] = self.host_sum.get(int(k), 0) + int(v)
                    self.expect -= 1
                    self.end_us = max(self.end_us or 0, done)
            if self.expect == 0:
                self.stage = "done"
                self.got = self.host_sum
            return
        if self.stage == "send":
            for w in self.workers:
                d = svc.take(w)
                for row in range(len(d.seq)):
                    keys = self.outstanding.pop((w, int(d.seq[row])))
                    if d.gave_up[row]:
                        self.wrong += len(keys)
            if not self.outstanding:
                self.stage = "collect"
                self.to_collect = sorted(self.ref)
                self.collect_tries: dict[int, int] = {}
                self.issue_collects(self.to_collect)
        elif self.stage == "collect":
            d = svc.take(self.ps)
            self.ps_frames += len(d.seq)
            again = []
            for row in range(len(d.seq)):
                keys = self.outstanding.pop((self.ps, int(d.seq[row])))
                for k in keys:
                    seg, _ = self.place(k)
                    if d.status[row, seg] == 1:
                        self.got[k] = int(d.value[row, seg])
                    else:
                        # Not complete yet, or the collect itself took the lease: ask again.
                        self.collect_tries[k] = self.collect_tries.get(k, 0) + 1
                        if self.collect_tries[k] < 50:
                            again.append(k)
                        else:
                            self.missing += 1
            if again:
                self.issue_collects(again)
            if not self.outstanding:
                self.stage = "free"
                self.end_us = svc.now_us
                # Free the cells for the next user (idempotent writes of (0, 0)).
                for pkt in self.packets({k: 0 for k in self.ref}):
                    segs = [self.place(k)[0] for k, _ in pkt]
                    idxs = [self.place(k)[1] for k, _ in pkt]
                    svc.submit(self.ps, segs, idxs, [WRITE] * len(segs), [0] * len(segs), [0] * len(segs))
        elif self.stage == "free":
            svc.take(self.ps)
            if svc.raw.in_flight(self.ps) == 0:
                self.stage = "done"

    def issue_collects(self, keys: list[int]) -> None:
        for pkt in self.packets({k: 0 for k in keys}):
            segs, idxs, ks = [], [], []
            for k, _ in pkt:
                seg, idx = self.place(k)
                segs.append(seg), idxs.append(idx), ks.append((k & 0xFFFF) << 16 | self.who[k])
            seq = self.svc.submit(self.ps, segs, idxs, [READ] * len(segs), ks, [0] * len(segs))
            self.outstanding[(self.ps, seq)] = [k for k, _ in pkt]

    def finished(self) -> bool:
        return self.stage == "done"

    def check(self) -> None:
        for k, v in self.ref.items():
            if k in self.got and self.got[k] != v:
                self.wrong += 1
        self.missing_keys = sum(1 for k in self.ref if k not in self.got)
        self.wrong += self.missing_keys

    def figure_value(self) -> float:
        """Aggregated contributions per µs. The parameter server spends `server_us` on every
        frame it receives in both versions: host-only that is the server's queue (in the
        service); with INaaS the collect answers, added here as serial work."""
        n = sum(len(c) for c in self.data)
        ps_work = self.ps_frames * self.sz.server_us if self.phase == "inaas" else 0
        return n / max(1, (self.end_us or self.svc.now_us) - self.start_us + ps_work)


class SparseApp(_AggApp):
    name = "sparse"

    def contributions(self) -> list[dict[int, int]]:
        sz = self.sz
        out = []
        for _ in range(sz.workers):
            keys = self.rng.choice(min(sz.sparse_keys, 65535), size=sz.sparse_nnz, replace=False)
            out.append({int(k) + 1: int(self.rng.integers(-1000, 1000)) for k in keys})
        return out


class DenseApp(_AggApp):
    name = "dense"
    SCALE = 1 << 16

    def place(self, k: int) -> tuple[int, int]:
        # An array: position k-1 goes to segment (k-1) mod 20, registers in order (keys
        # beyond the region share registers and meet as mismatches at the goalkeeper).
        base, size = self.cells()
        return (k - 1) % ITEMS, base + ((k - 1) // ITEMS) % size

    def contributions(self) -> list[dict[int, int]]:
        sz = self.sz
        self.floats = self.rng.normal(0, 0.05, size=(sz.workers, sz.dense_len))
        q = np.round(self.floats * self.SCALE).astype(np.int64)
        return [{i + 1: int(q[w, i]) for i in range(sz.dense_len)} for w in range(sz.workers)]

    def extra(self) -> dict[str, Any]:
        if not self.got:
            return {}
        exact = self.floats.sum(axis=0)
        ours = np.array([self.got.get(i + 1, 0) for i in range(self.sz.dense_len)], dtype=np.float64) / self.SCALE
        err = {}
        for bits in (4, 8, 12, 16):
            s = 1 << bits
            qq = np.round(self.floats * s).sum(axis=0) / s
            err[f"scale_2^{bits}"] = float(np.max(np.abs(qq - exact)))
        return {
            # Which path gives this run's Table II DML row (the real runs train a model:
            # `dense_train.py`).
            "dml_path": "model: random normal floats quantized to 2^-16 and summed in inaas's kv_N.reduce registers (no model trained)",
            "quantization_scale": self.SCALE,
            "max_abs_error_vs_float": float(np.max(np.abs(ours - exact))),
            "max_abs_error_by_scale": err,
        }


# ---------------------------------------------------------------------------- Bloom
class BloomApp(App):
    """A Bloom filter whose membership the switch answers (crates/programs/src/inaas/bloom.rs):
    K = 3 hash functions, hash function j's bits in the switch's Bloom array j under the
    tenant's leases of segment j (its region: `size` registers of 32 bits each). Inserts
    and queries are INaaS packets; the switch ANDs the probed bits and answers present or
    absent. The host keeps the same filter (the server's copy): the reference every switch
    answer is checked against, and the fallback when the switch cannot answer (a probe
    whose lease the tenant does not hold). The number of elements is chosen so that the
    theoretical rate (1 - e^{-kn/m})^k is the paper's 2.4 % for the region's size."""

    name = "bloom"
    figure = "average latency"
    K = BLOOM_HASHES
    PAPER_FP = 0.024
    #: Non-member lookups sent through the switch to measure the false-positive rate.
    FP_PROBES = 4000

    def setup(self) -> None:
        sz = self.sz
        self.t = self.tenant("bloom")
        self.server = self.svc.raw.add_server(sz.server_us)
        self.base, self.size = self.cells()
        self.m = self.K * self.size * 32
        self.n = max(1, round(-(self.m / self.K) * math.log(1 - self.PAPER_FP ** (1 / self.K))))
        universe = self.rng.choice(10**9, size=self.n + sz.bloom_queries + self.FP_PROBES, replace=False)
        self.members = set(int(x) for x in universe[: self.n])
        # Timed queries: one in four a member (no false negative, ever), the rest not.
        outsiders = [int(x) for x in universe[self.n : self.n + sz.bloom_queries]]
        ins = sorted(self.members)
        self.queries = [ins[int(self.rng.integers(len(ins)))] if i % 4 == 0 else outsiders[i] for i in range(sz.bloom_queries)]
        self.fp_probes = [int(x) for x in universe[self.n + sz.bloom_queries :]]
        # Take the leases of the region in segments 0..K (as the Paxos tenant does).
        for idx in range(self.base, self.base + self.size):
            self.svc.submit(self.t, list(range(self.K)), [idx] * self.K, [WRITE] * self.K, [0] * self.K, [0] * self.K)
        self.svc.run(100_000)
        d = self.svc.take(self.t)
        self.leased = int((d.status[:, : self.K] == 1).all(axis=1).sum())
        # The host's copy, and the inserts through the switch.
        self.bits = np.zeros((self.K, self.size), dtype=np.uint32)
        for x in ins:
            for j, (idx, mask) in enumerate(self.locate(x)):
                self.bits[j, idx - self.base] |= mask
        self.switch_answers(ins, BLOOM_INSERT)

    def locate(self, x: int) -> list[tuple[int, int]]:
        """Per hash function: (register index in the region, bit mask); the same hashing as
        `hostlib::inaas::bloom::Layout::probes` (CRC32 with salts is linear: its cell and
        bit would be correlated)."""
        out = []
        for j in range(self.K):
            h = mix64(x ^ mix64(j + 1))
            out.append((self.base + (h >> 5) % self.size, 1 << (h & 31)))
        return out

    def host_contains(self, x: int) -> bool:
        return all(int(self.bits[j, idx - self.base]) & mask for j, (idx, mask) in enumerate(self.locate(x)))

    def submit_bloom(self, x: int, op: int) -> int:
        loc = self.locate(x)
        return self.svc.submit(self.t, list(range(self.K)), [i for i, _ in loc], [op] * self.K, [m for _, m in loc], [0] * self.K)

    @staticmethod
    def answer(status: np.ndarray, value: np.ndarray) -> Optional[bool]:
        """The switch's answer from one completion's first K items: False if a probe it read
        is unset, True if it read all and all are set, None if it could not say."""
        done = status == 1
        if (done & (value == 0)).any():
            return False
        return True if done.all() else None

    def switch_answers(self, xs: list[int], op: int) -> list[Optional[bool]]:
        """Send `xs` through the switch in windows (untimed); its answers, in order."""
        out: list[Optional[bool]] = []
        for start in range(0, len(xs), 256):
            seqs = [self.submit_bloom(x, op) for x in xs[start : start + 256]]
            self.svc.run(100_000)
            d = self.svc.take(self.t)
            by_seq = {int(d.seq[r]): self.answer(d.status[r, : self.K], d.value[r, : self.K]) for r in range(len(d.seq))}
            out.extend(by_seq.get(s) for s in seqs)
        return out

    def prepare(self, phase: str) -> None:
        if phase != "inaas":
            return
        # The false-positive rate of the switch's filter, on lookups of non-members.
        got = self.switch_answers(self.fp_probes, BLOOM_QUERY)
        ref = [self.host_contains(x) for x in self.fp_probes]
        answered = [(g, r) for g, r in zip(got, ref) if g is not None]
        self.wrong += sum(1 for g, r in answered if g != r)
        self.fp = (sum(1 for g, _ in answered if g), len(answered), sum(ref))

    def begin(self, phase: str) -> None:
        super().begin(phase)
        self.next = 0
        self.lat: list[int] = []
        self.start: dict[int, int] = {}
        self.seq_q: dict[int, int] = {}
        self.answers: dict[int, bool] = {}
        self.by_switch = 0

    def step(self) -> None:
        svc, now = self.svc, self.svc.now_us
        while self.next < len(self.queries) and self.start_us + self.next * self.sz.bloom_gap_us <= now:
            q = self.next
            self.next += 1
            self.start[q] = now
            if self.phase == "inaas":
                self.seq_q[self.submit_bloom(self.queries[q], BLOOM_QUERY)] = q
            else:
                self.bl_send(self.t, self.server, q)
        d = svc.take(self.t)
        for row in range(len(d.seq)):
            q = self.seq_q.pop(int(d.seq[row]))
            a = self.answer(d.status[row, : self.K], d.value[row, : self.K])
            if a is None:
                # A probe the switch could not read (no lease): ask the server's copy.
                self.bl_send(self.t, self.server, q)
                continue
            if a != self.host_contains(self.queries[q]):
                self.wrong += 1
            self.answers[q] = a
            self.by_switch += 1
            self.lat.append(int(d.latency_us[row]))
            self.start.pop(q)
        for q, _, done, _ in self.bl_take(self.t):
            self.answers[q] = self.host_contains(self.queries[q])
            self.lat.append(done - self.start.pop(q))

    def finished(self) -> bool:
        return self.next >= len(self.queries) and not self.start

    def check(self) -> None:
        # No false negatives, ever.
        for q, yes in self.answers.items():
            if self.queries[q] in self.members and not yes:
                self.wrong += 1
        self.by_switch_inaas = self.by_switch

    def figure_value(self) -> float:
        return float(np.mean(self.lat)) if self.lat else float("nan")

    def extra(self) -> dict[str, Any]:
        fp, answered, ref_fp = getattr(self, "fp", (0, 0, 0))
        theory = (1 - math.exp(-self.K * self.n / self.m)) ** self.K
        return {
            "bloom_fp_rate": fp / answered if answered else None,
            "bloom_fp_theory": theory,
            "bloom_fp_paper": self.PAPER_FP,
            "bloom_fp_host_copy": ref_fp / len(self.fp_probes),
            "bloom_fp_probes_answered_by_switch": answered,
            "bloom_fp_probes": len(self.fp_probes),
            "bloom_elements": self.n,
            "bloom_bits": self.m,
            "bloom_hashes": self.K,
            "bloom_cells_leased": self.leased,
            "bloom_queries_answered_by_switch": getattr(self, "by_switch_inaas", 0),
            "bloom_fill": float(sum(int(w).bit_count() for w in self.bits.ravel())) / self.m,
        }


# ---------------------------------------------------------------------------- Paxos
class PaxosApp(App):
    """Multi-Paxos with the three acceptors in the switch (P4xos-style state in the tenant's
    leased registers, `crates/programs/src/inaas/paxos.rs`), the proposer and three
    learners on hosts (`crates/hostlib/src/inaas/paxos.rs`): phases 1 and 2, ballots, a
    gap-free log per learner. The figure is the tail latency of one decision, from the
    value's arrival to its 2b majority. Host-only, on real processes (`tenants run --real`):
    the same Paxos (a second proposer and three learners of `InaasPaxosHosts`, phases 1 and
    2) against three acceptor processes (`hostlib::inaas::paxos::HostAcceptor`); in the
    in-process model: phase 2 to three acceptor hosts that echo."""

    name = "paxos"
    figure = "tail latency (p99)"
    ACCEPTORS = 3

    def setup(self) -> None:
        self.t = self.tenant("paxos")
        self.servers = [self.svc.raw.add_server(self.sz.server_us) for _ in range(self.ACCEPTORS)]
        self.values = [int(self.rng.integers(1, 2**31 - 2)) for _ in range(self.sz.paxos_instances)]
        self.base, self.size = self.cells()
        # Take the acceptors' registers (leases) once: the switch clears their Paxos state.
        for idx in range(self.base, self.base + self.size):
            self.svc.submit(self.t, [0, 1, 2], [idx] * 3, [WRITE] * 3, [0] * 3, [0] * 3)
        self.svc.run(100_000)
        d = self.svc.take(self.t)
        # Acceptors live only under leases this tenant holds for good: an acceptor must
        # never forget a promise. A lease that expires (the FCFS and FQ baselines give
        # every tenant 10 ms) or a region shared with others leaves it without acceptors
        # in the switch: then it runs host-only in both phases.
        from inswitch.apps.inaas.controller import MAX_LEASE_US

        held = bool(len(d.seq) == self.size and (d.status[:, :3] == 1).all())
        self.in_switch = held and self.region.lease_us >= MAX_LEASE_US
        if self.in_switch:
            self.svc.raw.paxos_start(self.t, self.base, self.size)
            for _ in range(200):
                self.svc.raw.paxos_step(self.t)
                self.svc.run_for(5)

    def prepare(self, phase: str) -> None:
        super().prepare(phase)
        self.host_paxos = phase == "host" and hasattr(self.svc.raw, "paxos_host_start")
        if self.host_paxos:
            # Phase 1 on the host acceptors' window before the timed phase, as the switch's
            # acceptors get theirs in `setup`.
            raw = self.svc.raw
            raw.paxos_host_start(self.t, self.base, self.size)  # type: ignore[attr-defined]
            for _ in range(5000):
                raw.paxos_host_step(self.t)  # type: ignore[attr-defined]
                if self.svc.host_paxos.leading:  # type: ignore[attr-defined]
                    break
                self.svc.run_for(5)

    def begin(self, phase: str) -> None:
        super().begin(phase)
        self.next = 0
        self.lat: list[int] = []
        self.start: dict[int, int] = {}
        self.acks: dict[int, int] = {}
        self.switch_phase = phase == "inaas" and self.in_switch
        self.host_paxos = phase == "host" and getattr(self, "host_paxos", False)

    def step(self) -> None:
        svc, now = self.svc, self.svc.now_us
        while self.next < len(self.values) and self.start_us + self.next * self.sz.paxos_gap_us <= now:
            i = self.next
            self.next += 1
            self.start[i] = now
            if self.switch_phase:
                svc.raw.paxos_propose(self.t, self.values[i])
            elif self.host_paxos:
                svc.raw.paxos_host_propose(self.t, self.values[i])  # type: ignore[attr-defined]
            else:
                for s in self.servers:
                    self.bl_send(self.t, s, i, int(self.values[i]).to_bytes(4, "little"))
        if self.switch_phase:
            # One proposer, no crash: instance k carries the k-th value (checked in `check`).
            for inst, _ in svc.raw.paxos_step(self.t):
                if inst in self.start:
                    self.lat.append(now - self.start.pop(inst))
            return
        if self.host_paxos:
            # The same proposer and learners, the acceptors in host processes.
            for inst, _ in svc.raw.paxos_host_step(self.t):  # type: ignore[attr-defined]
                if inst in self.start:
                    self.lat.append(now - self.start.pop(inst))
            return
        for i, _, done, body in self.bl_take(self.t):
            self.acks[i] = self.acks.get(i, 0) + 1
            if self.acks[i] == 2 and i in self.start:  # a majority of 3
                self.lat.append(done - self.start.pop(i))

    def finished(self) -> bool:
        return self.next >= len(self.values) and not self.start

    def check(self) -> None:
        """Every learner delivered exactly the values, in order; no learner saw two values
        chosen for one instance (and `paxos_safety`'s checks, reported in `extra`)."""
        if not self.in_switch:
            return
        logs, violations = self.svc.raw.paxos_logs(self.t)
        self.wrong += len(violations)
        for log in logs:
            if list(log) != self.values:
                self.wrong += 1
        self.safety = paxos_safety(logs, violations, self.values)

    def check_host(self) -> None:
        """After the host-only phase on real processes: the host Paxos's learners delivered
        exactly the values, in order (one proposer), and `paxos_safety` found nothing."""
        if not getattr(self, "host_paxos", False):
            return
        logs, violations = self.svc.raw.paxos_host_logs(self.t)  # type: ignore[attr-defined]
        found, gap_free = paxos_safety(logs, violations, self.values)
        self.wrong += len(found) + sum(1 for log in logs if list(log) != self.values)
        st = self.svc.host_paxos.stats()  # type: ignore[attr-defined]
        self.host_safety = {"host_violations": found, "host_delivered": [len(x) for x in logs], "host_gap_free": gap_free,
                            "host_proposer": dict(st)}

    def figure_value(self) -> float:
        return float(np.percentile(self.lat, 99)) if self.lat else float("nan")

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"acceptors_in_switch": self.in_switch,
                               "host_only_kind": "paxos: phases 1 and 2, three acceptor processes" if getattr(self, "host_paxos", False) else "phase 2 to three echoing hosts"}
        out.update(getattr(self, "host_safety", {}))
        if hasattr(self, "safety"):
            found, gap_free = self.safety
            logs, _ = self.svc.raw.paxos_logs(self.t)
            out.update({"took_over": False, "violations": found, "delivered": [len(x) for x in logs], "gap_free": gap_free})
        return out


def paxos_safety(logs: list[list[int]], learner_violations: list[str], must_deliver: list[int],
                 dead_decided: Sequence[tuple[int, int]] = ()) -> tuple[list[str], bool]:
    """The safety check of a Paxos run on its learners' delivered logs: (violations, gap_free).

    Violations: what the learners saw contradict a decision (two values for one instance at
    one ballot, or two decisions), any two learners' logs that differ at an instance (each
    log must be a prefix of the longest), a value the dead leader saw chosen by a majority
    (`dead_decided`: (instance, value)) missing or changed at its instance in any log, and a
    value that must be delivered (the survivor's) missing from any log. `gap_free`: every
    learner delivered as far as the longest log (a learner's log has no hole by
    construction: it delivers in order)."""
    out = list(learner_violations)
    longest = max(logs, key=len, default=[])
    for n, log in enumerate(logs):
        for i, v in enumerate(log):
            if longest[i] != v:
                out.append(f"instance {i}: learner {n} delivered {v}, another learner {longest[i]}")
                break
    for inst, v in dead_decided:
        for n, log in enumerate(logs):
            if inst >= len(log):
                out.append(f"instance {inst}: value {v}, chosen under the dead leader, not delivered by learner {n}")
            elif log[inst] != v:
                out.append(f"instance {inst}: value {v} chosen under the dead leader, learner {n} delivered {log[inst]}")
    need = set(must_deliver)
    for n, log in enumerate(logs):
        missing = need - set(log)
        if missing:
            out.append(f"learner {n}: {len(missing)} of {len(need)} values to deliver missing")
    return out, bool(logs) and all(len(log) == len(longest) for log in logs)


APPS: dict[str, type[App]] = {"kv": KvApp, "sparse": SparseApp, "dense": DenseApp, "bloom": BloomApp, "paxos": PaxosApp}


@dataclass
class Outcome:
    app: App
    inaas: float = 0.0
    host: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
