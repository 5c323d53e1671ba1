"""One lock-client process per client host (run in its namespace by `lockrack`): `clients`
closed-loop lock clients on UDP 7371 (where the switch and the lock servers send grants),
each taking locks in a seeded Zipf sequence — acquire (shared or exclusive), hold for
`hold_s`, release — with the hottest locks moving at `shift_at` (coldest-to-top, as in
the trace replay). Every hold is recorded as [grant received, release sent] on the
machine's monotonic clock, for the mutual-exclusion check. Its argument is a JSON object
(see `lockrack.LockRack.run_load`); it writes a JSON result to `out`.

An ACQUIRE answered "retry" (queue full, lock moving) is sent again after `retry_s`; a
RELEASE answered "retry" likewise. A request with no answer is sent again every
`resend_s` (a lock server restarting after a crash, `agent.py --journal`: the server
answers a retransmission from its table, never applies it twice; 0: never). One not
granted (or acknowledged) within `lost_s` of its FIRST sending is counted lost, retries or
not, so the run ends at most `hold_s + lost_s` after `duration`: with no answer at all its
client stops; answered only "retry", it is given up (`gave_up_after_retries`) and its
client goes on (`LockClients`)."""

from __future__ import annotations

import heapq
import json
import socket
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

from inswitch.apps.hare.lockapp import KEY, OP_ACQUIRE, OP_GRANT, OP_RELEASE, OP_RELEASE_ACK
from inswitch.apps.hare.workload import initial_order, shifted, zipf_cdf
from inswitch.apps.hare.redisrack import wait_start
from inswitch.hare import wire

#: Status of a grant or release ack that says "ask again" (queue full, lock moving).
RETRY = 1


def orders(n_locks: int, cache: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Lock ids by popularity rank before and after the shift (shared by every client and
    by the NetLock baseline's static offload)."""
    rng = np.random.default_rng(seed)
    o0 = initial_order(n_locks, False, rng)
    return o0, shifted(o0, "coldest-to-top", cache, rng)


class LockClients:
    """The closed-loop clients' state machine, without the socket: `tick` runs the timers
    (release after the hold, sends after a retry, resends, losses), `receive` takes an
    answer; `sender(op, lock, excl, seq, client)` puts a request on the wire and `clock()`
    reads the monotonic clock (the unit tests drive it with a stub server and a fake clock).

    A request is lost once `lost_s` has passed since its FIRST sending, however many "retry"
    answers came meanwhile (a retry restarting that clock would let a lock that always says
    "retry" keep its client, and the run, forever): unanswered (`lost_no_answer`), its
    client stops, as its server is presumably gone; answered only "retry"
    (`gave_up_after_retries`), its client goes on with its next lock."""

    def __init__(self, p: dict[str, Any], start: int, sender: Callable[[int, int, bool, int, int], None], clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.p, self.n, self.base = p, p["clients"], p["client_base"]
        self.sender, self.clock = sender, clock
        self.o0, self.o1 = orders(p["n_locks"], p["cache"], p["seed"])
        self.rng = np.random.default_rng(p["seed"] * 1000 + self.base)
        self.cdf = zipf_cdf(p["n_locks"], p["alpha"])
        self.end = start + int(p["duration"] * 1e9)
        self.shift_ns = start + int(p["shift_at"] * 1e9) if p.get("shift_at") is not None else None
        self.hold_ns, self.retry_ns, self.lost_ns = int(p["hold_s"] * 1e9), int(p["retry_s"] * 1e9), int(p["lost_s"] * 1e9)
        self.resend_ns = int(p.get("resend_s", 0) * 1e9)
        # per client: [phase, lock, excl, seq, t_acquire, t_granted, t_sent, t_first_sent, retries]
        self.st: list[list[Any]] = [["idle", 0, False, 0, 0, 0, 0, 0, 0] for _ in range(self.n)]
        # (when, client, what, seq): a timer of a request given up meanwhile is dropped
        self.timers: list[tuple[int, int, str, int]] = []
        # per client: the last acquire given up (lock, excl, seq), released if granted late
        self.abandoned: list[Optional[tuple[int, bool, int]]] = [None] * self.n
        self.holds: list[list[Any]] = []
        self.samples: list[list[int]] = []
        self.lost_examples: list[str] = []
        self.stats = {"acquires": 0, "grants": 0, "retries": 0, "releases": 0, "lost": 0, "unexpected": 0, "resent": 0,
                      "lost_no_answer": 0, "gave_up_after_retries": 0, "late_grants_released": 0}
        self.seq = 0

    def send(self, c: int, op: int, first: bool = False) -> None:
        s = self.st[c]
        self.sender(op, s[1], s[2], s[3], self.base + c)
        s[6] = self.clock()
        if first:
            s[7], s[8] = s[6], 0

    def begin(self, c: int, now: int) -> None:
        if now >= self.end:
            self.st[c][0] = "done"
            return
        self.seq = (self.seq + 1) & 0xFFFF
        order = self.o1 if self.shift_ns is not None and now >= self.shift_ns else self.o0
        lock = int(order[min(int(np.searchsorted(self.cdf, self.rng.uniform())), self.p["n_locks"] - 1)])
        self.st[c] = ["acq", lock, bool(self.rng.uniform() < self.p["excl_ratio"]), self.seq, now, 0, 0, 0, 0]
        self.stats["acquires"] += 1
        self.send(c, OP_ACQUIRE, first=True)

    def begin_all(self, now: int) -> None:
        for c in range(self.n):
            self.begin(c, now)

    def finished(self) -> bool:
        return all(s[0] in ("done", "lost") for s in self.st)

    def give_up(self, c: int, now: int) -> None:
        s = self.st[c]
        self.stats["lost"] += 1
        what = "ACQUIRE" if s[0] == "acq" else "RELEASE"
        why = f"{s[8]} 'retry' answers" if s[8] else "no answer"
        if len(self.lost_examples) < 5:
            self.lost_examples.append(f"client {self.base + c} {what} of lock {s[1]} ({'X' if s[2] else 'S'}): {why} in {(now - s[7]) / 1e9:.3f} s since its first sending")
        if not s[8]:
            self.stats["lost_no_answer"] += 1
            s[0] = "lost"
            return
        self.stats["gave_up_after_retries"] += 1
        if s[0] == "acq":
            self.abandoned[c] = (s[1], s[2], s[3])
        self.begin(c, now)

    def tick(self, now: int) -> None:
        st = self.st
        while self.timers and self.timers[0][0] <= now:
            _t, c, what, seq = heapq.heappop(self.timers)
            s = st[c]
            if s[3] != seq or s[0] != {"release": "hold", "acq": "acq", "rel": "rel"}[what]:
                continue  # its request was given up
            if what == "release":
                self.holds.append([s[1], s[2], s[5], self.clock(), self.base + c])
                s[0] = "rel"
                self.send(c, OP_RELEASE, first=True)
            else:
                self.send(c, OP_ACQUIRE if what == "acq" else OP_RELEASE)
        for c in range(self.n):
            s = st[c]
            if s[0] not in ("acq", "rel"):
                continue
            if now - s[7] > self.lost_ns:
                self.give_up(c, now)
            elif self.resend_ns and now - s[6] > self.resend_ns and not any(tc == c for _t, tc, _w, _q in self.timers):
                self.stats["resent"] += 1
                self.send(c, OP_ACQUIRE if s[0] == "acq" else OP_RELEASE)

    def receive(self, data: bytes, now: int) -> None:
        try:
            m = wire.Msg.decode(data)
        except wire.WireError:
            self.stats["unexpected"] += 1
            return
        c = m.aux - self.base
        if not 0 <= c < self.n:
            self.stats["unexpected"] += 1
            return
        s = self.st[c]
        lock = int.from_bytes(m.key, "big") if m.key else None
        if m.op == OP_GRANT and s[0] == "acq" and (m.seq & 0xFFFF) == s[3] and lock in (None, s[1]):
            if m.status == RETRY:
                self.stats["retries"] += 1
                s[8] += 1
                heapq.heappush(self.timers, (now + self.retry_ns, c, "acq", s[3]))
                s[6] = now + self.retry_ns
                return
            self.stats["grants"] += 1
            s[0], s[5] = "hold", now
            self.samples.append([now, now - s[4]])
            heapq.heappush(self.timers, (now + self.hold_ns, c, "release", s[3]))
        elif m.op == OP_RELEASE_ACK and s[0] == "rel" and (m.seq & 0xFFFF) == s[3]:
            if m.status == RETRY:
                self.stats["retries"] += 1
                s[8] += 1
                heapq.heappush(self.timers, (now + self.retry_ns, c, "rel", s[3]))
                s[6] = now + self.retry_ns
                return
            self.stats["releases"] += 1
            self.begin(c, now)
        elif m.op == OP_GRANT and m.status != RETRY and (a := self.abandoned[c]) is not None and (m.seq & 0xFFFF) == a[2] and lock in (None, a[0]):
            # a retransmission of an acquire given up was granted after all: hand the lock
            # back, or its other clients would wait on it for ever
            self.abandoned[c] = None
            self.stats["late_grants_released"] += 1
            self.sender(OP_RELEASE, a[0], a[1], a[2], self.base + c)
        else:
            self.stats["unexpected"] += 1

    def result(self) -> dict[str, Any]:
        return {"holds": self.holds, "samples": self.samples, "stats": self.stats, "lost_examples": self.lost_examples}


def main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", wire.PORT_CLIENT))
    servers, ips = p["servers"], p["server_ips"]

    def sender(op: int, lock: int, excl: bool, seq: int, client: int) -> None:
        m = wire.Msg(op, int(lock).to_bytes(KEY, "big"), b"\0" * 8, seq, aux=client, status=1 if (op == OP_ACQUIRE and excl) else 0, key_field=KEY)
        sock.sendto(m.encode(), (ips[lock % servers], wire.PORT_SERVER))

    start = wait_start(p)
    lc = LockClients(p, start, sender)
    while time.monotonic_ns() < start:
        time.sleep(0.001)
    lc.begin_all(time.monotonic_ns())
    sock.settimeout(0.001)
    while True:
        lc.tick(time.monotonic_ns())
        if lc.finished():
            break
        try:
            data = sock.recv(2048)
        except socket.timeout:
            continue
        lc.receive(data, time.monotonic_ns())
    with open(p["out"], "w") as f:
        json.dump(lc.result(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
