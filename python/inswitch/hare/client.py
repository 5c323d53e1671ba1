"""The Hare client library: a key-value client that talks Hare's protocol (UDP) through
the switch to the storage agents in front of Redis.

    from inswitch.hare import Client
    with Client(["10.0.0.3", "10.0.0.4"]) as c:
        c.set(b"k", b"v")
        assert c.get(b"k") == b"v"
        c.mget([b"k", b"x"])      # [b"v", None]
        c.exists(b"k", b"x")      # 1
        c.delete(b"k")            # 1

Keys go to agent `crc32(key) % len(servers)`. A key is at most `key_field` bytes and a
value at most `value_size - 1` (the switch's fixed value cell, see `wire.cell`); larger
ones raise `TooLarge` before anything is sent. A request unanswered after `retries`
timeouts raises `Timeout` (a write may or may not have been applied then, as with any
store). `execute` runs many operations at once (the load generators' and the proxy's
path): up to `window` in flight, each key's operations in their order.

With `history` set, every completed operation is appended to it as
`(key, kind, value, invoked_ns, completed_ns)` on the machine's monotonic clock, for the
linearizability checker (`inswitch.hare.history`)."""

from __future__ import annotations

import os
import select
import socket
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Optional, Sequence

from inswitch.hare import wire


class HareError(Exception):
    """An operation failed."""


class Timeout(HareError):
    """No answer after all retries."""


class TooLarge(HareError, ValueError):
    """A key or value larger than the switch's fields; nothing was sent."""


class StoreError(HareError):
    """The storage agent could not apply the operation (Redis failed)."""


def server_index(key: bytes, servers: int) -> int:
    """The agent that owns `key` (the controllers use the same placement)."""
    return zlib.crc32(key) % servers


@dataclass
class Op:
    """`kind` is get, set or del; `value` only for set."""

    kind: str
    key: bytes
    value: Optional[bytes] = None


@dataclass
class Stats:
    gets: int = 0
    hits: int = 0
    ops: int = 0
    retries: int = 0
    timeouts: int = 0
    #: Operations given up while answered only "retry" (past `timeout * (retries + 1)`).
    gave_up_after_retries: int = 0
    #: (completion time ns, latency ns, was a get, was a switch hit) of every operation.
    samples: list[tuple[int, int, bool, bool]] = field(default_factory=list)
    #: (completion time ns, agent index) of every operation a storage agent answered.
    served: list[tuple[int, int]] = field(default_factory=list)


class Client:
    def __init__(
        self,
        servers: Sequence[str],
        port: int = wire.PORT_SERVER,
        key_field: int = 64,
        value_size: int = 64,
        timeout: float = 0.5,
        retries: int = 8,
        window: int = 64,
        bind: tuple[str, int] = ("0.0.0.0", wire.PORT_CLIENT),
        history: Optional[list[tuple[bytes, str, Optional[bytes], int, int]]] = None,
        record_samples: bool = False,
    ) -> None:
        if not servers:
            raise ValueError("no servers")
        self.servers, self.port = list(servers), port
        self.key_field, self.value_size = key_field, value_size
        self.timeout, self.retries, self.window = timeout, retries, max(1, window)
        self.history = history
        self.record_samples = record_samples
        self.stats = Stats()
        #: Writes that timed out: they may or may not have been applied (key, value, invoked).
        self.unacked: list[tuple[bytes, Optional[bytes], int]] = []
        # Replies to port 7371 pass the switch's Hare parser (a PUT reply refreshes the
        # cached copy); a client on another port still works, without refreshes.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self.seq = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF

    # ---- the API -------------------------------------------------------------------------

    def get(self, key: bytes) -> Optional[bytes]:
        """The value, or None when the key does not exist."""
        return self.execute([Op("get", key)])[0]  # type: ignore[return-value]

    def set(self, key: bytes, value: bytes) -> None:
        self.execute([Op("set", key, value)])

    def delete(self, *keys: bytes) -> int:
        """Keys that existed (and are gone now)."""
        return sum(self.execute([Op("del", k) for k in keys]))  # type: ignore[arg-type]

    def mget(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        return self.execute([Op("get", k) for k in keys])  # type: ignore[return-value]

    def exists(self, *keys: bytes) -> int:
        return sum(v is not None for v in self.mget(keys))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- many at once --------------------------------------------------------------------

    def check(self, op: Op) -> None:
        """Raise TooLarge (or ValueError for an unknown kind) before anything is sent."""
        if op.kind not in ("get", "set", "del"):
            raise ValueError(f"unknown operation {op.kind!r}")
        if not 1 <= len(op.key) <= self.key_field:
            raise TooLarge(f"key of {len(op.key)} bytes (1..{self.key_field} allowed)")
        if op.kind == "set" and (op.value is None or len(op.value) > self.value_size - 1):
            raise TooLarge(f"value of {len(op.value or b'')} bytes (at most {self.value_size - 1} allowed)")

    def execute(self, ops: Sequence[Op]) -> list[object]:
        """Results in order: a get's value (None: absent), None for a set, 1/0 for a del.
        Every operation is checked before any is sent."""
        for op in ops:
            self.check(op)
        n = len(ops)
        results: list[object] = [None] * n
        per_key: dict[bytes, deque[int]] = {}
        ready: deque[int] = deque()
        for i, op in enumerate(ops):
            q = per_key.setdefault(op.key, deque())
            if not q:
                ready.append(i)
            q.append(i)
        # seq -> [index, payload, deadline, tries, invoked_ns]
        flight: dict[int, list] = {}
        waiting_retry: list[tuple[float, int]] = []
        n_retry: dict[int, int] = {}
        # when each operation was first sent: "retry" answers do not extend its life past a
        # silent one's, or an object that never stops moving would keep the batch for ever
        first_sent: dict[int, float] = {}
        budget = self.timeout * (self.retries + 1)
        done = 0
        while done < n:
            now = time.monotonic()
            while waiting_retry and waiting_retry[0][0] <= now:
                ready.appendleft(waiting_retry.pop(0)[1])
            while ready and len(flight) < self.window:
                i = ready.popleft()
                first_sent.setdefault(i, time.monotonic())
                self._send(i, ops, flight, time.monotonic(), time.monotonic_ns())
            deadlines = [f[2] for f in flight.values()] + [w[0] for w in waiting_retry[:1]]
            wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.0
            r, _, _ = select.select([self.sock], [], [], wait)
            if r:
                while True:
                    try:
                        data, _addr = self.sock.recvfrom(2048)
                    except BlockingIOError:
                        break
                    try:
                        m = wire.Msg.decode(data)
                    except wire.WireError:
                        continue
                    f = flight.pop(m.seq, None)
                    if f is None:
                        continue  # a duplicate or a late answer to a retransmission
                    i = f[0]
                    if m.status & wire.STATUS_RETRY:
                        # The object is moving: ask again, backing off (0.2 ms doubling to 5 ms).
                        self.stats.retries += 1
                        n_retry[i] = n_retry.get(i, 0) + 1
                        if time.monotonic() - first_sent[i] > budget:
                            self.stats.gave_up_after_retries += 1
                            flight[m.seq] = f  # the batch's writes not acknowledged, this one too
                            self._give_up(ops, results, flight, per_key)
                            raise Timeout(f"{ops[i].kind} {ops[i].key!r}: answered 'retry' {n_retry[i]} times in {budget:.3f} s")
                        waiting_retry.append((time.monotonic() + min(0.005, 0.0001 * 2 ** n_retry[i]), i))
                        waiting_retry.sort()
                        continue
                    if m.status & wire.STATUS_ERROR:
                        flight[m.seq] = f  # its write may have landed before the store failed
                        self._give_up(ops, results, flight, per_key)
                        raise StoreError(f"the storage agent failed on {ops[i].kind} {ops[i].key!r}")
                    results[i] = self._complete(ops[i], m, f[4])
                    done += 1
                    q = per_key[ops[i].key]
                    q.popleft()
                    if q:
                        ready.append(q[0])
            now = time.monotonic()
            for seq, f in list(flight.items()):
                if f[2] <= now:
                    f[3] += 1
                    self.stats.timeouts += 1
                    if f[3] > self.retries:
                        self._give_up(ops, results, flight, per_key)
                        raise Timeout(f"{ops[f[0]].kind} {ops[f[0]].key!r}: no answer after {self.retries} retries")
                    f[2] = now + self.timeout
                    self._sendto(ops[f[0]].key, f[1])
        return results

    def _give_up(self, ops: Sequence[Op], results: list[object], flight: dict[int, list], per_key: dict[bytes, deque[int]]) -> None:
        """Every write of the batch not acknowledged may or may not have landed."""
        started = {f[0]: f[4] for f in flight.values()}
        now = time.monotonic_ns()
        for q in per_key.values():
            for i in q:
                if ops[i].kind != "get":
                    self.unacked.append((ops[i].key, ops[i].value if ops[i].kind == "set" else None, started.get(i, now)))

    def _sendto(self, key: bytes, payload: bytes) -> None:
        addr = (self.servers[server_index(key, len(self.servers))], self.port)
        while True:
            try:
                self.sock.sendto(payload, addr)
                return
            except BlockingIOError:
                select.select([], [self.sock], [], 0.01)

    def _send(self, i: int, ops: Sequence[Op], flight: dict[int, list], now: float, now_ns: int) -> None:
        op = ops[i]
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        if op.kind == "get":
            m = wire.Msg(wire.OP_GET, op.key, b"", self.seq, key_field=self.key_field)
        else:
            m = wire.Msg(wire.OP_PUT, op.key, wire.cell(op.value if op.kind == "set" else None, self.value_size), self.seq, key_field=self.key_field)
        payload = m.encode()
        flight[self.seq] = [i, payload, now + self.timeout, 0, now_ns]
        self._sendto(op.key, payload)

    def _complete(self, op: Op, m: wire.Msg, invoked: int) -> object:
        t = time.monotonic_ns()
        st = self.stats
        st.ops += 1
        hit = bool(m.flags & wire.FLAG_HIT)
        if self.record_samples:
            st.samples.append((t, t - invoked, op.kind == "get", hit))
            if not hit:
                st.served.append((t, server_index(op.key, len(self.servers))))
        if op.kind == "get":
            st.gets += 1
            st.hits += hit
            try:
                v = wire.uncell(m.value)
            except wire.WireError as e:
                raise HareError(f"malformed value for {op.key!r}: {e}") from None
            if self.history is not None:
                self.history.append((op.key, "get", v, invoked, t))
            return v
        if self.history is not None:
            self.history.append((op.key, "set", op.value if op.kind == "set" else None, invoked, t))
        return 1 if (op.kind == "del" and m.status & wire.STATUS_EXISTED) else (0 if op.kind == "del" else None)
