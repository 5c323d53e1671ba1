"""The processes of `inswitch search --rack`: a search server and the agent, each run inside
a rack host's namespace (`python -m inswitch.apps.netsha.rack_node server|agent ...`).

- server: holds its shard (an .npz written by the orchestrator), indexes it with the
  TLSH-style ternary index (the same seeded hash family as everyone), receives query
  packets (UDP port 7000, multicast to it by the switch's server selection), answers with
  its best candidates in NetSHa answer packets (ToS bit set, up to `per` answers each) to
  the agent.
- agent: sends every query as a query packet (ToS bit set) to the subnet's broadcast
  address in waves, receives the answers, and prints them as JSON.

Both stop on their own: the server after `idle` seconds without a query (and at most
`limit` seconds) or when the agent says it is done (`--stop-servers`), the agent when no
answer came for `idle` seconds after its last wave.

If the switch dies meanwhile (the rack's state file, `--rack-state`, records it), the
answers it held and those in flight are lost: once it is back, the agent sends again every
query sent since a second before it died, and keeps each (query, id) answer once (a query's
top K over the union of its answers is its top K: every answer is a true candidate).
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import sys
import time

import numpy as np

from inswitch import _native

QUERY_PORT = 7000
TOS_BIT = 0x01


# The formats are `wire::netsha`'s; encoding and parsing are the Rust ones, through
# `_native` (bytes of little-endian arrays across the boundary).


def encode_query(qid: int, keys: np.ndarray, vector: np.ndarray) -> bytes:
    """QID | L | L × key | DIM | DIM × f32 (wire::netsha::QueryRepr)."""
    k = np.asarray(keys, dtype="<i8").tobytes()
    v = np.asarray(vector, dtype="<f4").tobytes()
    return _native.netsha_query_encode(qid, k, v)


def decode_query(b: bytes) -> tuple[int, np.ndarray, np.ndarray] | None:
    q = _native.netsha_query_decode(b)
    if q is None:
        return None
    qid, k, v = q
    return qid, np.frombuffer(k, dtype="<i8").astype(np.int64), np.frombuffer(v, dtype="<f4").astype(np.float32)


def encode_answers(qid: int, ids: np.ndarray, dists: np.ndarray) -> bytes:
    """One NetSHa answer payload of one query block: Query# = 1, QID, NUM, (id, f64)×NUM."""
    n = len(ids)
    return _native.netsha_encode(np.full(n, qid, dtype="<u4").tobytes(), np.asarray(ids, dtype="<u4").tobytes(),
                                 np.asarray(dists, dtype="<f8").tobytes())


def decode_answers(b: bytes) -> list[tuple[int, int, float]]:
    """Every (qid, id, distance) of a NetSHa payload; nothing from a malformed one."""
    try:
        q, i, d = _native.netsha_decode(b)
    except ValueError:
        return []
    qs, ids, ds = np.frombuffer(q, "<u4"), np.frombuffer(i, "<u4"), np.frombuffer(d, "<f8")
    return [(int(a), int(x), float(y)) for a, x, y in zip(qs, ids, ds)]


# Loss recovery (not in the paper, whose switch and hosts assume a lossless network): every
# server that receives a query also sends the agent a completion report, and the agent can
# ask a server directly. These are host-to-host messages in plain UDP (ToS bit clear: the
# switch only forwards them), to the agent's and the servers' RECOVERY_PORT:
# - report (server -> agent): "NSRP" | QID u32 | server u16 | n u16 | n × f64, the server's
#   n = min(K, its answers) best distances, ascending;
# - direct ask (agent -> server): "NSDA" | a query packet's payload (`encode_query`);
# - direct answer (server -> agent): "NSDR" | QID u32 | server u16 | n u16 | n × (u32 id,
#   f64 distance), its n best answers, nearest first.
RECOVERY_PORT = 7002
_HEAD = struct.Struct("<4sIHH")
REPORT, DIRECT_ASK, DIRECT_ANSWER = b"NSRP", b"NSDA", b"NSDR"
#: agent -> server, the agent is done (`--stop-servers`): the server stops without waiting
#: out its idle time (a lost one costs only that wait).
STOP = b"NSST"


def encode_report(qid: int, server: int, dists: np.ndarray) -> bytes:
    return _HEAD.pack(REPORT, qid, server, len(dists)) + np.asarray(dists, dtype="<f8").tobytes()


def encode_direct_answer(qid: int, server: int, ids: np.ndarray, dists: np.ndarray) -> bytes:
    rec = np.empty(len(ids), dtype=[("id", "<u4"), ("d", "<f8")])
    rec["id"], rec["d"] = ids, dists
    return _HEAD.pack(DIRECT_ANSWER, qid, server, len(ids)) + rec.tobytes()


def decode_recovery(b: bytes) -> tuple[bytes, int, int, np.ndarray, np.ndarray] | None:
    """(kind, qid, server, ids, distances) of a report or direct answer (ids empty for a
    report); None for anything malformed."""
    if len(b) < _HEAD.size:
        return None
    kind, qid, server, n = _HEAD.unpack_from(b)
    body = b[_HEAD.size :]
    if kind == REPORT and len(body) == 8 * n:
        return kind, qid, server, np.empty(0, dtype=np.int64), np.frombuffer(body, "<f8").astype(np.float64)
    if kind == DIRECT_ANSWER and len(body) == 12 * n:
        rec = np.frombuffer(body, dtype=[("id", "<u4"), ("d", "<f8")])
        return kind, qid, server, rec["id"].astype(np.int64), rec["d"].astype(np.float64)
    return None


def server(args: argparse.Namespace) -> None:
    from .lsh import HashFamily, TernaryIndex, local_answers

    z = np.load(args.shard)
    cfg = json.loads(args.config)
    k = int(cfg.get("k", 50))
    fam = HashFamily(int(z["data"].shape[1]), cfg["tables"], cfg["hashes"], cfg["width"], cfg["seed"])
    index = TernaryIndex(fam, z["data"], z["ids"], cfg["delta"])
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx.bind(("0.0.0.0", QUERY_PORT))
    direct = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    direct.bind(("0.0.0.0", RECOVERY_PORT))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_BIT)
    print("READY", flush=True)
    start = last = time.monotonic()
    served = sent = reports = direct_served = 0
    stopped = False
    while not stopped and time.monotonic() - last < args.idle and time.monotonic() - start < args.limit:
        ready, _, _ = select.select([rx, direct], [], [], 0.2)
        for sock in ready:
            b, _ = sock.recvfrom(65535)
            is_direct = sock is direct
            if is_direct:
                if b[:4] == STOP:
                    stopped = True
                    break
                if b[:4] != DIRECT_ASK:
                    continue
                b = b[4:]
            q = decode_query(b)
            if q is None:
                continue
            last = time.monotonic()
            qid, keys, vec = q
            proj = fam.project(vec[None, :])[0]
            ids, d = local_answers(index, vec, keys, proj, cfg["cap"])
            if is_direct:
                direct.sendto(encode_direct_answer(qid, args.index, ids[:k], d[:k]), (args.agent, RECOVERY_PORT))
                direct_served += 1
                continue
            served += 1
            for s in range(0, len(ids), args.per):
                tx.sendto(encode_answers(qid, ids[s : s + args.per], d[s : s + args.per]), (args.agent, args.agent_port))
                sent += 1
            direct.sendto(encode_report(qid, args.index, d[:k]), (args.agent, RECOVERY_PORT))
            reports += 1
    print(json.dumps({"served": served, "packets": sent, "reports": reports, "direct_served": direct_served}), flush=True)


def expected_servers(selection: dict[tuple[int, int], int], keys: np.ndarray, servers: int) -> int:
    """The bitmap of servers the switch's selection tables send a query to (the OR of its
    L keys' entries; every server when none matches), from the same bucket directories
    the controller installs: the servers whose reports the agent waits for."""
    bits = 0
    for t, key in enumerate(keys.tolist()):
        bits |= selection.get((t, int(key)), 0)
    return bits or (1 << servers) - 1


class Completion:
    """The agent's view of each query: the answers received through the switch (one
    distance per data id, so a duplicate cannot count twice), the servers' reports and
    direct answers (one per server, idempotent).

    A query answered through the switch is complete when every server the selection sends
    it to has reported and the K best distances received equal the K best of the reports'
    union: the global top K lies within the union of the servers' own top K, and every
    answer received is a true candidate, so the K best received are then a true top K. A
    query being completed directly is complete when every selected server's direct answer
    arrived; its top K is theirs."""

    def __init__(self, k: int, expected: list[int]) -> None:
        self.k, self.expected = k, expected
        self.answers: dict[int, dict[int, float]] = {}
        self.reports: dict[int, dict[int, np.ndarray]] = {}
        self.direct: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
        self.direct_mode: set[int] = set()

    def servers(self, q: int) -> list[int]:
        return [s for s in range(self.expected[q].bit_length()) if self.expected[q] >> s & 1]

    def missing_direct(self, q: int) -> list[int]:
        return [s for s in self.servers(q) if s not in self.direct.get(q, {})]

    def complete(self, q: int) -> bool:
        if q in self.direct_mode:
            return not self.missing_direct(q)
        reps = self.reports.get(q, {})
        want = self.servers(q)
        if any(s not in reps for s in want):
            return False
        best = np.sort(np.concatenate([reps[s] for s in want] + [np.empty(0)]))[: self.k]
        got = np.sort(np.fromiter(self.answers.get(q, {}).values(), dtype=np.float64))[: self.k]
        return bool(np.array_equal(best, got))

    def result(self, q: int) -> list[tuple[int, int, float]]:
        if q in self.direct_mode:
            return [(q, int(i), float(d)) for s, (ids, ds) in sorted(self.direct.get(q, {}).items()) if s in self.servers(q) for i, d in zip(ids, ds)]
        return [(q, i, d) for i, d in sorted(self.answers.get(q, {}).items())]


def agent(args: argparse.Namespace) -> None:
    z = np.load(args.queries)
    qv, qk = z["vectors"], z["keys"]
    nq = len(qv)
    sel: dict[tuple[int, int], int] = {}
    server_ips: list[str] = args.server_ips.split(",") if args.server_ips else []
    if args.selection:
        zs = np.load(args.selection)
        sel = {(int(t), int(k)): int(b) for t, k, b in zip(zs["tables"], zs["keys"], zs["bitmaps"])}
    nserv = len(server_ips)
    recover = bool(nserv)
    comp = Completion(args.k, [expected_servers(sel, qk[q], nserv) for q in range(nq)] if recover else [0] * nq)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    rx.bind(("0.0.0.0", args.port))
    rp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    rp.bind(("0.0.0.0", RECOVERY_PORT))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_BIT)
    packets = report_packets = direct_packets = 0
    t0 = time.monotonic()
    deadline = t0 + args.limit

    def drain(idle: float, waiting: set[int], until_idle: bool = False) -> None:
        """Receive until `idle` s pass without a packet, or (recovering, unless
        `until_idle`) every query in `waiting` is complete."""
        nonlocal packets, report_packets, direct_packets
        last = time.monotonic()
        pending = {q for q in waiting if not comp.complete(q)} if recover else set(waiting)
        while time.monotonic() - last < idle and time.monotonic() < deadline and (pending or not recover or until_idle):
            ready, _, _ = select.select([rx, rp], [], [], 0.02)
            for sock in ready:
                b, _ = sock.recvfrom(65535)
                last = time.monotonic()
                touched: set[int] = set()
                if sock is rx:
                    packets += 1
                    for q, i, d in decode_answers(b):
                        if q < nq:
                            comp.answers.setdefault(q, {})[i] = d
                            touched.add(q)
                else:
                    m = decode_recovery(b)
                    if m is None or m[1] >= nq:
                        continue
                    kind, q, s, ids, ds = m
                    if kind == REPORT:
                        report_packets += 1
                        comp.reports.setdefault(q, {})[s] = ds
                    else:
                        direct_packets += 1
                        comp.direct.setdefault(q, {})[s] = (ids, ds)
                    touched.add(q)
                for q in touched & pending:
                    if comp.complete(q):
                        pending.discard(q)

    sent_at = [0.0] * nq
    sends = 0

    def send(queries: list[int]) -> None:
        nonlocal sends
        for w in range(0, len(queries), args.concurrency):
            wave = queries[w : w + args.concurrency]
            for q in wave:
                sent_at[q] = time.time()
                tx.sendto(encode_query(q, qk[q], qv[q]), (args.broadcast, QUERY_PORT))
                sends += 1
            drain(args.wave_idle, set(wave))

    wall0 = time.time()
    send(list(range(nq)))
    drain(args.idle, set(range(nq)))
    first = [q for q in range(nq) if not comp.complete(q)] if recover else []
    # Why the first pass left them incomplete: a selected server's report missing (its
    # query copy or its report lost), or every report in but answers missing (a server's
    # answer packet or the switch's merged answers lost).
    no_report = sum(any(s not in comp.reports.get(q, {}) for s in comp.servers(q)) for q in first)
    reasked = direct_asks = rounds = 0
    direct_queries: set[int] = set()
    handled: set[int] = set()
    if args.rack_state:
        from inswitch.topology import restarts
    while recover and time.monotonic() < deadline:
        todo = [q for q in range(nq) if not comp.complete(q)]
        if not todo:
            break
        if args.rack_state:
            # A switch being restarted forwards nothing: ask again once it is back.
            handled |= {int(r["generation"]) for r in restarts.wait_back(args.rack_state, wall0)}
        rounds += 1
        if rounds <= args.rounds:
            # Ask again through the switch: the servers answer and report again.
            reasked += len(todo)
            send(todo)
            drain(min(args.idle, args.wave_idle * rounds), set(todo))
        else:
            # Host fallback: ask each selected server that has not answered directly.
            for q in todo:
                comp.direct_mode.add(q)
                direct_queries.add(q)
                for s in comp.missing_direct(q):
                    rp.sendto(DIRECT_ASK + encode_query(q, qk[q], qv[q]), (server_ips[s], RECOVERY_PORT))
                    direct_asks += 1
            drain(min(2.0, args.wave_idle * (rounds - args.rounds)), set(todo))
    if not recover and args.rack_state:
        # Without recovery: after a switch restart, send again every query sent since a
        # second before it died.
        from inswitch.topology import restarts

        while True:
            new = [r for r in restarts.wait_back(args.rack_state, wall0) if r["generation"] not in handled]
            if not new:
                break
            handled |= {int(r["generation"]) for r in new}
            died = min(float(r["died_at"]) for r in new)
            redo = [q for q in range(nq) if sent_at[q] >= died - 1.0]
            reasked += len(redo)
            send(redo)
            drain(args.idle, set(redo))
    if args.rack_state:
        handled |= {int(r["generation"]) for r in restarts.read(args.rack_state, wall0)}
    if args.stop_servers:
        for ip in server_ips:
            rp.sendto(STOP, (ip, RECOVERY_PORT))
    seconds = time.monotonic() - t0
    late = 0
    if args.drain_after > 0:
        # Count the answer packets still on their way (a query is complete as soon as its
        # top K is in; the rest of its answers still reach the agent).
        before = packets
        drain(args.drain_after, set(), until_idle=True)
        late = packets - before
    unique = sorted({a for q in range(nq) for a in comp.result(q)})
    incomplete = [q for q in range(nq) if not comp.complete(q)] if recover else []
    print(json.dumps({"packets": packets, "answers": unique, "seconds": seconds, "late_packets": late,
                      "retried_queries": reasked, "restarts_seen": sorted(handled),
                      "recovery": {"enabled": recover, "incomplete_after_first_pass": len(first),
                                   "first_pass_missing_report": no_report, "first_pass_missing_answers": len(first) - no_report, "rounds": rounds,
                                   "query_packets": sends, "reasked_through_switch": reasked, "direct_queries": len(direct_queries),
                                   "direct_asks": direct_asks, "direct_answers": direct_packets, "report_packets": report_packets,
                                   "unrecovered": incomplete}}), flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="rack_node")
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("shard")
    s.add_argument("agent")
    s.add_argument("agent_port", type=int)
    s.add_argument("config")
    s.add_argument("--per", type=int, default=120)
    s.add_argument("--index", type=int, default=0, help="this server's index (bit in the selection bitmaps)")
    s.add_argument("--idle", type=float, default=10.0)
    s.add_argument("--limit", type=float, default=300.0)
    a = sub.add_parser("agent")
    a.add_argument("queries")
    a.add_argument("broadcast")
    a.add_argument("--port", type=int, default=7001)
    a.add_argument("--concurrency", type=int, default=25)
    a.add_argument("--wave-idle", type=float, default=0.3)
    a.add_argument("--idle", type=float, default=1.0)
    a.add_argument("--limit", type=float, default=300.0)
    a.add_argument("--rack-state", default="", help="the rack's state.json: retry after a switch restart")
    a.add_argument("--k", type=int, default=50, help="answers per query (the servers report their best K)")
    a.add_argument("--selection", default="", help="an .npz of the selection entries (tables, keys, bitmaps): whose reports to wait for")
    a.add_argument("--server-ips", default="", help="the servers' addresses, by index, comma-separated; empty: no loss recovery")
    a.add_argument("--drain-after", type=float, default=0.0,
                   help="when done, go on counting answer packets until none came for this many seconds")
    a.add_argument("--stop-servers", action="store_true", help="when done, tell the servers (--server-ips) to stop")
    a.add_argument("--rounds", type=int, default=3, help="asks through the switch of an incomplete query before asking its servers directly")
    args = p.parse_args(argv)
    server(args) if args.role == "server" else agent(args)


if __name__ == "__main__":
    main(sys.argv[1:])
