"""The lock manager as a Hare application (K3): what the user writes on the host side.

A backend lock server (unbounded FIFO queue per lock) and the three hooks: the lock's
state (holders, mode, up to 8 waiters) is dirty data on the switch, so it is moved onto the
switch when the lock is offloaded and back before it is evicted. The framework
(`framework.py`) decides which locks move, and when.

A request is identified by (client, seq) (`lockgen`: one global 16-bit sequence per client
process, an acquire and its release share it), which makes retransmissions idempotent: an
acquire already granted is granted again, one already queued waits where it is, one
already released is stale; a release already done is acknowledged again and releases
nothing. With a `LockJournal` every change of the table is written ahead of the answers
that depend on it, so a restarted server replays the table it had (docs/hare-redis.md).
"""

from __future__ import annotations

import json
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

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
    #: The holders this server granted, (client, seq) -> IPv4 address; the others
    #: (`holders` minus these) came home from the switch, which keeps only their count.
    named: dict = field(default_factory=dict)

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
        #: Each client's last release done here: client -> (seq, lock, IPv4 address); a
        #: retransmission of it is acknowledged again, an acquire with its seq is stale.
        self.released: dict[int, tuple[int, int, int]] = {}
        self.journal: Optional["LockJournal"] = None
        #: Retransmitted requests answered from the table (not applied twice).
        self.duplicates = 0

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
            return [self.grant(q.key, cl, sq, 0, ip=cip) for cl, cip, sq in self.acquire(lock, client, ip, q.seq & 0xFFFF, q.status == 1)]
        if q.op == OP_RELEASE:
            ack = self.grant(q.key, client, q.seq, 0, OP_RELEASE_ACK, ip=ip)
            return [ack] + [self.grant(q.key, cl, sq, 0, ip=cip) for cl, cip, sq in self.release(lock, client, q.seq & 0xFFFF, ip)]
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
        lock = int.from_bytes(key, "big")
        self.log("S", lock)  # once the switch holds it all (a move cut short leaves it here)
        self.locks.pop(lock, None)
        self.commit()

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
        self.log("H", lock, holders, mode, [list(w) for w in q])
        granted = self.home(lock, holders, mode, q)
        self.commit()
        if granted:
            self.send([self.grant(key, cl, sq, 0, ip=cip) for cl, cip, sq in granted])

    def home(self, lock: int, holders: int, mode: int, q: deque) -> list[tuple[int, int, int]]:
        """The lock's state as it came home; the grants to send."""
        self.locks[lock] = LockState(holders, mode, q)
        # A head waiter the switch had let have the lock but not yet granted (its grant
        # pass found the lock moving): granted here, or nobody would.
        return self.grant_heads(lock)

    # ---- the journal -----------------------------------------------------------------------

    def log(self, *rec: Any) -> None:
        if self.journal is not None:
            self.journal.append(list(rec))

    def commit(self) -> None:
        """The changes logged so far are in the journal's file (before the answers that
        depend on them leave); the journal is compacted when it has grown."""
        if self.journal is not None and self.journal.flush():
            self.journal.compact(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """The table as one JSON-able record (the locks with no holder and no waiter left out)."""
        locks = [[lock, s.holders, s.mode, [[c, sq, ip] for (c, sq), ip in s.named.items()], [list(w) for w in s.queue or ()]]
                 for lock, s in self.locks.items() if s.holders or s.queue]
        return {"locks": locks, "released": [[c, *v] for c, v in self.released.items()]}

    def table(self) -> dict[str, Any]:
        """The table, canonical: equal for equal lock states (tests compare replays)."""
        snap = self.snapshot()
        return {"locks": sorted([lk, h, m, sorted(map(tuple, n)), [tuple(w) for w in q]] for lk, h, m, n, q in snap["locks"]),
                "released": sorted(map(tuple, snap["released"]))}

    def replay(self, recs: list[list[Any]]) -> None:
        """Apply journal records (not logged again): the table they were written from."""
        j, self.journal = self.journal, None
        try:
            for r in recs:
                kind = r[0]
                if kind == "T":
                    self.locks, self.released = {}, {}
                    for lock, holders, mode, named, q in r[1]["locks"]:
                        self.locks[lock] = LockState(holders, mode, deque((c, ip, sq, bool(x)) for c, ip, sq, x in q), {(c, sq): ip for c, sq, ip in named})
                    self.released = {c: (sq, lk, ip) for c, sq, lk, ip in r[1]["released"]}
                elif kind == "A":
                    self.acquire(r[1], r[2], r[3], r[4], bool(r[5]))
                elif kind == "R":
                    self.release(r[1], r[2], r[4], r[3])
                elif kind == "S":
                    self.locks.pop(r[1], None)
                elif kind == "H":
                    self.home(r[1], r[2], r[3], deque((c, ip, sq, bool(x)) for c, ip, sq, x in r[4]))
        finally:
            self.journal = j

    def reanswer(self) -> list[tuple[int, int, int, int, int]]:
        """After a replay: what the table says was answered, maybe not sent before the
        crash: (op, lock, client, IPv4 address, seq) for every holder granted here and
        every client's last release. A client not waiting for it drops it (its seq)."""
        out = [(OP_GRANT, lock, c, ip, sq) for lock, s in self.locks.items() for (c, sq), ip in s.named.items()]
        return out + [(OP_RELEASE_ACK, lock, c, ip, sq) for c, (sq, lock, ip) in self.released.items()]

    # ---- the lock table ------------------------------------------------------------------

    def acquire(self, lock: int, client: int, ip: int, seq: int, excl: bool) -> list[tuple[int, int, int]]:
        """Grants to send now: (client, its IPv4 address, seq). A retransmission is
        answered from the table: granted again if held, nothing if queued or released."""
        s = self.st(lock)
        assert s.queue is not None
        if (client, seq) in s.named:
            self.duplicates += 1
            return [(client, s.named[(client, seq)], seq)]
        r = self.released.get(client)
        if (r is not None and r[0] == seq) or any(w[0] == client and w[2] == seq for w in s.queue):
            self.duplicates += 1
            return []
        self.log("A", lock, client, ip, seq, excl)
        want = MODE_EXCL if excl else MODE_SHARED
        if not s.queue and (s.holders == 0 or (s.mode == MODE_SHARED and want == MODE_SHARED)):
            s.holders += 1
            s.mode = want
            s.named[(client, seq)] = ip
            return [(client, ip, seq)]
        s.queue.append((client, ip, seq, excl))
        return []

    def release(self, lock: int, client: Optional[int] = None, seq: int = 0, ip: int = 0) -> list[tuple[int, int, int]]:
        """`client`'s hold `seq` ends (None: any one holder); the waiters granted now (the
        head, and every shared waiter after a shared head): (client, IPv4 address, seq).
        A release done already (the client's last) changes nothing."""
        s = self.st(lock)
        if client is not None:
            if self.released.get(client, (None,))[0] == seq:
                self.duplicates += 1
                return []
            self.log("R", lock, client, ip, seq)
            self.released[client] = (seq, lock, ip)
        if client is None:
            if s.named:
                del s.named[next(iter(s.named))]
            leaves = s.holders > 0
        elif s.named.pop((client, seq), None) is not None:
            leaves = True
        else:  # a holder granted on the switch (its count came home), if any is left
            leaves = s.holders > len(s.named)
        if leaves:
            s.holders -= 1
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
                s.named[(client, seq)] = ip
                s.mode = MODE_EXCL if excl else MODE_SHARED
                out.append((client, ip, seq))
                if excl:
                    break
            else:
                break
        if s.holders == 0:
            s.mode = MODE_FREE
        return out


class LockJournal:
    """A lock server's write-ahead journal: one JSON line per change of its table (`A`
    acquire applied, `R` release, `S` a lock moved onto the switch, `H` a lock's state come
    home, `T` the whole table), written before the answers that depend on it leave. A
    process killed keeps what it wrote (the page cache is the kernel's), so no fsync is
    needed for `kill -9`; `fsync` also survives the machine's crash, at a disk flush per
    batch. Compacted into one `T` record (written beside, renamed over) past `compact_at`
    records, so a restart replays at most that many."""

    def __init__(self, path: str, compact_at: int = 20_000, fsync: bool = False) -> None:
        self.path, self.compact_at, self.fsync = path, compact_at, fsync
        self.buf: list[list[Any]] = []
        self.records = 0
        self.compactions = 0
        self.fd: Optional[int] = None

    @staticmethod
    def read(path: str) -> tuple[list[list[Any]], int]:
        """The file's records and the length of its whole ones (a line a kill cut short
        is not one)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return [], 0
        recs, good = [], 0
        for line in data.split(b"\n")[:-1]:
            try:
                recs.append(json.loads(line))
            except ValueError:
                break
            good += len(line) + 1
        return recs, good

    def open(self) -> list[list[Any]]:
        """The records to replay; appends go after them (a torn last line is cut off)."""
        recs, good = self.read(self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(fd, good)
        os.close(fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.records = len(recs)
        return recs

    def append(self, rec: list[Any]) -> None:
        self.buf.append(rec)

    def flush(self) -> bool:
        """Write what was appended; whether the journal is due for compaction."""
        if not self.buf:
            return False
        assert self.fd is not None, "open() the journal first"
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.buf).encode()
        while data:
            data = data[os.write(self.fd, data):]
        if self.fsync:
            os.fsync(self.fd)
        self.records += len(self.buf)
        self.buf = []
        return self.records > self.compact_at

    def compact(self, snap: dict[str, Any]) -> None:
        """The journal becomes one record, the table `snap` (a crash keeps the old file or
        the new one, each the whole table)."""
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(["T", snap], separators=(",", ":")) + "\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.fd is not None:
            os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.records = 1
        self.compactions += 1

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
