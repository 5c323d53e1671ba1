"""Trace-driven lock-manager runs: Hare (dynamic offloading with dirty-state movement),
NetLock-style static offloading, and no offloading, on the in-process switch running
`hare_lock`.

Closed-loop clients take locks in the order of one seeded sequence (the same for every
system): acquire (shared or exclusive), hold for `hold_s`, release. Requests for
offloaded locks are granted, queued (8 per lock) and released by the switch; the others by
the lock's backend server, a FIFO queue with a fixed service time. Every grant is checked
against a plain lock table: never two exclusive holders nor an exclusive beside shared
ones, no grant for a request that is not waiting, and every request granted by the end.

The lock servers are `lockapp.LockServer` (the application's hooks); which locks move and
when is the K3 framework's (`framework.Hare`). Hare moves a lock's state (holders, mode, queue) back to its server before evicting it and
onto the switch when offloading it; while a lock moves, its requests are answered "retry".
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native
from inswitch.apps.hare import framework, kvsim
from inswitch.apps.hare.framework import Query
from inswitch.apps.hare.lockapp import KEY, OP_ACQUIRE, OP_GRANT, OP_RELEASE, OP_RELEASE_ACK, LockServer, LockState  # noqa: F401
from inswitch.apps.hare.workload import initial_order, shifted, zipf_cdf

LOCK_SYSTEMS = ("hare", "netlock", "none")
GRANT_SESSION = 91


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
        for srv in self.servers:
            srv.send = lambda frames, s=srv.idx: self.server_send(s, frames)
        # The K3 framework moves locks; the servers are the application.
        fp = framework.FrameworkParams(max(1, p.cache), p.batch, p.t_wait, p.table_rate, p.packet_rate, "age")
        self.fw = framework.Hare(self.sw, "hare_lock", KEY, self.servers, lambda k: self.server_of(int.from_bytes(k, "big")), fp)
        self.now = 0.0
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
        if system == "netlock":
            # Static offloading in the initial phase: the hottest locks of the initial workload.
            for lock in self.order0[: p.cache]:
                self.fw.offload(lock_key(int(lock)), self.fw.emat.free_slot())

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

    def server_send(self, s: int, frames: list[bytes]) -> list[tuple[int, bytes]]:
        """Frames from server `s` through the switch; grants go on to their clients."""
        self.packet_ops += len(frames)
        out = self.sw.process(1 + s, frames)
        for port, rf in out:
            if port == 0:
                self.deliver(self.now + self.p.link_s, rf, via_switch=False)
        return out

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
            self.now = t
            if self.system == "hare":
                self.fw.tick(t)
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
        q = Query.parse(f)
        if q is None:
            return
        srv = self.servers[s]
        start = max(t, srv.free_at)
        srv.free_at = start + self.p.service_s
        replies = srv.process_query(q)
        if replies:
            for port, rf in self.sw.process(1 + s, replies):
                if port == 0:
                    self.deliver(srv.free_at + self.p.link_s, rf, via_switch=False)

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
            "moves": self.fw.offloads + self.fw.evictions,
            "control": {"table_ops": self.table_ops + self.fw.table_ops, "packet_ops": self.packet_ops + self.fw.packet_ops},
            "switch_drops": self.sw.drops(),
            "transactions": int(self.done.sum()),
        }
