"""Trace-driven lock-manager runs: Hare (dynamic offloading with dirty-state movement),
NetLock-style static offloading, and no offloading, on the in-process switch running
`hare_lock`.

Closed-loop clients take locks in the order of one seeded sequence (the same for every
system): acquire (shared or exclusive), hold for `hold_s`, release. Requests for
offloaded locks are granted, queued (8 per lock) and released by the switch; the others by
the lock's backend server, a FIFO queue with a fixed service time. Every grant is checked
against a plain lock table: never two exclusive holders nor an exclusive beside shared
ones, no grant for a request that is not waiting, and every request granted by the end.

Hare moves a lock's state (holders, mode, queue) back to its server before evicting it and
onto the switch when offloading it; while a lock moves, its requests are answered "retry".
"""

from __future__ import annotations

import heapq
import math
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native
from inswitch.apps.hare import kvsim
from inswitch.apps.hare.workload import initial_order, shifted, zipf_cdf

LOCK_SYSTEMS = ("hare", "netlock", "none")
OP_ACQUIRE, OP_RELEASE, OP_GRANT, OP_RELEASE_ACK = 5, 6, 7, 8
OP_DATAMV_TO_SERVER = 19
QUEUE = 8
GRANT_SESSION = 91
MODE_FREE, MODE_SHARED, MODE_EXCL = 0, 1, 2
KEY = 4


@dataclass
class LockParams:
    n_locks: int = 2000
    cache: int = 64
    clients: int = 16
    hold_s: float = 1e-3
    service_s: float = 100e-6
    link_s: float = 2e-6
    retry_s: float = 200e-6
    excl_ratio: float = 0.5
    alpha: float = 0.99
    duration: float = 2.0
    shift_at: Optional[float] = 1.0
    batch: int = 16
    t_wait: float = 0.1
    table_rate: float = 10_000.0
    packet_rate: float = 1_000_000.0
    epoch_s: float = 0.1
    seed: int = 5
    servers: int = 2


def lock_key(i: int) -> bytes:
    return int(i).to_bytes(KEY, "big")


@dataclass
class LockState:
    holders: int = 0
    mode: int = MODE_FREE
    queue: Optional[deque] = None

    def __post_init__(self) -> None:
        if self.queue is None:
            self.queue = deque()


class LockServer:
    """A backend lock server: unbounded FIFO queues, NOO-Stat per lock, 'retry' for locks
    that are moving."""

    def __init__(self, idx: int, k: int) -> None:
        self.idx = idx
        self.locks: dict[int, LockState] = {}
        self.migrating: set[int] = set()
        self.noo = _native.NooStat(k)
        self.free_at = 0.0

    def st(self, lock: int) -> LockState:
        return self.locks.setdefault(lock, LockState())

    def acquire(self, lock: int, client: int, ip: int, seq: int, excl: bool) -> list[tuple[int, int, int]]:
        """Grants to send now: (client, seq, status)."""
        s = self.st(lock)
        want = MODE_EXCL if excl else MODE_SHARED
        if not s.queue and (s.holders == 0 or (s.mode == MODE_SHARED and want == MODE_SHARED)):
            s.holders += 1
            s.mode = want
            return [(client, seq, 0)]
        s.queue.append((client, ip, seq, excl))
        return []

    def release(self, lock: int) -> list[tuple[int, int, int]]:
        s = self.st(lock)
        s.holders = max(0, s.holders - 1)
        out = []
        while s.queue:
            client, _ip, seq, excl = s.queue[0]
            if s.holders == 0 or (not excl and s.mode == MODE_SHARED):
                s.queue.popleft()
                s.holders += 1
                s.mode = MODE_EXCL if excl else MODE_SHARED
                out.append((client, seq, 0))
                if excl:
                    break
            else:
                break
        if s.holders == 0:
            s.mode = MODE_FREE
        return out


class LockRun:
    def __init__(self, system: str, p: LockParams) -> None:
        if system not in LOCK_SYSTEMS:
            raise ValueError(f"system must be one of {', '.join(LOCK_SYSTEMS)}")
        self.system, self.p = system, p
        rng = np.random.default_rng(p.seed)
        n_tx = int(p.clients * p.duration / p.hold_s * 1.5) + 100
        cdf = zipf_cdf(p.n_locks, p.alpha)
        self.ranks = np.minimum(np.searchsorted(cdf, rng.uniform(size=n_tx)), p.n_locks - 1)
        self.excl = rng.uniform(size=n_tx) < p.excl_ratio
        self.order0 = initial_order(p.n_locks, False, rng)
        self.order1 = shifted(self.order0, "coldest-to-top", p.cache, rng)
        self.next_tx = 0
        self.sw = _native.SimSwitch(["forward", f"hare_lock:key={KEY}:slots={max(1, p.cache)}"], 1 + p.servers)
        hosts = [(1, 0)] + [(2 + s, 1 + s) for s in range(p.servers)] + [(0xFE, 0)]
        for h, port in hosts:
            self.sw.table_write("forward", "l2_dmac", "insert", [kvsim._mac(h)], "l2_forward", [port.to_bytes(2, "big")])
            self.sw.table_write("forward", "l2_smac", "insert", [kvsim._mac(h)], "nop", [])
        self.sw.table_write("hare_lock", "lock_hosts", "insert", [kvsim._ip(1)], "set_host", [(0).to_bytes(2, "big"), kvsim._mac(1)])
        for s in range(p.servers):
            self.sw.table_write("hare_lock", "control_ports", "insert", [(1 + s).to_bytes(2, "big")], "allow_control", [])
        self.sw.clone_to_recirc(GRANT_SESSION)
        self.servers = [LockServer(s, p.batch) for s in range(p.servers)]
        self.emat = _native.HareEmat(KEY, max(1, p.cache))
        self.slots: dict[int, int] = {}  # slot -> lock
        self.h_base: dict[int, int] = {}
        self.events: list[tuple[float, int, str, int]] = []
        self.evseq = 0
        self.client_state: list[Any] = [None] * p.clients
        self.seq = 0
        # Reference lock table (client view).
        self.shared: dict[int, set[int]] = {}
        self.exclusive: dict[int, int] = {}
        self.correct = True
        self.violations: list[str] = []
        self.epochs = int(math.ceil(p.duration / p.epoch_s)) + 1
        self.done = np.zeros(self.epochs, dtype=np.int64)
        self.lat: list[list[float]] = [[] for _ in range(self.epochs)]
        self.switch_grants = 0
        self.server_grants = 0
        self.retries = 0
        self.table_ops = 0
        self.packet_ops = 0
        self.moves = 0
        self.busy_until = 0.0
        self.next_round = p.t_wait
        self.next_age = 1.0
        self._ctl: list[tuple[float, Callable[[], None]]] = []
        if system == "netlock":
            # Static offloading in the initial phase: the hottest locks of the initial workload.
            for lock in self.order0[: p.cache]:
                self.offload(int(lock), self.emat.free_slot())

    # ---- plumbing ----------------------------------------------------------------------

    def server_of(self, lock: int) -> int:
        return lock % self.p.servers

    def push(self, t: float, kind: str, c: int) -> None:
        self.evseq += 1
        heapq.heappush(self.events, (t, self.evseq, kind, c))

    def ep(self, t: float) -> int:
        return min(self.epochs - 1, max(0, int(t / self.p.epoch_s)))

    def fail(self, msg: str) -> None:
        self.correct = False
        if len(self.violations) < 10:
            self.violations.append(msg)

    def cpu(self, op: int, slot: int, status: int = 0, value: bytes = b"", aux: int = 0) -> list[bytes]:
        self.packet_ops += 1
        kf = KEY if op in (kvsim.OP_DATAMV_TO_SWITCH, OP_DATAMV_TO_SERVER) else 0
        return self.sw.packet_out(_native.hare_frame(kvsim.CPU, kvsim.server_ep(0), op, b"", kf, value, 0, slot, aux, status, 0))

    def server_ctl(self, s: int, op: int, slot: int, aux: int, value: bytes) -> bytes:
        """A control packet from server `s`; returns the switch's reply value."""
        self.packet_ops += 1
        ep = kvsim.server_ep(s)
        out = self.sw.process(1 + s, [_native.hare_frame(ep, ep, op, b"", KEY, value, 0, slot, aux, 0, 0)])
        m = _native.hare_parse(out[0][1]) if out else None
        return bytes(m[7]) if m else b""

    # ---- migration of dirty state ------------------------------------------------------

    def offload(self, lock: int, slot: int, now: float = 0.0) -> bool:
        """Move a lock from its server onto the switch (state, then e-MAT entry, then
        valid). The switch queues 8 waiters: further ones are told to retry (they come
        back to the switch)."""
        srv = self.servers[self.server_of(lock)]
        s = srv.st(lock)
        excess = []
        while len(s.queue) > QUEUE:
            excess.append(s.queue.pop())
        if excess:
            ep = kvsim.server_ep(srv.idx)
            frames = [_native.hare_frame(ep, kvsim.CLIENT, OP_GRANT, lock_key(lock), KEY, b"\0" * 8, sq, 0, cl, 1, 0) for cl, _ip, sq, _x in reversed(excess)]
            for port, rf in self.sw.process(1 + srv.idx, frames):
                if port == 0:
                    self.deliver(now + self.p.link_s, rf, via_switch=False)
        self.cpu(kvsim.OP_STATE_SET, slot, kvsim.STATE_REPLACING)
        mask, cells = 0, []
        for i, (client, ip, seq, excl) in enumerate(s.queue):
            cells.append(struct.pack(">II", (client << 16) | (seq & 0xFFFF), ip))
            mask |= (1 << i) if excl else 0
        for i, c in enumerate(cells):
            self.server_ctl(srv.idx, kvsim.OP_DATAMV_TO_SWITCH, slot, i, c)
        hi = 0 | (len(cells) << 3) | (mask << 8)
        lo = s.holders | (s.mode << 16)
        self.server_ctl(srv.idx, kvsim.OP_DATAMV_TO_SWITCH, slot, QUEUE, struct.pack(">II", hi, lo))
        for mat, write, first, seg, index in self.emat.insert(lock_key(lock), slot):
            self.sw.table_write("hare_lock", f"emat_{mat + 1}", write, [first, seg], "set_index", [index.to_bytes(2, "big")])
            self.table_ops += 1
        self.cpu(kvsim.OP_STAT_FETCH, slot, 1, b"\0\0\0\0")
        self.cpu(kvsim.OP_STATE_SET, slot, kvsim.STATE_VALID)
        srv.locks.pop(lock, None)
        srv.noo.forget(lock_key(lock))
        self.slots[slot] = lock
        self.moves += 1
        return True

    def evict(self, slot: int) -> int:
        """Move a lock's dirty state from the switch back to its server."""
        lock = self.slots.pop(slot)
        srv = self.servers[self.server_of(lock)]
        self.cpu(kvsim.OP_STATE_SET, slot, kvsim.STATE_REPLACING)
        lo = struct.unpack(">I", self.server_ctl(srv.idx, OP_DATAMV_TO_SERVER, slot, QUEUE, b"\0" * 8)[4:8])[0]
        hi = struct.unpack(">I", self.server_ctl(srv.idx, OP_DATAMV_TO_SERVER, slot, QUEUE + 1, b"\0" * 8)[4:8])[0]
        holders, mode = lo & 0xFFFF, (lo >> 16) & 3
        head, length, mask = hi & 7, (hi >> 3) & 15, (hi >> 8) & 0xFF
        q: deque = deque()
        for k in range(length):
            pos = (head + k) % QUEUE
            v = self.server_ctl(srv.idx, OP_DATAMV_TO_SERVER, slot, pos, b"\0" * 8)
            tag, ip = struct.unpack(">II", v[:8])
            q.append((tag >> 16, ip, tag & 0xFFFF, bool(mask & (1 << pos))))
        srv.locks[lock] = LockState(holders, mode, q)
        _s, ops = self.emat.remove(lock_key(lock))
        for mat, write, first, seg, index in ops:
            self.sw.table_write("hare_lock", f"emat_{mat + 1}", write, [first, seg], "set_index", [index.to_bytes(2, "big")])
            self.table_ops += 1
        self.cpu(kvsim.OP_STATE_SET, slot, kvsim.STATE_EMPTY)
        self.moves += 1
        return lock

    # ---- the run -----------------------------------------------------------------------

    def lock_at(self, tx: int, t: float) -> int:
        order = self.order1 if self.p.shift_at is not None and t >= self.p.shift_at else self.order0
        return int(order[self.ranks[tx % len(self.ranks)]])

    def run(self, progress: Optional[Callable[[float], None]] = None) -> dict[str, Any]:
        p = self.p
        for c in range(p.clients):
            self.push(c * 1e-5, "start", c)
        last = 0.0
        while self.events:
            t, _s, kind, c = heapq.heappop(self.events)
            if self.system == "hare":
                while t >= self.next_round:
                    if self.next_round >= self.busy_until:
                        self.hare_round(self.next_round)
                    self.next_round += p.t_wait
            while self._ctl and self._ctl[0][0] <= t:
                self._ctl.pop(0)[1]()
            if kind == "start":
                if t >= p.duration:
                    continue
                tx = self.next_tx
                self.next_tx += 1
                self.seq += 1
                lock = self.lock_at(tx, t)
                self.client_state[c] = {"lock": lock, "excl": bool(self.excl[tx % len(self.excl)]), "seq": self.seq & 0xFFFF, "t0": t, "phase": "acq"}
                self.send(t, c, OP_ACQUIRE)
            elif kind == "retry_acq":
                self.send(t, c, OP_ACQUIRE)
            elif kind == "release":
                self.send(t, c, OP_RELEASE)
            if progress and t - last > 0.05:
                last = t
                progress(min(1.0, t / p.duration))
        # Everyone finished: every request was granted and released.
        for c, st in enumerate(self.client_state):
            if st is not None and st["phase"] != "done":
                self.fail(f"client {c} never finished: {st}")
        return self.result()

    def send(self, t: float, c: int, op: int) -> None:
        st = self.client_state[c]
        lock = st["lock"]
        frame = _native.hare_frame(kvsim.CLIENT, kvsim.server_ep(self.server_of(lock)), op, lock_key(lock), KEY, b"\0" * 8,
                                   st["seq"], 0, c, 1 if st["excl"] else 0, 0)
        out = self.sw.process(0, [frame])
        self.handle(t + self.p.link_s, out)

    def handle(self, t: float, out: list) -> None:
        for port, f in out:
            if port == 0:
                self.deliver(t + self.p.link_s, f, via_switch=True)
            else:
                self.serve(port - 1, t, f)

    def serve(self, s: int, t: float, f: bytes) -> None:
        m = _native.hare_parse(f)
        if m is None:
            return
        op, _fl, seq, _hi, client, status, key, _v, ip, _port = m
        lock = int.from_bytes(bytes(key), "big")
        srv = self.servers[s]
        start = max(t, srv.free_at)
        srv.free_at = start + self.p.service_s
        t1 = srv.free_at
        replies: list[bytes] = []
        ep = kvsim.server_ep(s)
        srv.noo.record(bytes(key))
        ipn = int.from_bytes(bytes(ip), "big")
        if lock in srv.migrating:
            rop = OP_GRANT if op == OP_ACQUIRE else OP_RELEASE_ACK
            replies.append(_native.hare_frame(ep, kvsim.CLIENT, rop, bytes(key), KEY, b"\0" * 8, seq, 0, client, 1, 0))
        elif op == OP_ACQUIRE:
            for cl, sq, stt in srv.acquire(lock, client, ipn, seq, status == 1):
                replies.append(_native.hare_frame(ep, kvsim.CLIENT, OP_GRANT, bytes(key), KEY, b"\0" * 8, sq, 0, cl, stt, 0))
        elif op == OP_RELEASE:
            replies.append(_native.hare_frame(ep, kvsim.CLIENT, OP_RELEASE_ACK, bytes(key), KEY, b"\0" * 8, seq, 0, client, 0, 0))
            for cl, sq, stt in srv.release(lock):
                replies.append(_native.hare_frame(ep, kvsim.CLIENT, OP_GRANT, bytes(key), KEY, b"\0" * 8, sq, 0, cl, stt, 0))
        if replies:
            for port, rf in self.sw.process(1 + s, replies):
                if port == 0:
                    self.deliver(t1 + self.p.link_s, rf, via_switch=False)

    def deliver(self, t: float, f: bytes, via_switch: bool) -> None:
        m = _native.hare_parse(f)
        if m is None:
            return
        op, flags, seq, _hi, client, status, key, _v, _ip, _port = m
        lock = int.from_bytes(bytes(key), "big") if key else None
        st = self.client_state[client] if client < len(self.client_state) else None
        if st is None:
            self.fail(f"reply for unknown client {client}")
            return
        if op == OP_GRANT:
            if st["phase"] != "acq" or (seq & 0xFFFF) != st["seq"] or (lock is not None and lock != st["lock"]):
                self.fail(f"grant for client {client} not waiting for it ({st}, seq {seq}, lock {lock})")
                return
            if status == 1:
                self.retries += 1
                self.push(t + self.p.retry_s, "retry_acq", client)
                return
            L = st["lock"]
            sh = self.shared.setdefault(L, set())
            if L in self.exclusive:
                self.fail(f"lock {L}: granted to {client} while {self.exclusive[L]} holds it exclusively")
            if st["excl"]:
                if sh:
                    self.fail(f"lock {L}: exclusive to {client} while shared by {sorted(sh)}")
                self.exclusive[L] = client
            else:
                sh.add(client)
            st["phase"] = "hold"
            e = self.ep(t)
            self.lat[e].append((t - st["t0"]) * 1e6)
            self.push(t + self.p.hold_s, "release", client)
        elif op == OP_RELEASE_ACK:
            if st["phase"] != "hold":
                return
            if status == 1:
                self.retries += 1
                self.push(t + self.p.retry_s, "release", client)
                return
            L = st["lock"]
            if self.exclusive.get(L) == client:
                del self.exclusive[L]
            else:
                self.shared.get(L, set()).discard(client)
            st["phase"] = "done"
            self.done[self.ep(t)] += 1
            self.push(t, "start", client)

    # ---- Hare's offloading rounds ------------------------------------------------------

    def hare_round(self, now: float) -> None:
        p, K = self.p, self.p.batch
        aging = now >= self.next_age
        if aging:
            self.next_age += 1.0
            for srv in self.servers:
                srv.noo.age()
            self.h_base = {k: v // 2 for k, v in self.h_base.items()}
        counts: list[tuple[int, int, int]] = []
        for slot, lock in self.slots.items():
            pins = self.cpu(kvsim.OP_STAT_FETCH, slot, 2 if aging else 0, b"\0\0\0\0")
            m = _native.hare_parse(pins[0]) if pins else None
            c = struct.unpack(">I", bytes(m[7])[:4])[0] if m else 0
            counts.append((c + self.h_base.get(slot, 0), lock, slot))
        counts.sort()
        o_switch = counts[:K]
        o_server = [(int.from_bytes(bytes(k), "big"), c) for k, c in _native.noostat_integrate([s.noo.top() for s in self.servers], K)]
        cand = [(c, l, "switch", s) for c, l, s in o_switch] + [(c, l, "server", -1) for l, c in o_server]
        cand.sort(key=lambda x: -x[0])
        hot = {l for _c, l, _w, _s in cand[:K]}
        newcomers = [(l, c) for c, l, w, _s in cand[:K] if w == "server" and c > 0]
        victims = [(l, s) for c, l, s in o_switch if l not in hot]
        free = [s for s in range(p.cache) if s not in self.slots]
        plan = []
        for l, c in newcomers:
            if free:
                plan.append((None, l, free.pop(0), c))
            elif victims:
                ol, s = victims.pop(0)
                plan.append((ol, l, s, c))
        if not plan:
            return
        # Step 4 now: the moving locks answer "retry" until Step 6.
        for old, new, slot, _c in plan:
            self.servers[self.server_of(new)].migrating.add(new)
            if old is not None:
                self.servers[self.server_of(old)].migrating.add(old)
                self.cpu(kvsim.OP_STATE_SET, slot, kvsim.STATE_REPLACING)
        ops = sum(2 if old is not None else 1 for old, _n, _s, _c in plan)
        pkts = sum((QUEUE + 3) * (2 if old is not None else 1) for old, _n, _s, _c in plan)
        cost = len(self.slots) / p.packet_rate + ops / p.table_rate + pkts / p.packet_rate

        def apply() -> None:
            for old, new, slot, c in plan:
                if old is not None:
                    self.evict(slot)
                    self.servers[self.server_of(old)].migrating.discard(old)
                self.servers[self.server_of(new)].migrating.discard(new)
                if not self.offload(new, slot, self.busy_until):
                    continue
                self.h_base[slot] = c

        # Applied as one event at the end of the offloading process.
        start = max(now, self.busy_until)
        self.busy_until = start + cost
        self.push_control(self.busy_until, apply)

    def push_control(self, t: float, fn: Callable[[], None]) -> None:
        # Control actions run before client events at or after their time.
        self._ctl.append((t, fn))
        self._ctl.sort(key=lambda x: x[0])

    # ---- results -----------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        p = self.p
        thr = [float(d / p.epoch_s) for d in self.done]
        p99 = [float(np.percentile(x, 99)) if x else None for x in self.lat]
        p50 = [float(np.percentile(x, 50)) if x else None for x in self.lat]
        return {
            "throughput_tps": thr,
            "p50_us": p50,
            "p99_us": p99,
            "correct": self.correct,
            "violations": self.violations,
            "retries": self.retries,
            "moves": self.moves,
            "control": {"table_ops": self.table_ops, "packet_ops": self.packet_ops},
            "switch_drops": self.sw.drops(),
            "transactions": int(self.done.sum()),
        }
