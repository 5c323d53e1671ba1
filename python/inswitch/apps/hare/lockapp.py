"""The lock manager as a Hare application (K3): what the user writes on the host side.

A backend lock server (unbounded FIFO queue per lock) and the three hooks: the lock's
state (holders, mode, up to 8 waiters) is dirty data on the switch, so it is moved onto the
switch when the lock is offloaded and back before it is evicted. The framework
(`framework.py`) decides which locks move, and when.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Optional

from inswitch.apps.hare.framework import CLIENT, OP_DATAMV_TO_SERVER, OP_DATAMV_TO_SWITCH, HareServer, Query

OP_ACQUIRE, OP_RELEASE, OP_GRANT, OP_RELEASE_ACK = 5, 6, 7, 8
QUEUE = 8
MODE_FREE, MODE_SHARED, MODE_EXCL = 0, 1, 2
KEY = 4
ZERO = b"\0" * 8


@dataclass
class LockState:
    holders: int = 0
    mode: int = MODE_FREE
    queue: Optional[deque] = None

    def __post_init__(self) -> None:
        if self.queue is None:
            self.queue = deque()


class LockServer(HareServer):
    """A backend lock server; 'retry' for locks that are moving."""

    DATAMV_PACKETS_TO_SWITCH = QUEUE + 1
    DATAMV_PACKETS_TO_SERVER = QUEUE + 2

    def __init__(self, idx: int, k: int) -> None:
        super().__init__(idx, k, KEY)
        self.locks: dict[int, LockState] = {}

    def st(self, lock: int) -> LockState:
        return self.locks.setdefault(lock, LockState())

    def grant(self, key: bytes, client: int, seq: int, status: int, op: int = OP_GRANT, ip: int = int.from_bytes(CLIENT[1], "big")) -> bytes:
        """A grant (or ack) for `client`, addressed to its host's IPv4 address `ip`."""
        return self.frame((CLIENT[0], ip.to_bytes(4, "big"), CLIENT[2]), op, key, ZERO, seq, 0, client, status)

    # ---- the hooks -----------------------------------------------------------------------

    def process_query(self, q: Query) -> list[bytes]:
        self.update_statistic(q.key)
        lock, client, ip = int.from_bytes(q.key, "big"), q.aux, int.from_bytes(q.ip, "big")
        if self.is_moving(q.key):
            return [self.grant(q.key, client, q.seq, 1, OP_GRANT if q.op == OP_ACQUIRE else OP_RELEASE_ACK, ip=ip)]
        if q.op == OP_ACQUIRE:
            return [self.grant(q.key, cl, sq, 0, ip=cip) for cl, cip, sq in self.acquire(lock, client, ip, q.seq, q.status == 1)]
        if q.op == OP_RELEASE:
            ack = self.grant(q.key, client, q.seq, 0, OP_RELEASE_ACK, ip=ip)
            return [ack] + [self.grant(q.key, cl, sq, 0, ip=cip) for cl, cip, sq in self.release(lock)]
        return []

    def datamv_server2switch(self, key: bytes, slot: int) -> None:
        """The lock's state onto the switch. The switch queues 8 waiters: further ones are
        told to retry (they come back to the switch)."""
        s = self.st(int.from_bytes(key, "big"))
        assert s.queue is not None
        excess = []
        while len(s.queue) > QUEUE:
            excess.append(s.queue.pop())
        if excess:
            self.send([self.grant(key, cl, sq, 1, ip=cip) for cl, cip, sq, _x in reversed(excess)])
        mask, cells = 0, []
        for i, (client, ip, seq, excl) in enumerate(s.queue):
            cells.append(struct.pack(">II", (client << 16) | (seq & 0xFFFF), ip))
            mask |= (1 << i) if excl else 0
        for i, c in enumerate(cells):
            self.control(OP_DATAMV_TO_SWITCH, slot, c, aux=i)
        hi = len(cells) << 3 | (mask << 8)
        lo = s.holders | (s.mode << 16)
        self.control(OP_DATAMV_TO_SWITCH, slot, struct.pack(">II", hi, lo), aux=QUEUE)
        self.locks.pop(int.from_bytes(key, "big"), None)

    def datamv_switch2server(self, key: bytes, slot: int) -> None:
        """The lock's dirty state back from the switch: holders, mode, the queue in order."""
        lo = struct.unpack(">I", self.control(OP_DATAMV_TO_SERVER, slot, ZERO, aux=QUEUE)[4:8])[0]
        hi = struct.unpack(">I", self.control(OP_DATAMV_TO_SERVER, slot, ZERO, aux=QUEUE + 1)[4:8])[0]
        holders, mode = lo & 0xFFFF, (lo >> 16) & 3
        head, length, mask = hi & 7, (hi >> 3) & 15, (hi >> 8) & 0xFF
        q: deque = deque()
        for k in range(length):
            pos = (head + k) % QUEUE
            tag, ip = struct.unpack(">II", self.control(OP_DATAMV_TO_SERVER, slot, ZERO, aux=pos)[:8])
            q.append((tag >> 16, ip, tag & 0xFFFF, bool(mask & (1 << pos))))
        lock = int.from_bytes(key, "big")
        self.locks[lock] = LockState(holders, mode, q)
        # A head waiter the switch had let have the lock but not yet granted (its grant
        # pass found the lock moving): granted here, or nobody would.
        granted = self.grant_heads(lock)
        if granted:
            self.send([self.grant(key, cl, sq, 0, ip=cip) for cl, cip, sq in granted])

    # ---- the lock table ------------------------------------------------------------------

    def acquire(self, lock: int, client: int, ip: int, seq: int, excl: bool) -> list[tuple[int, int, int]]:
        """Grants to send now: (client, its IPv4 address, seq)."""
        s = self.st(lock)
        assert s.queue is not None
        want = MODE_EXCL if excl else MODE_SHARED
        if not s.queue and (s.holders == 0 or (s.mode == MODE_SHARED and want == MODE_SHARED)):
            s.holders += 1
            s.mode = want
            return [(client, ip, seq)]
        s.queue.append((client, ip, seq, excl))
        return []

    def release(self, lock: int) -> list[tuple[int, int, int]]:
        """One holder leaves; the waiters granted now (the head, and every shared waiter
        after a shared head): (client, IPv4 address, seq)."""
        s = self.st(lock)
        s.holders = max(0, s.holders - 1)
        return self.grant_heads(lock)

    def grant_heads(self, lock: int) -> list[tuple[int, int, int]]:
        """The waiters at the head of the queue that may have the lock now, taken off it."""
        s = self.st(lock)
        assert s.queue is not None
        out = []
        while s.queue:
            client, ip, seq, excl = s.queue[0]
            if s.holders == 0 or (not excl and s.mode == MODE_SHARED):
                s.queue.popleft()
                s.holders += 1
                s.mode = MODE_EXCL if excl else MODE_SHARED
                out.append((client, ip, seq))
                if excl:
                    break
            else:
                break
        if s.holders == 0:
            s.mode = MODE_FREE
        return out
