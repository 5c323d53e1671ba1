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
answers a retransmission from its table, never applies it twice; 0: never); one with no
answer within `lost_s` of its first sending is counted lost and its client stops."""

from __future__ import annotations

import heapq
import json
import socket
import sys
import time
from typing import Any

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


def main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    n, servers = p["clients"], p["servers"]
    base = p["client_base"]
    o0, o1 = orders(p["n_locks"], p["cache"], p["seed"])
    rng = np.random.default_rng(p["seed"] * 1000 + base)
    cdf = zipf_cdf(p["n_locks"], p["alpha"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", wire.PORT_CLIENT))
    start = wait_start(p)
    end = start + int(p["duration"] * 1e9)
    shift_ns = start + int(p["shift_at"] * 1e9) if p.get("shift_at") is not None else None
    hold_ns, retry_ns, lost_ns = int(p["hold_s"] * 1e9), int(p["retry_s"] * 1e9), int(p["lost_s"] * 1e9)
    resend_ns = int(p.get("resend_s", 0) * 1e9)
    # per client: [phase, lock, excl, seq, t_acquire, t_granted, t_sent, t_first_sent]
    st: list[list[Any]] = [["idle", 0, False, 0, 0, 0, 0, 0] for _ in range(n)]
    timers: list[tuple[int, int, str]] = []
    holds: list[list[Any]] = []
    samples: list[list[int]] = []
    stats = {"acquires": 0, "grants": 0, "retries": 0, "releases": 0, "lost": 0, "unexpected": 0, "resent": 0}
    seq = 0

    def send(c: int, op: int, first: bool = False) -> None:
        s = st[c]
        m = wire.Msg(op, int(s[1]).to_bytes(KEY, "big"), b"\0" * 8, s[3], aux=base + c, status=1 if (op == OP_ACQUIRE and s[2]) else 0, key_field=KEY)
        sock.sendto(m.encode(), (p["server_ips"][s[1] % servers], wire.PORT_SERVER))
        s[6] = time.monotonic_ns()
        if first:
            s[7] = s[6]

    def begin(c: int, now: int) -> None:
        nonlocal seq
        if now >= end:
            st[c][0] = "done"
            return
        seq = (seq + 1) & 0xFFFF
        order = o1 if shift_ns is not None and now >= shift_ns else o0
        lock = int(order[min(int(np.searchsorted(cdf, rng.uniform())), p["n_locks"] - 1)])
        st[c] = ["acq", lock, bool(rng.uniform() < p["excl_ratio"]), seq, now, 0, 0, 0]
        stats["acquires"] += 1
        send(c, OP_ACQUIRE, first=True)

    while time.monotonic_ns() < start:
        time.sleep(0.001)
    for c in range(n):
        begin(c, time.monotonic_ns())
    sock.settimeout(0.001)
    while True:
        now = time.monotonic_ns()
        while timers and timers[0][0] <= now:
            _t, c, what = heapq.heappop(timers)
            if what == "release":
                holds.append([st[c][1], st[c][2], st[c][5], time.monotonic_ns(), base + c])
                st[c][0] = "rel"
                send(c, OP_RELEASE, first=True)
            elif what == "acq":
                send(c, OP_ACQUIRE)
            else:
                send(c, OP_RELEASE)
        for c in range(n):
            if st[c][0] in ("acq", "rel") and not any(tc == c for _t, tc, _w in timers):
                if now - st[c][7] > lost_ns:
                    stats["lost"] += 1
                    st[c][0] = "lost"
                elif resend_ns and now - st[c][6] > resend_ns:
                    stats["resent"] += 1
                    send(c, OP_ACQUIRE if st[c][0] == "acq" else OP_RELEASE)
        if all(s[0] in ("done", "lost") for s in st):
            break
        try:
            data = sock.recv(2048)
        except socket.timeout:
            continue
        try:
            m = wire.Msg.decode(data)
        except wire.WireError:
            stats["unexpected"] += 1
            continue
        c = m.aux - base
        if not 0 <= c < n:
            stats["unexpected"] += 1
            continue
        s = st[c]
        now = time.monotonic_ns()
        lock = int.from_bytes(m.key, "big") if m.key else None
        if m.op == OP_GRANT and s[0] == "acq" and (m.seq & 0xFFFF) == s[3] and lock in (None, s[1]):
            if m.status == RETRY:
                stats["retries"] += 1
                heapq.heappush(timers, (now + retry_ns, c, "acq"))
                s[6] = s[7] = now + retry_ns
                continue
            stats["grants"] += 1
            s[0], s[5] = "hold", now
            samples.append([now, now - s[4]])
            heapq.heappush(timers, (now + hold_ns, c, "release"))
        elif m.op == OP_RELEASE_ACK and s[0] == "rel" and (m.seq & 0xFFFF) == s[3]:
            if m.status == RETRY:
                stats["retries"] += 1
                heapq.heappush(timers, (now + retry_ns, c, "rel"))
                s[6] = s[7] = now + retry_ns
                continue
            stats["releases"] += 1
            begin(c, now)
        else:
            stats["unexpected"] += 1
    with open(p["out"], "w") as f:
        json.dump({"holds": holds, "samples": samples, "stats": stats}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
