"""The storage agent: one per storage host of a rack, in front of that host's Redis.

It is a K3 application server (`framework.HareServer`: NOO-Stat, `update_statistic`,
the `control` built-in, the D-modifier hook) whose store is Redis: queries arrive as Hare
messages on UDP 7370 (GETs that missed the switch, and every PUT, write-through), are
answered from Redis (pipelined, one round trip per batch of datagrams) and written
through before the reply leaves, so an acknowledged write is in Redis's append-only
file (`appendfsync always`). A PUT of the absent cell (`wire.cell(None)`) is a DEL.

The rack's controller (in the root namespace) drives the agent over a Unix socket — the
file system is shared across network namespaces — with one JSON line per request:
`top` / `age` / `clear` / `forget` (NOO-Stat), `move` (the state manager's marks: a
moving object's queries are answered "retry"), `datamv` (the D-modifier, and DySO's
modifier: the value goes to the switch in a control packet from this host's port),
`cell` (NetCache's controller installs values with register writes) and `qo` (DySO's
analyzer fetches the queried keys recorded since its last fetch). A request is handled between two
batches of queries, so no query interleaves with a data movement.

    python -m inswitch.apps.hare.agent --idx 0 --redis /run/x/redis.sock --ctl /run/x/agent.sock
    python -m inswitch.apps.hare.agent --app lock --idx 0 --ctl /run/x/agent.sock

With `--app lock` the agent is the lock manager's server instead (`LockAgent`, no Redis):
the same control requests, and `datamv_back` (a lock's dirty state home from the switch);
`--journal PATH` keeps its lock table in a write-ahead journal replayed at the start
(`lockapp.LockJournal`), so a `kill -9` loses no grant, release or waiter.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.apps.hare.framework import HareServer, Query
from inswitch.apps.hare.lockapp import KEY, OP_ACQUIRE, OP_RELEASE, LockJournal, LockServer
from inswitch.hare import wire

L4_END = wire.L4_END
CONTROL_OPS = (wire.OP_STAT_FETCH, wire.OP_STATE_SET, wire.OP_DATAMV_TO_SWITCH, wire.OP_DATAMV_TO_SERVER)
BATCH = 256


class AgentBase:
    """What every agent adds to its application's `HareServer`: the `send` built-in over
    UDP and the controller's NOO-Stat, mark and data-movement requests."""

    counters: dict[str, int]
    ctl_sock: socket.socket
    ctl_seqs: wire.Seqs
    switch_dst: str
    key_field: int
    noo: Any
    moving: set[bytes]
    ep: Any

    def _attach(self, ctl_sock: socket.socket, switch_dst: str, counters: list[str]) -> None:
        """The control socket and the switch's address; `send` over them; the
        application's counters (`counters`) and the data-movement ones."""
        self.ctl_sock, self.switch_dst = ctl_sock, switch_dst
        self.ctl_seqs = wire.Seqs()
        self.send = self._send_control
        self.counters = dict.fromkeys([*counters, "datamv", "datamv_failed", "datamv_stale_replies"], 0)

    # ---- the `send` built-in over UDP ------------------------------------------------------

    def _send_control(self, frames: list[bytes]) -> list[tuple[int, bytes]]:
        """Control packets leave from this host's port (which the switch allows) and come
        back marked done; returned as frames, as the in-process switch returns them. Any
        other frame (a lock server's grant) goes to its client's host, unanswered."""
        out = []
        for f in frames:
            payload = f[L4_END:]
            want = wire.Msg.decode(payload)
            if want.op not in CONTROL_OPS:
                self.ctl_sock.sendto(payload, (socket.inet_ntoa(f[30:34]), wire.PORT_CLIENT))
                continue
            # A fresh sequence number per request (its retransmissions share it): a DONE
            # reply that arrives after its request timed out does not answer the next one.
            want.seq = self.ctl_seqs.next()
            payload = wire.with_seq(payload, want.seq)
            for _ in range(5):
                self.ctl_sock.sendto(payload, (self.switch_dst, wire.PORT_SERVER))
                got = self._await_done(want, 0.2)
                if got is not None:
                    self.counters["datamv"] += 1
                    out.append((0, _native.hare_frame(self.ep, self.ep, got.op, got.key, self.key_field if got.key else 0, got.value, got.seq, got.slot, got.aux, got.status, got.flags)))
                    break
            else:
                self.counters["datamv_failed"] += 1
                raise TimeoutError("the switch did not answer a data-movement packet")
        return out

    def _await_done(self, want: wire.Msg, timeout: float) -> Optional[wire.Msg]:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.ctl_sock.settimeout(left)
            try:
                data = self.ctl_sock.recv(2048)
            except socket.timeout:
                return None
            try:
                m = wire.Msg.decode(data)
            except wire.WireError:
                continue
            if m.op == want.op and m.flags & wire.FLAG_DONE and m.slot == want.slot and m.seq == want.seq and m.aux == want.aux:
                return m
            self.counters["datamv_stale_replies"] += 1

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        key = bytes.fromhex(req.get("key", ""))
        if cmd == "ping":
            return {"ok": True}
        if cmd == "top":
            return {"top": [[k.hex(), c] for k, c in self.noo.top()]}
        if cmd == "age":
            self.noo.age()
        elif cmd == "clear":
            self.noo.clear()
        elif cmd == "forget":
            self.noo.forget(key)
        elif cmd == "move":
            (self.moving.add if req["on"] else self.moving.discard)(key)
        elif cmd == "unmark_all":  # the controller's switch restarted: no object is moving
            self.moving.clear()
        elif cmd in ("datamv", "datamv_back"):
            try:
                if cmd == "datamv":
                    self.datamv_server2switch(key, int(req["slot"]), int(req.get("aux", 0)))  # type: ignore[attr-defined]
                else:
                    self.datamv_switch2server(key, int(req["slot"]))  # type: ignore[attr-defined]
            except (TimeoutError, OSError) as e:
                return {"ok": False, "error": str(e)}
        elif cmd == "stats":
            return {"counters": self.counters}
        else:
            return self.app_request(cmd, key, req)
        return {"ok": True}

    def app_request(self, cmd: Any, key: bytes, req: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": f"unknown request {cmd!r}"}


class RedisKv(AgentBase, HareServer):
    """The KV application over Redis (K3's User class)."""

    DATAMV_PACKETS_TO_SWITCH = 1
    DATAMV_PACKETS_TO_SERVER = 0  # write-through: the switch's copy is never dirty

    def __init__(self, idx: int, k: int, key_field: int, value_size: int, redis: Any, ctl_sock: socket.socket, switch_dst: str, qo_record: int = 0) -> None:
        super().__init__(idx, k, key_field)
        self.value_size, self.redis = value_size, redis
        #: DySO's QO-Record as this host sees it: queries per key since the last fetch, at
        #: most `qo_record` keys (0: not kept; Hare and NetCache do not use it).
        self.qo_record = qo_record
        self.qo: dict[bytes, int] = {}
        self._attach(ctl_sock, switch_dst, ["queries", "gets", "puts", "retries", "malformed", "unknown_op", "store_errors"])

    # ---- the hooks -----------------------------------------------------------------------

    def process_batch(self, batch: list[tuple[bytes, Any]]) -> list[tuple[bytes, Any]]:
        """Answer a batch of datagrams: [(payload, address)] -> [(reply, address)]."""
        pipe = self.redis.pipeline(transaction=False)
        plan: list[tuple[wire.Msg, Any, Optional[int]]] = []
        c = self.counters
        for data, addr in batch:
            try:
                m = wire.Msg.decode(data)
                value = wire.uncell(m.value) if m.op == wire.OP_PUT else None
            except wire.WireError:
                c["malformed"] += 1
                continue
            if m.op not in (wire.OP_GET, wire.OP_PUT) or not m.key:
                c["unknown_op" if m.key else "malformed"] += 1
                continue
            c["queries"] += 1
            # While an object moves only its writes wait ("retry"): a read from Redis is
            # current, since no write of the object is applied until the move is done.
            if m.op == wire.OP_PUT and self.is_moving(m.key):
                c["retries"] += 1
                plan.append((m, addr, None))
                continue
            if m.op == wire.OP_GET:
                c["gets"] += 1
                self.update_statistic(m.key)
                if self.qo_record and (m.key in self.qo or len(self.qo) < self.qo_record):
                    self.qo[m.key] = self.qo.get(m.key, 0) + 1
                pipe.get(m.key)
            else:
                c["puts"] += 1
                if value is None:
                    pipe.delete(m.key)
                else:
                    pipe.set(m.key, value)
            plan.append((m, addr, len(plan)))
        try:
            res = pipe.execute(raise_on_error=False) if len(pipe) else []
        except Exception:  # Redis gone: every query of the batch is refused, none applied twice
            res = [ConnectionError("redis")] * len(pipe)
        out: list[tuple[bytes, Any]] = []
        j = 0
        for m, addr, slot in plan:
            if slot is None:
                reply = wire.Msg(m.op + 1, m.key, b"", m.seq, status=wire.STATUS_RETRY, key_field=m.key_field)
            else:
                r = res[j]
                j += 1
                reply = self._reply(m, r)
            out.append((reply.encode(), addr))
        return out

    def _reply(self, m: wire.Msg, r: Any) -> wire.Msg:
        if isinstance(r, Exception):
            self.counters["store_errors"] += 1
            return wire.Msg(m.op + 1, m.key, b"", m.seq, status=wire.STATUS_ERROR, key_field=m.key_field)
        if m.op == wire.OP_GET:
            if r is not None and len(r) > self.value_size - 1:
                self.counters["store_errors"] += 1  # put there behind our back; not servable
                return wire.Msg(wire.OP_GET_REPLY, m.key, b"", m.seq, status=wire.STATUS_ERROR, key_field=m.key_field)
            return wire.Msg(wire.OP_GET_REPLY, m.key, wire.cell(r, self.value_size), m.seq, key_field=m.key_field)
        existed = wire.STATUS_EXISTED if (isinstance(r, int) and not isinstance(r, bool) and r > 0) else 0
        # The reply carries the cell written: the switch refreshes its copy from it.
        return wire.Msg(wire.OP_PUT_REPLY, m.key, m.value, m.seq, status=existed, key_field=m.key_field)

    def process_query(self, q: Query) -> list[bytes]:
        m = wire.Msg(q.op, q.key, q.value, q.seq, key_field=self.key_field)
        return [r for r, _a in self.process_batch([(m.encode(), None)])]

    def cell_of(self, key: bytes) -> bytes:
        v = self.redis.get(key)
        return wire.cell(v if v is None or len(v) < self.value_size else None, self.value_size)

    def datamv_server2switch(self, key: bytes, slot: int, aux: int = 0) -> None:
        self.control(wire.OP_DATAMV_TO_SWITCH, slot, self.cell_of(key), aux=aux, key=key)

    # ---- the controller's requests -----------------------------------------------------------

    def app_request(self, cmd: Any, key: bytes, req: dict[str, Any]) -> dict[str, Any]:
        if cmd == "qo":
            got, self.qo = self.qo, {}
            return {"qo": [[k.hex(), n] for k, n in got.items()]}
        if cmd == "cell":
            return {"cell": self.cell_of(key).hex()}
        return super().app_request(cmd, key, req)



class LockAgent(AgentBase, LockServer):
    """The lock manager's server (`lockapp.LockServer`, the K3 application) on a storage
    host: ACQUIRE / RELEASE that missed the switch arrive on UDP 7370; grants and acks go
    to the client's host on UDP 7371, where the switch's own grants go too. The lock's
    state is dirty on the switch, so both data-movement directions are driven here."""

    def __init__(self, idx: int, k: int, ctl_sock: socket.socket, switch_dst: str, journal: Optional[LockJournal] = None) -> None:
        LockServer.__init__(self, idx, k)
        self._attach(ctl_sock, switch_dst, ["queries", "retries", "malformed", "unknown_op", "duplicates", "replayed", "reanswered", "compactions"])
        if journal is not None:
            self.journal = journal
            recs = journal.open()
            self.replay(recs)
            self.counters["replayed"] = len(recs)
            journal.compact(self.snapshot())  # replayed once: the next restart starts here

    def reanswers(self) -> list[tuple[bytes, Any]]:
        """What the replayed table says was answered (grants, release acks), sent again
        at the start: the crash may have come between the journal and the send."""
        out = []
        for op, lock, client, ip, seq in self.reanswer():
            f = self.grant(lock.to_bytes(KEY, "big"), client, seq, 0, op, ip=ip)
            out.append((f[L4_END:], (socket.inet_ntoa(f[30:34]), wire.PORT_CLIENT)))
        self.counters["reanswered"] = len(out)
        return out

    def datamv_server2switch(self, key: bytes, slot: int, aux: int = 0) -> None:
        LockServer.datamv_server2switch(self, key, slot)

    def process_batch(self, batch: list[tuple[bytes, Any]]) -> list[tuple[bytes, Any]]:
        out: list[tuple[bytes, Any]] = []
        for data, addr in batch:
            try:
                m = wire.Msg.decode(data)
            except wire.WireError:
                self.counters["malformed"] += 1
                continue
            if m.op not in (OP_ACQUIRE, OP_RELEASE) or m.key_field != KEY or len(m.key) != KEY:
                self.counters["unknown_op" if m.op not in (OP_ACQUIRE, OP_RELEASE) else "malformed"] += 1
                continue
            self.counters["queries"] += 1
            if self.is_moving(m.key):
                self.counters["retries"] += 1  # answered "retry" by process_query
            q = Query(m.op, m.flags, m.seq, m.slot, m.aux, m.status, m.key, m.value, socket.inet_aton(addr[0]))
            for f in self.process_query(q):
                out.append((f[L4_END:], (socket.inet_ntoa(f[30:34]), wire.PORT_CLIENT)))
        self.commit()  # the batch's changes journalled before any of its answers leaves
        self.counters["duplicates"] = self.duplicates
        if self.journal is not None:
            self.counters["compactions"] = self.journal.compactions
        return out


def serve(a: argparse.Namespace) -> int:
    import redis

    r = redis.Redis(unix_socket_path=a.redis, socket_timeout=5.0)
    deadline = time.monotonic() + 20
    while a.app == "kv":
        try:
            r.ping()
            break
        except redis.exceptions.RedisError:
            if time.monotonic() > deadline:
                print(f"agent: redis at {a.redis} does not answer", file=sys.stderr)
                return 1
            time.sleep(0.05)
    q = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    q.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    q.bind((a.bind, a.port))
    q.setblocking(False)
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind((a.bind, 0))
    if a.app == "kv":
        srv: Any = RedisKv(a.idx, a.k, a.key_field, a.value_size, r, c, a.switch_dst, a.qo_record)
    else:
        journal = LockJournal(a.journal, a.journal_compact, a.journal_fsync) if a.journal else None
        srv = LockAgent(a.idx, a.k, c, a.switch_dst, journal)
        for reply, addr in srv.reanswers() if journal else []:
            try:
                q.sendto(reply, addr)
            except OSError:
                pass  # the client retransmits
    ctl_path = Path(a.ctl)
    ctl_path.unlink(missing_ok=True)
    lsn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsn.bind(str(ctl_path))
    lsn.listen(8)
    sel = selectors.DefaultSelector()
    sel.register(q, selectors.EVENT_READ, "q")
    sel.register(lsn, selectors.EVENT_READ, "lsn")
    bufs: dict[socket.socket, bytes] = {}
    print(f"READY {q.getsockname()[1]}", flush=True)
    while True:
        for sk, _ev in sel.select(1.0):
            if sk.data == "q":
                batch = []
                while len(batch) < BATCH:
                    try:
                        batch.append(q.recvfrom(2048))
                    except BlockingIOError:
                        break
                for reply, addr in srv.process_batch(batch):
                    try:
                        q.sendto(reply, addr)
                    except OSError:
                        pass  # the client retries
            elif sk.data == "lsn":
                conn, _ = lsn.accept()
                sel.register(conn, selectors.EVENT_READ, "ctl")
                bufs[conn] = b""
            else:
                conn = sk.fileobj
                assert isinstance(conn, socket.socket)
                data = conn.recv(65536)
                if not data:
                    sel.unregister(conn)
                    bufs.pop(conn, None)
                    conn.close()
                    continue
                bufs[conn] += data
                while b"\n" in bufs[conn]:
                    line, bufs[conn] = bufs[conn].split(b"\n", 1)
                    try:
                        resp = srv.request(json.loads(line))
                    except Exception as e:  # bad request, or Redis gone: the agent stays up
                        resp = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                    conn.sendall(json.dumps(resp).encode() + b"\n")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m inswitch.apps.hare.agent", description="Hare storage agent in front of a local Redis.")
    p.add_argument("--idx", type=int, required=True)
    p.add_argument("--app", choices=("kv", "lock"), default="kv", help="the application: the KV store over Redis, or the lock manager")
    p.add_argument("--redis", default="", help="Redis's Unix socket (--app kv)")
    p.add_argument("--ctl", required=True, help="Unix socket the controller talks to")
    p.add_argument("--switch-dst", default="10.0.0.1", help="any address through the switch (control packets are answered by it)")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, default=wire.PORT_SERVER, help="queries arrive here (0: any free port, printed as READY PORT)")
    p.add_argument("--key-field", type=int, default=64)
    p.add_argument("--value-size", type=int, default=64)
    p.add_argument("--k", type=int, default=64, help="NOO-Stat's heap size (Hare's K)")
    p.add_argument("--qo-record", type=int, default=0, help="keys DySO's QO-Record keeps between fetches (0: none)")
    p.add_argument("--journal", default="", help="--app lock: the lock table's write-ahead journal, replayed at the start (none: the table lives in memory only)")
    p.add_argument("--journal-compact", type=int, default=20_000, help="records after which the journal is compacted into one snapshot")
    p.add_argument("--journal-fsync", action="store_true", help="fsync the journal before each batch's answers (survives a machine crash; a process kill needs none)")
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
